// The values the SDK returns: an exec's Result, output chunks, gaps, and
// descriptions of sandboxes, files and execs.

import type { Result as PbResult, ExecInfo as PbExecInfo } from "./gen/runbox/v1/runbox_pb.js";
import { ExecState, ResultSchema, Stream } from "./gen/runbox/v1/runbox_pb.js";
import { create } from "@bufbuild/protobuf";
import type { Sandbox as PbSandbox } from "./gen/runbox/v1/sandbox_pb.js";
import { SandboxState } from "./gen/runbox/v1/sandbox_pb.js";
import type { FileInfo as PbFileInfo, PutArchiveResponse } from "./gen/runbox/v1/files_pb.js";
import { FileType } from "./gen/runbox/v1/files_pb.js";

const utf8 = new TextDecoder("utf-8");

/** Bytes as text: UTF-8, invalid bytes as U+FFFD. */
export function decode(b: Uint8Array): string {
  return utf8.decode(b);
}

/** A string field, or its raw-bytes twin when the value was not UTF-8. */
function textOrRaw(text: string, raw: Uint8Array): string {
  return raw.length > 0 ? decode(raw) : text;
}

/**
 * How an exec ended: exit status, why it stopped, and its output. A non-zero
 * exit, a timeout or a cancel is a Result, not an exception; an exception
 * means runbox could not tell how the command ended.
 */
export class Result {
  /** The exec's id. */
  readonly id: string;
  /** The command's own status, or 128+N when signal N killed it (143 after SIGTERM). */
  readonly exitCode: number;
  /** The signal that killed the leader ("TERM", "KILL"), or "". */
  readonly signal: string;
  /** The exec's timeout stopped it (with everything it started). */
  readonly timedOut: boolean;
  /** A cancel stopped it. */
  readonly cancelled: boolean;
  /** Its idle timeout (no output for that long) stopped it. */
  readonly idleTimedOut: boolean;
  /** The sandbox's memory limit killed one of its processes. */
  readonly oomKilled: boolean;
  /** The leader's run time in milliseconds, on the sandbox's clock. */
  readonly durationMs: number;
  /** stdout's head and tail, exact bytes. */
  readonly stdoutRaw: Uint8Array;
  /** stderr's head and tail, exact bytes. */
  readonly stderrRaw: Uint8Array;
  /** Bytes of stdout left out between head and tail. */
  readonly stdoutDropped: number;
  /** Bytes of stderr left out between head and tail. */
  readonly stderrDropped: number;
  /** Every byte stdout produced. */
  readonly stdoutBytes: number;
  /** Every byte stderr produced. */
  readonly stderrBytes: number;
  /** A path in the sandbox holding the full stdout, when it was spilled. */
  readonly stdoutSpill: string;
  /** A path in the sandbox holding the full stderr, when it was spilled. */
  readonly stderrSpill: string;
  /** Processes the stop protocol signalled. */
  readonly killed: number;
  /** Processes still alive after the stop protocol (normally 0). */
  readonly survivors: number;
  /** The leader's pid in the sandbox (information only). */
  readonly pid: number;
  /** The session's directory after the exec (session execs). */
  readonly cwd: string;
  /** Gaps in streamed output (set for streamed execs). */
  readonly streamGaps: number;
  /** Bytes the gaps held. */
  readonly streamLost: number;
  /** The sandbox had been lost and was replaced before this exec ran. */
  readonly recreated: boolean;

  /** Builds a Result from the wire's runbox.v1.Result. */
  constructor(wire: PbResult | undefined, extra: { recreated?: boolean; streamGaps?: number; streamLost?: number } = {}) {
    const r = wire ?? create(ResultSchema);
    this.id = r.id;
    this.exitCode = r.exitCode;
    this.signal = r.signal;
    this.timedOut = r.timedOut;
    this.cancelled = r.cancelled;
    this.idleTimedOut = r.idleTimedOut;
    this.oomKilled = r.oomKilled;
    this.durationMs = Number(r.durationUs) / 1000;
    this.stdoutRaw = r.stdout;
    this.stderrRaw = r.stderr;
    this.stdoutDropped = Number(r.stdoutDropped);
    this.stderrDropped = Number(r.stderrDropped);
    this.stdoutBytes = Number(r.stdoutBytes);
    this.stderrBytes = Number(r.stderrBytes);
    this.stdoutSpill = r.stdoutSpill;
    this.stderrSpill = r.stderrSpill;
    this.killed = r.killed;
    this.survivors = r.survivors;
    this.pid = Number(r.pid);
    this.cwd = textOrRaw(r.cwd, r.cwdRaw);
    this.streamGaps = extra.streamGaps ?? 0;
    this.streamLost = extra.streamLost ?? 0;
    this.recreated = extra.recreated ?? false;
  }

