// A sandbox of a runbox server: run commands in it, stream them, move files.

import { randomBytes } from "node:crypto";
import type { Client, CallOptions } from "./client.js";
import { egressPolicy, ms, sleep, type EgressRules } from "./client.js";
import { InvalidArgument, NotFound, SandboxLost, isTransient, toRunboxError } from "./errors.js";
import type { ExecSpecSchema } from "./gen/runbox/v1/runbox_pb.js";
import { SpillMode } from "./gen/runbox/v1/runbox_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Result, execInfoOf, sandboxInfoOf, snapshotOf, type ExecInfo, type ExposedPort, type SandboxInfo, type Snapshot } from "./models.js";
import { Process } from "./process.js";
import { Files } from "./files.js";

/** The stop protocol's default time between SIGTERM and SIGKILL, ms. */
export const DEFAULT_GRACE_MS = 5_000;

// Linux's signal numbers (the sandbox's), whatever this machine's are.
const SIGNALS: Record<string, number> = {
  HUP: 1, INT: 2, QUIT: 3, ILL: 4, TRAP: 5, ABRT: 6, BUS: 7, FPE: 8, KILL: 9, USR1: 10, SEGV: 11,
  USR2: 12, PIPE: 13, ALRM: 14, TERM: 15, STKFLT: 16, CHLD: 17, CONT: 18, STOP: 19, TSTP: 20,
  TTIN: 21, TTOU: 22, URG: 23, XCPU: 24, XFSZ: 25, VTALRM: 26, PROF: 27, WINCH: 28, IO: 29, PWR: 30, SYS: 31,
};

/** A command: a shell string (bash -c, or sh -c where bash is absent), or an argv run directly. */
export type Command = string | readonly string[];

/** Options of Sandbox.run and Sandbox.start. */
export interface RunOptions extends CallOptions {
  /** Milliseconds the command may run; then it and everything it started are stopped and the Result says timedOut. */
  timeoutMs?: number;
  /** Its working directory in the sandbox. */
  cwd?: string;
  /** Environment variables to add. */
  env?: Record<string, string>;
  /** Bytes or text given as stdin, then closed; without it stdin is /dev/null. */
  stdin?: Uint8Array | string;
  /** A shell session: start in its directory and exported environment; a normal exit saves them back. */
  session?: string;
  /** Milliseconds between SIGTERM and SIGKILL (default 5 000). */
  graceMs?: number;
  /** Stop it after this many ms without output. */
  idleTimeoutMs?: number;
  /** The exec's id (default: a fresh one). Running an id that exists returns that exec's result. */
  id?: string;
  /** Run a login shell. */
  login?: boolean;
  /** How much of the start of each stream the Result keeps (default 32 KiB). */
  headBytes?: number;
  /** How much of the end of each stream the Result keeps (default 32 KiB). */
  tailBytes?: number;
  /** When the full output is also written to a file in the sandbox. */
  spill?: "auto" | "always" | "never";
}

/** Options of Sandbox.start. */
export interface StartOptions extends RunOptions {
  /** Keep stdin open for Process.writeStdin. */
  stdinStream?: boolean;
  /** false: only the Result, no chunks (default true). */
  streamOutput?: boolean;
}

/** Returns a fresh exec id: the SDK names every exec before sending it, so a repeated call names the same exec. */
export function newExecId(): string {
  return "ts-" + randomBytes(8).toString("hex");
}

/** A Linux signal number of a number or a name ("INT", "SIGINT"). */
export function signalNumber(sig: number | string): number {
  if (typeof sig === "number") return sig;
  let name = sig.toUpperCase();
  if (name.startsWith("SIG")) name = name.slice(3);
  const n = SIGNALS[name];
  if (n === undefined) throw new InvalidArgument(`signal ${JSON.stringify(sig)}: not a Linux signal name`);
  return n;
}

/**
 * A sandbox owned by the client's tenant. Get one from Client.create,
 * Client.get or Client.list. `await using sb = await client.create()`
 * removes it (with force) when the block ends; so does close().
 */
export class Sandbox implements AsyncDisposable {
  /** The server's id ("sb-..."), stable across a recreate. */
  readonly id: string;
  /** Its file calls. */
  readonly files: Files;

