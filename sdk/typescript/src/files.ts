// Files in a sandbox, moved as streams by its runboxd (FilesService).
// Single files travel as a stream of messages; whole trees as tar streams
// (uploadDir, downloadDir). With root, a path is resolved beneath that
// directory in the sandbox, and neither ".." nor a symlink can leave it
// (EscapesRoot).

import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, stat as fsStat } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import * as tar from "tar";
import type { CallOptions } from "./client.js";
import { EscapesRoot, FileNotFound, InvalidPath, toRunboxError } from "./errors.js";
import { archiveStatsOf, decode, fileInfoOf, type ArchiveStats, type FileInfo } from "./models.js";
import type { Sandbox } from "./sandbox.js";

// Data per message: 1 MiB, well under the 7 MiB limit.
const CHUNK = 1 << 20;
const utf8 = new TextEncoder();

/** Where a path is resolved: beneath root when given, else the runboxd's directory (the workspace). */
export interface PathOptions extends CallOptions {
  /** A directory in the sandbox the path must stay beneath. */
  root?: string;
}

/** Bytes in CHUNK-sized pieces. */
async function* pieces(data: Uint8Array | string | AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  if (typeof data === "string") data = utf8.encode(data);
  if (data instanceof Uint8Array) {
    for (let i = 0; i < data.length; i += CHUNK) yield data.subarray(i, i + CHUNK);
    return;
  }
  for await (const c of data) if (c.length > 0) yield c;
}

/** The file calls of one sandbox (sandbox.files). Relative paths are relative to the workspace, or to root. */
export class Files {
  readonly #sb: Sandbox;

  /** @internal */
  constructor(sandbox: Sandbox) {
    this.#sb = sandbox;
  }