  /** stdout as text. */
  get stdout(): string {
    return decode(this.stdoutRaw);
  }

  /** stderr as text. */
  get stderr(): string {
    return decode(this.stderrRaw);
  }

  /** stdout followed by stderr, as text. */
  get output(): string {
    return this.stdout + this.stderr;
  }

  /** The command exited by itself with status 0. */
  get ok(): boolean {
    return this.exitCode === 0 && !this.timedOut && !this.cancelled && !this.idleTimedOut;
  }
}

/** A piece of an exec's output, as it was read. */
export class Chunk {
  /**
   * @param stream which stream it came from
   * @param seq its sequence number (re-attach from seq + 1 to continue after it)
   * @param data its exact bytes
   */
  constructor(
    readonly stream: "stdout" | "stderr",
    readonly seq: number,
    readonly data: Uint8Array,
  ) {}

  /** The chunk as text (a multi-byte character split between chunks decodes as U+FFFD). */
  get text(): string {
    return decode(this.data);
  }
}

/** Output the sandbox's replay ring no longer held when a stream re-attached. */
export interface Gap {
  /** The first sequence number missing. */
  readonly fromSeq: number;
  /** The first sequence number after the gap. */
  readonly toSeq: number;
  /** How many bytes were lost. */
  readonly bytes: number;
}

/** Makes a Chunk of a wire Output. */
export function chunkOf(stream: Stream, seq: bigint, data: Uint8Array): Chunk {
  return new Chunk(stream === Stream.STDERR ? "stderr" : "stdout", Number(seq), data);
}

/** A sandbox as the server describes it. */
export interface SandboxInfo {
  /** The server's id ("sb-..."), stable across a recreate. */
  readonly id: string;
  /** Its alias, or "". */
  readonly name: string;
  /** The provider that made it ("local", "docker", "host", ...). */
  readonly provider: string;
  /** "ready", or "lost" when its runboxd is gone. */
  readonly state: "ready" | "lost" | "unspecified";
  /** Why it was found lost. */
  readonly lostReason: string;
  /** When it was created. */
  readonly createdAt: Date;
  /** How many times it was recreated. */
  readonly recreated: number;
  /** Execs running in it. */
  readonly runningExecs: number;
  /** Its labels. */
  readonly labels: Readonly<Record<string, string>>;
  /** The provider's own id of it (a container id, a directory name). */
  readonly providerId: string;
  /** The network it was made with ("" is the provider's default). */
  readonly network: string;
  /** The egress policy in force (network "private"), after any setEgress. */
  readonly egress: {
    readonly allow: readonly string[];
    readonly allowCidr: readonly string[];
    readonly deny: readonly string[];
    readonly resolve: Readonly<Record<string, string>>;
  };
  /** Ports reachable through the server's port route (expose), ascending. */
  readonly exposedPorts: readonly number[];
  /** The sandbox is paused (Sandbox.pause). */
  readonly paused: boolean;
}

/** One of the tenant's snapshots (Sandbox.snapshot). */
export interface Snapshot {
  /** Unique within the tenant; pass it as fromSnapshot to Client.create. */
  readonly name: string;
  /** The provider that took it. */
  readonly provider: string;
  /** The sandbox it was taken of. */
  readonly sandboxId: string;
  readonly createdAt: Date;
  /** It holds a copy of the sandbox's workspace. */
  readonly workspace: boolean;
  /** The disk it takes, where the provider knows. */
  readonly bytes: number;
}

/** Makes a Snapshot of the wire's runbox.v1.Snapshot. */
export function snapshotOf(s: { name: string; provider: string; sandboxId: string; createdAtUnixMs: bigint; workspace: boolean; bytes: bigint } | undefined): Snapshot {
  return {
    name: s?.name ?? "",
    provider: s?.provider ?? "",
    sandboxId: s?.sandboxId ?? "",
    createdAt: new Date(Number(s?.createdAtUnixMs ?? 0n)),
    workspace: s?.workspace ?? false,
    bytes: Number(s?.bytes ?? 0n),
  };
}

/** A sandbox port reachable through the server's route (Sandbox.expose). */
export interface ExposedPort {
  /** The TCP port on the sandbox's loopback. */
  readonly port: number;
  /** The route, BASE/sandboxes/{id}/ports/{port}/: send "Authorization: Bearer TOKEN". */
  readonly url: string;
  /** The route with a signature bound to the tenant, sandbox and port: no token needed until expiresAt. */
  readonly signedUrl: string;
  /** When the signed URL expires. */
  readonly expiresAt: Date;
}