  constructor(
    /** The client it belongs to. */
    readonly client: Client,
    /** What the server said about it when last read. */
    public info: SandboxInfo,
  ) {
    this.id = info.id;
    this.files = new Files(this);
  }

  /** Reads the sandbox's state again (state "lost" when its runboxd is gone). */
  async refresh(opts: CallOptions = {}): Promise<SandboxInfo> {
    const out = await this.client.call(
      (signal) => this.client.sandboxes.get({ id: this.id }, { signal, timeoutMs: this.client.timeoutMs }),
      opts.signal,
      true,
    );
    this.info = sandboxInfoOf(out.sandbox);
    return this.info;
  }

  /**
   * Replaces the egress policy of a sandbox made with network "private"
   * (no rule: it reaches nothing); it applies to every connection opened
   * from then on. Returns the sandbox as the server now describes it.
   */
  async setEgress(rules: EgressRules, opts: CallOptions = {}): Promise<SandboxInfo> {
    const egress = egressPolicy(rules) ?? {};
    const out = await this.client.call(
      (signal) => this.client.sandboxes.setEgress({ sandboxId: this.id, egress }, { signal, timeoutMs: this.client.timeoutMs }),
      opts.signal,
      true,
    );
    this.info = sandboxInfoOf(out.sandbox);
    return this.info;
  }

  /**
   * Makes a port on the sandbox's loopback reachable through the server's
   * route (HTTP and WebSocket) and returns its URLs: url for a caller with
   * the tenant's token, signedUrl (valid ttlMs, default one hour, at most
   * seven days) for anyone holding it. A port never exposed is not reachable.
   */
  async expose(port: number, opts: CallOptions & { ttlMs?: number } = {}): Promise<ExposedPort> {
    const out = await this.client.call(
      (signal) =>
        this.client.sandboxes.exposePort(
          { sandboxId: this.id, port, urlTtlMs: ms(opts.ttlMs) },
          { signal, timeoutMs: this.client.timeoutMs },
        ),
      opts.signal,
      true,
    );
    return { port, url: out.url, signedUrl: out.signedUrl, expiresAt: new Date(Number(out.expiresAtUnixMs)) };
  }

  /** Freezes every process of the sandbox's commands (docker: the container); a run on it then fails with SandboxPaused. */
  async pause(opts: CallOptions = {}): Promise<void> {
    const out = await this.client.call(
      (signal) => this.client.sandboxes.pauseSandbox({ sandboxId: this.id }, { signal, timeoutMs: this.client.timeoutMs }),
      opts.signal,
      true,
    );
    this.info = sandboxInfoOf(out.sandbox);
  }

  /** Thaws what pause froze: every exec goes on with the time it had left. */
  async resume(opts: CallOptions = {}): Promise<void> {
    const out = await this.client.call(
      (signal) => this.client.sandboxes.resumeSandbox({ sandboxId: this.id }, { signal, timeoutMs: this.client.timeoutMs }),
      opts.signal,
      true,
    );
    this.info = sandboxInfoOf(out.sandbox);
  }

  /** Takes a snapshot of the sandbox's files (and workspace unless noWorkspace) as one of the tenant's snapshots. */
  async snapshot(opts: CallOptions & { name?: string; noWorkspace?: boolean } = {}): Promise<Snapshot> {
    const out = await this.client.call(
      (signal) =>
        this.client.sandboxes.createSnapshot(
          { sandboxId: this.id, name: opts.name ?? "", noWorkspace: opts.noWorkspace ?? false },
          { signal, timeoutMs: this.client.timeoutMs },
        ),
      opts.signal,
      false,
    );
    return snapshotOf(out.snapshot);
  }

  /** Makes count independent sandboxes from a snapshot of this one (the snapshot is kept). */
  async fork(count = 1, opts: CallOptions & { noWorkspace?: boolean } = {}): Promise<Sandbox[]> {
    const out = await this.client.call(
      (signal) =>
        this.client.sandboxes.forkSandbox(
          { sandboxId: this.id, count, noWorkspace: opts.noWorkspace ?? false },
          { signal, timeoutMs: this.client.timeoutMs },
        ),
      opts.signal,
      false,
    );
    return out.sandboxes.map((s) => new Sandbox(this.client, sandboxInfoOf(s)));
  }