  get #rpc() {
    return this.#sb.client.files;
  }

  /** Runs a server-streaming call to its end, errors as RunboxError classes. */
  async *#stream<T>(open: (o: ReturnType<Sandbox["callOptions"]>) => AsyncIterable<T>, signal?: AbortSignal): AsyncGenerator<T> {
    try {
      yield* open(this.#sb.callOptions(signal));
    } catch (err) {
      throw toRunboxError(err, signal);
    }
  }

  /** A file's bytes, from offset for length bytes (0: to the end). FileNotFound, IsDirectory, ... */
  async read(p: string, opts: PathOptions & { offset?: number; length?: number } = {}): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    const req = { root: opts.root, path: p, offset: BigInt(opts.offset ?? 0), length: BigInt(opts.length ?? 0) };
    for await (const m of this.#stream((o) => this.#rpc.readFile(req, o), opts.signal)) {
      if (m.data.length > 0) parts.push(m.data);
    }
    return Buffer.concat(parts);
  }

  /** A file's content as UTF-8 text. */
  async readText(p: string, opts: PathOptions = {}): Promise<string> {
    return decode(await this.read(p, opts));
  }

  /**
   * Writes a file from bytes, text (UTF-8) or an async iterable of bytes
   * (a Node Readable), replacing it atomically (readers see the old content
   * or the new, never a mix) unless inPlace. Missing parents are created
   * unless createParents is false. Returns its info.
   */
  async write(
    p: string,
    data: Uint8Array | string | AsyncIterable<Uint8Array>,
    opts: PathOptions & { mode?: number; createParents?: boolean; inPlace?: boolean } = {},
  ): Promise<FileInfo> {
    const header = { root: opts.root, path: p, mode: opts.mode ?? 0o644, createParents: opts.createParents ?? true, inPlace: opts.inPlace ?? false };
    async function* messages() {
      yield { msg: { case: "header" as const, value: header } };
      for await (const c of pieces(data)) yield { msg: { case: "data" as const, value: c } };
    }
    const out = await this.#sb.client.call((signal) => this.#rpc.writeFile(messages(), this.#sb.callOptions(signal)), opts.signal, false);
    return fileInfoOf(out.info ?? { path: utf8.encode(p) } as never);
  }

  /** Describes a path (a final symlink itself, unless followLinks). */
  async stat(p: string, opts: PathOptions & { followLinks?: boolean } = {}): Promise<FileInfo> {
    const out = await this.#sb.client.call(
      (signal) => this.#rpc.stat({ root: opts.root, path: p, followLinks: opts.followLinks ?? false }, this.#sb.callOptions(signal)),
      opts.signal,
      true,
    );
    return fileInfoOf(out.info);
  }

  /** Whether a path exists (a dangling symlink does). */
  async exists(p: string, opts: PathOptions = {}): Promise<boolean> {
    try {
      await this.stat(p, opts);
      return true;
    } catch (err) {
      if (err instanceof FileNotFound) return false;
      throw err;
    }
  }

  /** Lists a directory; recursive descends (depth levels, 0: all). Paths are relative to the directory. */
  async list(p: string, opts: PathOptions & { recursive?: boolean; depth?: number } = {}): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    const req = { root: opts.root, path: p, recursive: opts.recursive ?? false, depth: opts.depth ?? 0 };
    for await (const m of this.#stream((o) => this.#rpc.listDir(req, o), opts.signal)) out.push(...m.entries.map(fileInfoOf));
    return out;
  }

  /** Creates a directory (with its parents, unless parents is false). */
  async mkdir(p: string, opts: PathOptions & { mode?: number; parents?: boolean } = {}): Promise<void> {
    const req = { root: opts.root, path: p, mode: opts.mode ?? 0o755, parents: opts.parents ?? true };
    await this.#sb.client.call((signal) => this.#rpc.makeDir(req, this.#sb.callOptions(signal)), opts.signal, false);
  }

  /** Removes a file, link or empty directory; a whole tree when recursive. */
  async remove(p: string, opts: PathOptions & { recursive?: boolean } = {}): Promise<void> {
    const req = { root: opts.root, path: p, recursive: opts.recursive ?? false };
    await this.#sb.client.call((signal) => this.#rpc.remove(req, this.#sb.callOptions(signal)), opts.signal, false);
  }

  /** Renames a path, replacing to when it is a file. */
  async move(from: string, to: string, opts: PathOptions = {}): Promise<void> {
    await this.#sb.client.call((signal) => this.#rpc.move({ root: opts.root, from, to }, this.#sb.callOptions(signal)), opts.signal, false);
  }

  /**
   * Extracts a tar stream under a sandbox directory, created if missing,
   * after removing the paths in delete (relative to it). An entry that
   * would land outside the directory fails the whole call (EscapesRoot).
   */
  async putArchive(remoteDir: string, archive: AsyncIterable<Uint8Array>, opts: PathOptions & { delete?: string[] } = {}): Promise<ArchiveStats> {
    const header = { root: opts.root, path: remoteDir, delete: (opts.delete ?? []).map((d) => utf8.encode(d)) };
    async function* messages() {
      yield { msg: { case: "header" as const, value: header } };
      for await (const c of pieces(archive)) yield { msg: { case: "data" as const, value: c } };
    }
    const out = await this.#sb.client.call((signal) => this.#rpc.putArchive(messages(), this.#sb.callOptions(signal)), opts.signal, false);
    return archiveStatsOf(out);
  }

  /** A sandbox path (a tree) as a tar stream, entries named relative to it; exclude takes .gitignore-style patterns. */
  async *getArchive(remotePath: string, opts: PathOptions & { exclude?: string[] } = {}): AsyncGenerator<Uint8Array> {
    const req = { root: opts.root, path: remotePath, exclude: opts.exclude ?? [] };
    for await (const m of this.#stream((o) => this.#rpc.getArchive(req, o), opts.signal)) {
      if (m.data.length > 0) yield m.data;
    }
  }

  /**
   * Copies the contents of a local directory into a sandbox directory as
   * one tar stream. Modes, mtimes (to the millisecond), empty directories
   * and symlinks (as links, never followed) are kept; ownership is not.
   */
  async uploadDir(localDir: string, remoteDir: string, opts: PathOptions & { delete?: string[] } = {}): Promise<ArchiveStats> {
    const st = await fsStat(localDir).catch(() => undefined);
    if (!st?.isDirectory()) throw new InvalidPath(`uploadDir: ${JSON.stringify(localDir)} is not a directory`);
    const names = (await readdir(localDir)).sort();
    const archive = tar.create({ cwd: localDir, portable: true, follow: false }, names);
    return this.putArchive(remoteDir, archive as AsyncIterable<Uint8Array>, opts);
  }

  /**
   * Copies the contents of a sandbox directory into a local directory
   * (created if missing) and returns the entry names written. The archive
   * is checked whole before anything is written: an entry that would land
   * outside localDir (an absolute name, "..", a path through a link, a
   * link pointing out) throws EscapesRoot, a device or fifo InvalidPath.
   */
  async downloadDir(remoteDir: string, localDir: string, opts: PathOptions & { exclude?: string[] } = {}): Promise<string[]> {
    const spool = await mkdtemp(path.join(tmpdir(), "runbox-download-"));
    const file = path.join(spool, "archive.tar");
    try {
      await pipeline(this.getArchive(remoteDir, opts), createWriteStream(file));
      const names: string[] = [];
      const links = new Set<string>();
      let refused: unknown;
      await tar.list({
        file,
        onReadEntry: (e) => {
          try {
            if (refused === undefined) checkEntry(e.path, e.type, e.linkpath ?? "", links);
          } catch (err) {
            refused = err;
          }
          names.push(e.path.replace(/\/+$/, ""));
        },
      });
      if (refused !== undefined) throw refused;
      await mkdir(localDir, { recursive: true });
      await pipeline(createReadStream(file), tar.extract({ cwd: localDir, strict: true, preserveOwner: false }));
      return names;
    } finally {
      await rm(spool, { recursive: true, force: true });
    }
  }
}

const ALLOWED = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink", "Link"]);

/** Refuses an archive entry that would be written outside the destination, or is not a file, directory or link. */
function checkEntry(name: string, type: string, linkpath: string, links: Set<string>): void {
  const clean = name.replace(/\/+$/, "");
  const parts = clean.split("/");
  if (path.posix.isAbsolute(name) || parts.includes("..")) throw new EscapesRoot(`archive entry ${JSON.stringify(name)} is outside the directory`);
  for (let i = 1; i < parts.length; i++) {
    if (links.has(parts.slice(0, i).join("/"))) throw new EscapesRoot(`archive entry ${JSON.stringify(name)} goes through a link`);
  }
  if (!ALLOWED.has(type)) throw new InvalidPath(`archive entry ${JSON.stringify(name)}: a ${type}, not a file, directory or link`);
  if (type === "SymbolicLink" || type === "Link") {
    const target = type === "Link" ? linkpath : path.posix.join(path.posix.dirname(clean), linkpath);
    if (path.posix.isAbsolute(linkpath) || path.posix.normalize(target).split("/")[0] === "..") {
      throw new EscapesRoot(`archive entry ${JSON.stringify(name)} links outside the directory (${JSON.stringify(linkpath)})`);
    }
    if (type === "SymbolicLink") links.add(clean);
  }
}
