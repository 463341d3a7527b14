// The client of a runbox server: create, find, list and remove sandboxes.

import { createClient, type Client as ConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { SandboxService } from "./gen/runbox/v1/sandbox_pb.js";
import { RunboxService } from "./gen/runbox/v1/runbox_pb.js";
import { FilesService } from "./gen/runbox/v1/files_pb.js";
import { Unauthenticated, InvalidArgument, toRunboxError, isTransient, SandboxLost } from "./errors.js";
import { sandboxInfoOf, snapshotOf, type Snapshot } from "./models.js";
import { Sandbox } from "./sandbox.js";

/** The server address used when neither host nor RUNBOX_HOST is set. */
export const DEFAULT_HOST = "http://127.0.0.1:7070";

/** Options of a Client. */
export interface ClientOptions {
  /** The server's URL, http://HOST:PORT or https://... (default: $RUNBOX_HOST, else DEFAULT_HOST). */
  host?: string;
  /** A bearer token from `runbox token create` (default: $RUNBOX_TOKEN). */
  token?: string;
  /** Milliseconds to wait for the answer of a call that runs no command (default 120 000). */
  timeoutMs?: number;
  /** Milliseconds added to a command's timeout and grace for the call's own deadline (default 5 000). */
  headroomMs?: number;
  /** Milliseconds a running exec is followed through broken connections before SandboxLost (default 15 000). */
  reconnectWindowMs?: number;
  /** TLS options (a CA) for an https:// server, passed to node:http2's connect. */
  tls?: { ca?: string | Buffer | Array<string | Buffer> };
}

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call: it then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of Client.create. */
export interface CreateOptions extends CallOptions {
  /** One of the tenant's snapshots (Sandbox.snapshot) to start from. */
  fromSnapshot?: string;
  /** "local", "docker", "host", ... (default: the server's). */
  provider?: string;
  /** An alias, unique within the tenant. */
  name?: string;
  /** The docker image. */
  image?: string;
  /** A directory on the server's machine under one of its --workdir-root s. */
  workdir?: string;
  /** A memory limit in bytes, or "512M", "2G". */
  memory?: number | string;
  /** A limit on the number of processes. */
  pids?: number;
  /** A CPU limit. */
  cpus?: number;
  /** "none", "host" or "private" (loopback only; egress through the sandbox's proxy by allow). */
  network?: string;
  /** With network "private": names the sandbox may reach ("pypi.org", "*.example.com", "*"). */
  allow?: string[];
  /** With network "private": address ranges that may be reached although not public (within the server's --allow-egress-cidr). */
  allowCidr?: string[];
  /** Names or ranges refused whatever allow says. */
  deny?: string[];
  /** Names pinned to addresses on the host side. */
  resolve?: Record<string, string>;
  /** Key/value labels; list() filters by them. */
  labels?: Record<string, string>;
  /** Remove the sandbox after this many ms with no exec running and no client attached. */
  idleTtlMs?: number;
  /** Remove it this many ms after creation. */
  maxLifetimeMs?: number;
  /** When it is found lost, the next call that uses it gets a fresh one under the same id. */
  recreate?: boolean;
}

const SIZE = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$/i;

/** A size in bytes: a number as is, or "512M", "2G", "1.5GiB" (powers of 1024). */
export function parseSize(size: number | string): bigint {
  if (typeof size === "number") return BigInt(Math.trunc(size));
  const m = SIZE.exec(size);
  if (!m) throw new InvalidArgument(`size ${JSON.stringify(size)}: want bytes, or a number with K, M, G or T`);
  const power = " KMGT".indexOf((m[2] || " ").toUpperCase());
  return BigInt(Math.trunc(Number(m[1]) * 1024 ** power));
}

/** Sleeps ms, or less when signal aborts (then rejects with its reason). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A connection to a `runbox serve` server, as one tenant. All calls share
 * one HTTP/2 connection (re-opened when it breaks); close() releases it.
 * Sandboxes outlive the client: they stay until removed or reaped.
 */
export class Client implements AsyncDisposable {
  /** The server's URL. */
  readonly host: string;
  /** See ClientOptions.timeoutMs. */
  readonly timeoutMs: number;
  /** See ClientOptions.headroomMs. */
  readonly headroomMs: number;
  /** See ClientOptions.reconnectWindowMs. */
  readonly reconnectWindowMs: number;
  /** @internal */
  readonly sandboxes: ConnectClient<typeof SandboxService>;
  /** @internal */
  readonly execs: ConnectClient<typeof RunboxService>;
  /** @internal */
  readonly files: ConnectClient<typeof FilesService>;
  readonly #sessions: Http2SessionManager;

  constructor(opts: ClientOptions = {}) {
    const host = (opts.host || process.env.RUNBOX_HOST || DEFAULT_HOST).replace(/\/+$/, "");
    const token = opts.token ?? process.env.RUNBOX_TOKEN ?? "";
    if (!token) {
      throw new Unauthenticated(
        "no token: pass token or set RUNBOX_TOKEN (runbox token create --tenant NAME makes one)",
      );
    }
    if (!/^https?:\/\//.test(host)) throw new InvalidArgument(`host ${JSON.stringify(host)}: want http://HOST:PORT or https://...`);
    this.host = host;
    this.timeoutMs = opts.timeoutMs ?? 120_000;
    this.headroomMs = opts.headroomMs ?? 5_000;
    this.reconnectWindowMs = opts.reconnectWindowMs ?? 15_000;
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    };
    this.#sessions = new Http2SessionManager(host, { pingIntervalMs: 10_000, pingTimeoutMs: 10_000 }, opts.tls);
    const transport = createConnectTransport({
      baseUrl: host,
      httpVersion: "2",
      sessionManager: this.#sessions,
      interceptors: [bearer],
    });
    this.sandboxes = createClient(SandboxService, transport);
    this.execs = createClient(RunboxService, transport);
    this.files = createClient(FilesService, transport);
  }

  /** Closes the client's connection. Sandboxes stay. */
  close(): void {
    this.#sessions.abort();
  }

  /** For `await using client = new Client()`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  /**
   * Makes a call, again on a new connection within the reconnect window
   * when it failed in transit (only for calls whose repetition changes
   * nothing: pass repeatable). Errors become RunboxError classes.
   * @internal
   */
  async call<T>(fn: (signal?: AbortSignal) => Promise<T>, signal: AbortSignal | undefined, repeatable: boolean): Promise<T> {
    let brokeAt = 0;
    let backoff = 50;
    for (;;) {
      try {
        return await fn(signal);
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!repeatable || !isTransient(err)) throw toRunboxError(err, signal);
        const now = performance.now();
        brokeAt ||= now;
        const left = this.reconnectWindowMs - (now - brokeAt);
        if (left <= 0) {
          throw new SandboxLost(`no answer for ${this.reconnectWindowMs} ms: ${(err as Error).message}`, { cause: err });
        }
        await sleep(Math.min(backoff, left), signal);
        backoff = Math.min(backoff * 2, 1000);
      }
    }
  }

  /** Creates a sandbox and returns it once its runboxd answers. Remove it with close() or `await using`. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const spec = {
      provider: opts.provider,
      name: opts.name,
      image: opts.image,
      workdir: opts.workdir,
      network: opts.network,
      memoryBytes: opts.memory === undefined ? undefined : parseSize(opts.memory),
      pids: opts.pids === undefined ? undefined : BigInt(opts.pids),
      cpus: opts.cpus,
      labels: opts.labels,
      idleTtlMs: ms(opts.idleTtlMs),
      maxLifetimeMs: ms(opts.maxLifetimeMs),
      recreate: opts.recreate,
      egress: egressPolicy(opts),
      fromSnapshot: opts.fromSnapshot,
    };
    const out = await this.call(
      (signal) => this.sandboxes.create({ spec }, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      false,
    );
    return new Sandbox(this, sandboxInfoOf(out.sandbox));
  }

  /** Returns the tenant's sandbox with that id or name (SandboxNotFound if none). */
  async get(idOrName: string, opts: CallOptions = {}): Promise<Sandbox> {
    const out = await this.call(
      (signal) => this.sandboxes.get({ id: idOrName }, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      true,
    );
    return new Sandbox(this, sandboxInfoOf(out.sandbox));
  }

  /** Returns the tenant's sandboxes, oldest first; with labels, only those carrying all of them. */
  async list(opts: CallOptions & { labels?: Record<string, string> } = {}): Promise<Sandbox[]> {
    const out = await this.call(
      (signal) => this.sandboxes.list({ labels: opts.labels ?? {} }, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      true,
    );
    return out.sandboxes.map((s) => new Sandbox(this, sandboxInfoOf(s)));
  }

  /** The tenant's snapshots, oldest first. */
  async snapshots(opts: CallOptions = {}): Promise<Snapshot[]> {
    const out = await this.call(
      (signal) => this.sandboxes.listSnapshots({}, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      true,
    );
    return out.snapshots.map((s) => snapshotOf(s));
  }

  /** Deletes one of the tenant's snapshots (InvalidSpec if it has none of that name). */
  async deleteSnapshot(name: string, opts: CallOptions = {}): Promise<void> {
    await this.call(
      (signal) => this.sandboxes.deleteSnapshot({ name }, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      false,
    );
  }

  /** Removes a sandbox, stopping its execs with the stop protocol. A lost sandbox needs force. */
  async remove(idOrName: string, opts: CallOptions & { force?: boolean } = {}): Promise<void> {
    await this.call(
      (signal) => this.sandboxes.delete({ id: idOrName, force: opts.force ?? false }, { signal, timeoutMs: this.timeoutMs }),
      opts.signal,
      false,
    );
  }
}

/** The rules of an egress policy. */
export interface EgressRules {
  allow?: string[];
  allowCidr?: string[];
  deny?: string[];
  resolve?: Record<string, string>;
}

/** The wire's runbox.v1.EgressPolicy of rules (undefined when there is none). @internal */
export function egressPolicy(r: EgressRules) {
  for (const [what, v] of [["allow", r.allow], ["allowCidr", r.allowCidr], ["deny", r.deny]] as const) {
    if (typeof v === "string") throw new InvalidArgument(`${what}: want an array of strings, not one string`);
  }
  if (!r.allow?.length && !r.allowCidr?.length && !r.deny?.length && !Object.keys(r.resolve ?? {}).length) return undefined;
  return { allow: r.allow ?? [], allowCidr: r.allowCidr ?? [], deny: r.deny ?? [], resolve: r.resolve ?? {} };
}

/** Milliseconds for the wire, rounded up (a tiny positive duration never becomes 0, "no limit"). */
export function ms(v: number | undefined): bigint | undefined {
  if (v === undefined) return undefined;
  return BigInt(v > 0 ? Math.ceil(v) : Math.trunc(v));
}