  /** Closes a port's route: its token access and every signed URL are refused from then on. */
  async unexpose(port: number, opts: CallOptions = {}): Promise<void> {
    await this.client.call(
      (signal) => this.client.sandboxes.unexposePort({ sandboxId: this.id, port }, { signal, timeoutMs: this.client.timeoutMs }),
      opts.signal,
      true,
    );
  }

  /** Stops every exec with the stop protocol and destroys the sandbox. A lost sandbox needs force. */
  remove(opts: CallOptions & { force?: boolean } = {}): Promise<void> {
    return this.client.remove(this.id, opts);
  }

  /** Removes the sandbox (force), as the end of an `await using` block does; one already gone is fine. */
  async close(opts: CallOptions = {}): Promise<void> {
    try {
      await this.remove({ ...opts, force: true });
    } catch (err) {
      if (!(err instanceof NotFound)) throw err;
    }
  }

  /** For `await using sb = await client.create()`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Runs a command to its end and returns its Result. A non-zero exit, a
   * timeout or a cancel is in the Result; an error means runbox could not
   * run the command or learn how it ended (InvalidSpec, SpawnError,
   * SandboxLost, ...). The call's own deadline is timeout + grace +
   * headroom, so the sandbox's deadline always comes first. If the
   * connection breaks, the call is made again with the same exec id, which
   * attaches to the running exec: a command never runs twice. Aborting the
   * signal cancels the exec in the sandbox, then rejects.
   */
  async run(command: Command, opts: RunOptions = {}): Promise<Result> {
    const spec = execSpec(command, opts);
    const deadline = this.deadline(opts);
    let brokeAt = 0;
    let backoff = 50;
    for (;;) {
      try {
        const out = await this.client.sandboxes.run({ sandboxId: this.id, spec }, { signal: opts.signal, timeoutMs: deadline });
        return new Result(out.result, { recreated: out.recreated });
      } catch (err) {
        if (opts.signal?.aborted) {
          await this.cancelQuietly(spec.id);
          throw opts.signal.reason;
        }
        if (!isTransient(err)) throw toRunboxError(err);
        const now = performance.now();
        brokeAt ||= now;
        const left = this.client.reconnectWindowMs - (now - brokeAt);
        if (left <= 0) {
          throw new SandboxLost(`exec ${spec.id}: no answer for ${this.client.reconnectWindowMs} ms: ${(err as Error).message}`, { cause: err });
        }
        try {
          await sleep(Math.min(backoff, left), opts.signal);
        } catch (reason) {
          await this.cancelQuietly(spec.id);
          throw reason;
        }
        backoff = Math.min(backoff * 2, 1000);
      }
    }
  }

  /**
   * Starts a command and returns its Process once it has started (a
   * refused command rejects here). Iterate over the Process with
   * `for await` for its output chunks; wait() for its Result.
   */
  async start(command: Command, opts: StartOptions = {}): Promise<Process> {
    const spec = execSpec(command, opts);
    spec.stdinStream = opts.stdinStream ?? false;
    const streamOutput = opts.streamOutput ?? true;
    const p = new Process(this, spec.id, {
      run: { spec, streamOutput },
      streamOutput,
      fromSeq: 1,
      timeoutMs: this.deadline(opts),
    });
    try {
      await p.started(opts.signal);
    } catch (err) {
      if (opts.signal?.aborted) await this.cancelQuietly(spec.id);
      p.close();
      throw err;
    }
    return p;
  }

  /**
   * Follows an exec that is running (or has exited and is still retained),
   * replaying its output from sequence number fromSeq (default 1) as far
   * as the sandbox's replay ring reaches. ExecNotFound for an unknown id.
   */
  async attach(execId: string, opts: CallOptions & { fromSeq?: number; streamOutput?: boolean } = {}): Promise<Process> {
    const p = new Process(this, execId, { streamOutput: opts.streamOutput ?? true, fromSeq: opts.fromSeq ?? 1 });
    try {
      await p.started(opts.signal);
    } catch (err) {
      p.close();
      throw err;
    }
    return p;
  }