/** Makes a SandboxInfo of the wire's runbox.v1.Sandbox. */
export function sandboxInfoOf(s: PbSandbox | undefined): SandboxInfo {
  return {
    id: s?.id ?? "",
    name: s?.name ?? "",
    provider: s?.provider ?? "",
    state: s?.state === SandboxState.READY ? "ready" : s?.state === SandboxState.LOST ? "lost" : "unspecified",
    lostReason: s?.lostReason ?? "",
    createdAt: new Date(Number(s?.createdAtUnixMs ?? 0n)),
    recreated: s?.recreated ?? 0,
    runningExecs: s?.runningExecs ?? 0,
    labels: { ...(s?.spec?.labels ?? {}) },
    providerId: s?.providerId ?? "",
    network: s?.spec?.network ?? "",
    egress: {
      allow: [...(s?.spec?.egress?.allow ?? [])],
      allowCidr: [...(s?.spec?.egress?.allowCidr ?? [])],
      deny: [...(s?.spec?.egress?.deny ?? [])],
      resolve: { ...(s?.spec?.egress?.resolve ?? {}) },
    },
    exposedPorts: [...(s?.exposedPorts ?? [])],
    paused: s?.paused ?? false,
  };
}

/** A path in the sandbox, as Stat and ListDir describe it. */
export interface FileInfo {
  /** The path (relative to the listed directory for a listing). */
  readonly path: string;
  /** Its exact bytes, when they are not UTF-8. */
  readonly pathRaw: Uint8Array;
  /** "file", "dir", "symlink" or "other". */
  readonly type: "file" | "dir" | "symlink" | "other";
  /** Permission bits. */
  readonly mode: number;
  /** Size in bytes. */
  readonly size: number;
  /** Modification time in nanoseconds since the epoch. */
  readonly mtimeNs: bigint;
  /** A symlink's target. */
  readonly linkTarget: string;
}

const fileTypes: Record<number, FileInfo["type"]> = {
  [FileType.REGULAR]: "file",
  [FileType.DIRECTORY]: "dir",
  [FileType.SYMLINK]: "symlink",
};

/** Makes a FileInfo of the wire's runbox.v1.FileInfo. */
export function fileInfoOf(f: PbFileInfo | undefined): FileInfo {
  const raw = f?.path ?? new Uint8Array();
  return {
    path: decode(raw),
    pathRaw: raw,
    type: fileTypes[f?.type ?? 0] ?? "other",
    mode: f?.mode ?? 0,
    size: Number(f?.size ?? 0n),
    mtimeNs: f?.mtimeNs ?? 0n,
    linkTarget: decode(f?.linkTarget ?? new Uint8Array()),
  };
}

/** What an archive upload did. */
export interface ArchiveStats {
  readonly files: number;
  readonly dirs: number;
  readonly links: number;
  readonly bytes: number;
  readonly deleted: number;
}

/** Makes ArchiveStats of the wire's PutArchiveResponse. */
export function archiveStatsOf(r: PutArchiveResponse): ArchiveStats {
  return {
    files: Number(r.files),
    dirs: Number(r.dirs),
    links: Number(r.links),
    bytes: Number(r.bytes),
    deleted: Number(r.deleted),
  };
}

/** An exec the sandbox's runboxd keeps: running, or recently exited. */
export interface ExecInfo {
  readonly id: string;
  readonly pid: number;
  readonly state: "starting" | "running" | "stopping" | "exited" | "unspecified";
  readonly command: string;
  readonly startedAt: Date;
  /** Its Result, once exited. */
  readonly result?: Result;
  /** Processes of the exec still alive. */
  readonly liveProcesses: number;
}

const execStates: Record<number, ExecInfo["state"]> = {
  [ExecState.STARTING]: "starting",
  [ExecState.RUNNING]: "running",
  [ExecState.STOPPING]: "stopping",
  [ExecState.EXITED]: "exited",
};

/** Makes an ExecInfo of the wire's runbox.v1.ExecInfo. */
export function execInfoOf(e: PbExecInfo): ExecInfo {
  return {
    id: e.id,
    pid: Number(e.pid),
    state: execStates[e.state] ?? "unspecified",
    command: textOrRaw(e.command, e.commandRaw),
    startedAt: new Date(Number(e.startedAtUnixMs)),
    result: e.result ? new Result(e.result) : undefined,
    liveProcesses: e.liveProcesses,
  };
}
