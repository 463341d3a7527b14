// A running exec: stream its output, cancel it, signal it, re-attach.
//
// A Process follows one exec by id over RunboxService's streaming Run (until
// the exec is known to have started) and Attach (after). When the
// connection breaks, or the server restarts, it re-attaches from the
// sequence number after the last chunk it delivered, so every chunk is
// delivered exactly once, and the exec itself never runs twice (its id is
// an idempotency key).

import { Code, ConnectError } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ExecEvent, RunRequestSchema } from "./gen/runbox/v1/runbox_pb.js";
import type { CallOptions } from "./client.js";
import { sleep } from "./client.js";
import { ExecNotFound, InternalError, SandboxLost, Unavailable, isTransient, toRunboxError } from "./errors.js";
import { Chunk, Result, chunkOf, type Gap } from "./models.js";
import type { Sandbox } from "./sandbox.js";

const MIN_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 1000;
const RECREATED_HEADER = "runbox-sandbox-recreated";

/** How a Process opens its streams. @internal */
export interface FollowOptions {
  run?: MessageInitShape<typeof RunRequestSchema>;
  streamOutput: boolean;
  fromSeq: number;
  timeoutMs?: number;
}

/** Waits for p, or rejects with signal's reason (after calling onAbort) when it fires first. */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined, onAbort: () => void): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    onAbort();
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      onAbort();
      reject(signal.reason);
    };
    signal.addEventListener("abort", abort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", abort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", abort);
        reject(e);
      },
    );
  });
}

/**
 * An exec started with Sandbox.start or found with Sandbox.attach.
 * `for await (const chunk of p)` yields its output in order as it is read;
 * wait() returns its Result. The exec runs in the sandbox whatever happens
 * to this object: close() (or a network failure, a server restart) drops
 * the connection only, and Sandbox.attach(p.id, { fromSeq: p.lastSeq + 1 })
 * picks it up again, from this process or another. `await using` cancels
 * the exec if it has not ended when the block ends.
 */
export class Process implements AsyncDisposable, AsyncIterable<Chunk> {
  /** The exec's id. */
  readonly id: string;
  /** The leader's pid in the sandbox, once started (information only). */
  pid = 0;
  /** True when the stream attached to an exec that already existed. */
  attached = false;
  /** Gaps in the streamed output: chunks the sandbox's replay ring no longer held. */
  readonly gaps: Gap[] = [];
  /** How many times the stream was opened again after a failure. */
  reconnects = 0;
  /** The sandbox had been lost and was replaced before this exec ran. */
  recreated = false;

  readonly #sb: Sandbox;
  readonly #follow: FollowOptions;
  #lastSeq: number;
  #seen = false;
  #result?: Result;
  #stream?: AsyncIterator<ExecEvent>;
  #ac?: AbortController;

  /** @internal Use Sandbox.start or Sandbox.attach. */
  constructor(sandbox: Sandbox, execId: string, follow: FollowOptions) {
    this.#sb = sandbox;
    this.id = execId;
    this.#follow = follow;
    this.#lastSeq = Math.max(follow.fromSeq - 1, 0);
  }

  /** The sandbox the exec runs in. */
  get sandbox(): Sandbox {
    return this.#sb;
  }

  /** The sequence number of the last chunk delivered (0: none yet). Re-attach from lastSeq + 1 to continue after it. */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** The exec's Result once its exit was seen. */
  get result(): Result | undefined {
    return this.#result;
  }

  /** Whether the exec's exit was seen. */
  get done(): boolean {
    return this.#result !== undefined;
  }

  /** Output chunks until the exec exits (then result is set). SandboxLost when it cannot be followed for the reconnect window. */
  [Symbol.asyncIterator](): AsyncIterator<Chunk> {
    return this.output()[Symbol.asyncIterator]();
  }

  /** Output chunks, as iterating the Process gives them, with an AbortSignal (an abort drops the stream only; the exec runs on). */
  async *output(opts: CallOptions = {}): AsyncGenerator<Chunk> {
    while (this.#result === undefined) {
      const ev = await this.#next(opts.signal);
      if (ev.event.case === "output") {
        const o = ev.event.value;
        yield chunkOf(o.stream, o.seq, o.data);
      }
    }
  }