  /**
   * Stops an exec with the stop protocol (idempotent): SIGTERM to its
   * whole tree, grace, SIGKILL. An id not started yet gets a tombstone, so
   * a later start with it is refused (ExecCancelled). Returns whether the
   * id was known.
   */
  async cancel(execId: string, opts: CallOptions & { graceMs?: number } = {}): Promise<boolean> {
    const out = await this.client.call(
      (signal) => this.client.execs.cancel({ id: execId, graceMs: ms(opts.graceMs) }, this.callOptions(signal)),
      opts.signal,
      true,
    );
    return out.known;
  }

  /** Sends a signal (a number or a name, "INT"/"SIGINT") to every process of an exec; returns how many. NotRunning once it exited. */
  async signal(execId: string, sig: number | string, opts: CallOptions = {}): Promise<number> {
    const signal = signalNumber(sig);
    const out = await this.client.call(
      (s) => this.client.execs.signal({ id: execId, signal }, this.callOptions(s)),
      opts.signal,
      false,
    );
    return out.signalled;
  }

  /**
   * The execs the sandbox's runboxd keeps: running, and recently exited.
   * With `omitOutput` each exited exec's result comes without its stdout
   * and stderr (both empty; the byte counts and everything else still
   * come): the kept results' output can add up to tens of MiB, which a
   * caller that reads only states and exit codes need not fetch.
   */
  async execs(opts: CallOptions & { omitOutput?: boolean } = {}): Promise<ExecInfo[]> {
    const out = await this.client.call(
      (signal) => this.client.execs.list({ omitOutput: opts.omitOutput ?? false }, this.callOptions(signal)),
      opts.signal,
      true,
    );
    return out.execs.map(execInfoOf);
  }

  /** Forgets a shell session (SessionNotFound if there is none). */
  async deleteSession(name: string, opts: CallOptions = {}): Promise<void> {
    await this.client.call((signal) => this.client.execs.deleteSession({ name }, this.callOptions(signal)), opts.signal, false);
  }

  /** @internal The options of a call routed to this sandbox. */
  callOptions(signal?: AbortSignal, timeoutMs?: number): { signal?: AbortSignal; timeoutMs?: number; headers: Record<string, string> } {
    return { signal, timeoutMs: timeoutMs ?? this.client.timeoutMs, headers: { "Runbox-Sandbox": this.id } };
  }

  /** Cancels an exec on behalf of an aborted call, ignoring every failure. */
  private async cancelQuietly(execId: string): Promise<void> {
    try {
      await this.client.execs.cancel({ id: execId }, this.callOptions(undefined, this.client.headroomMs));
    } catch {
      // the abort is what the caller must see
    }
  }

  /** The call's own deadline: timeout + grace + headroom, or none without a timeout. */
  private deadline(opts: RunOptions): number | undefined {
    if (!opts.timeoutMs || opts.timeoutMs <= 0) return undefined;
    return opts.timeoutMs + Math.max(opts.graceMs ?? DEFAULT_GRACE_MS, 0) + this.client.headroomMs;
  }
}

const spills: Record<string, SpillMode> = { auto: SpillMode.AUTO, always: SpillMode.ALWAYS, never: SpillMode.NEVER };

/** The runbox.v1.ExecSpec of a command and its options. */
function execSpec(command: Command, o: RunOptions): MessageInitShape<typeof ExecSpecSchema> & { id: string } {
  if (typeof command !== "string" && !Array.isArray(command)) {
    throw new InvalidArgument("command: give a string (shell) or an array of strings (argv)");
  }
  if (o.spill !== undefined && !(o.spill in spills)) throw new InvalidArgument(`spill ${JSON.stringify(o.spill)}: want auto, always or never`);
  return {
    id: o.id || newExecId(),
    command: typeof command === "string" ? command : "",
    argv: typeof command === "string" ? [] : command.map(String),
    cwd: o.cwd,
    session: o.session,
    env: o.env,
    stdin: typeof o.stdin === "string" ? new TextEncoder().encode(o.stdin) : o.stdin,
    timeoutMs: ms(o.timeoutMs),
    graceMs: ms(o.graceMs),
    idleTimeoutMs: ms(o.idleTimeoutMs),
    headBytes: o.headBytes === undefined ? undefined : BigInt(o.headBytes),
    tailBytes: o.tailBytes === undefined ? undefined : BigInt(o.tailBytes),
    login: o.login,
    spill: o.spill === undefined ? undefined : spills[o.spill],
  };
}