  /** Reads the exec to its end and returns its Result (chunks not iterated yet are consumed; the Result keeps head and tail). */
  async wait(opts: CallOptions = {}): Promise<Result> {
    while (this.#result === undefined) await this.#next(opts.signal);
    return this.#result;
  }

  /** Stops the exec with the stop protocol; the stream then delivers the Result (cancelled set). False when the id was unknown. */
  cancel(opts: CallOptions & { graceMs?: number } = {}): Promise<boolean> {
    return this.#sb.cancel(this.id, opts);
  }

  /** Sends a signal (a number, or a name such as "INT" or "SIGINT") to every process of the exec; returns how many. */
  signal(sig: number | string, opts: CallOptions = {}): Promise<number> {
    return this.#sb.signal(this.id, sig, opts);
  }

  /** Writes to the exec's stdin (start it with stdinStream: true). */
  async writeStdin(data: Uint8Array | string, opts: CallOptions = {}): Promise<void> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    await this.#sb.client.call(
      (signal) => this.#sb.client.execs.writeStdin({ id: this.id, data: bytes }, this.#sb.callOptions(signal)),
      opts.signal,
      false,
    );
  }

  /** Closes the exec's stdin. */
  async closeStdin(opts: CallOptions = {}): Promise<void> {
    await this.#sb.client.call(
      (signal) => this.#sb.client.execs.closeStdin({ id: this.id }, this.#sb.callOptions(signal)),
      opts.signal,
      true,
    );
  }

  /** Drops the connection. The exec runs on; iterate again (or attach) to follow it from lastSeq + 1. */
  close(): void {
    this.#ac?.abort();
    this.#ac = undefined;
    this.#stream = undefined;
  }

  /** For `await using p = await sb.start(...)`: cancels the exec if it has not ended, then closes. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      if (this.#result === undefined) await this.cancel();
    } finally {
      this.close();
    }
  }

  /** @internal Reads up to the started event, so a refused exec rejects from start(). */
  async started(signal?: AbortSignal): Promise<void> {
    while (!this.#seen && this.#result === undefined) {
      const ev = await this.#next(signal);
      if (ev.event.case === "output") throw new InternalError("output before the exec's started event");
    }
  }

  #open(): void {
    const ac = new AbortController();
    this.#ac = ac;
    const f = this.#follow;
    const opts = {
      signal: ac.signal,
      timeoutMs: f.timeoutMs,
      headers: { "Runbox-Sandbox": this.#sb.id },
      onHeader: (h: Headers) => {
        if (h.get(RECREATED_HEADER) === "true") this.recreated = true;
      },
    };
    const execs = this.#sb.client.execs;
    const stream =
      f.run !== undefined && !this.#seen
        ? execs.run(f.run, opts)
        : execs.attach({ id: this.id, streamOutput: f.streamOutput, fromSeq: BigInt(this.#lastSeq + 1) }, opts);
    this.#stream = stream[Symbol.asyncIterator]();
  }

  /** The exec's next event, re-opening the stream as needed. */
  async #next(signal?: AbortSignal): Promise<ExecEvent> {
    let brokeAt = 0;
    let backoff = MIN_BACKOFF_MS;
    let deadlines = 0;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      let err: unknown;
      try {
        if (this.#stream === undefined) this.#open();
        const r = await raceAbort(this.#stream!.next(), signal, () => this.close());
        if (!r.done) {
          if (this.#accept(r.value)) return r.value;
          continue;
        }
        this.close();
        err = new Unavailable(`exec ${this.id}: the stream ended before the exec's exit event`);
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        this.close();
        if (e instanceof ConnectError && e.code === Code.DeadlineExceeded && !e.metadata.get("runbox-error")) {
          if (++deadlines > 1) throw toRunboxError(e);
          err = e; // ask the server once more
        } else if (!isTransient(e)) {
          const re = toRunboxError(e);
          if (this.#seen && re instanceof ExecNotFound) {
            throw new SandboxLost(`exec ${this.id} is gone from the sandbox (did its runboxd restart?): ${re.rawMessage}`, {
              code: re.code,
              tag: re.tag,
              cause: re,
            });
          }
          throw re;
        } else {
          err = e;
        }
      }
      const now = performance.now();
      brokeAt ||= now;
      const window = this.#sb.client.reconnectWindowMs;
      const left = window - (now - brokeAt);
      if (left <= 0) {
        throw new SandboxLost(`exec ${this.id}: no answer for ${window} ms: ${(err as Error).message}`, { cause: err });
      }
      await sleep(Math.min(backoff * (0.5 + Math.random() / 2), left), signal);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      this.reconnects++;
    }
  }

  /** Updates the follower's state from ev; false for a chunk delivered already (replayed after a reconnect). */
  #accept(ev: ExecEvent): boolean {
    switch (ev.event.case) {
      case "started":
        this.#seen = true;
        this.pid = Number(ev.event.value.pid);
        this.attached ||= ev.event.value.attached;
        return true;
      case "output": {
        const seq = Number(ev.event.value.seq);
        if (seq <= this.#lastSeq) return false;
        this.#lastSeq = seq;
        return true;
      }
      case "gap": {
        const g = ev.event.value;
        const gap = { fromSeq: Number(g.fromSeq), toSeq: Number(g.toSeq), bytes: Number(g.bytes) };
        this.gaps.push(gap);
        if (gap.toSeq > 0 && gap.toSeq - 1 > this.#lastSeq) this.#lastSeq = gap.toSeq - 1;
        return true;
      }
      case "exited":
        this.#seen = true;
        this.#result = new Result(ev.event.value.result, {
          recreated: this.recreated,
          streamGaps: this.gaps.length,
          streamLost: this.gaps.reduce((n, g) => n + g.bytes, 0),
        });
        this.close();
        return true;
    }
    return true;
  }
}
