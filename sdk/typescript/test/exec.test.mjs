// Commands through the SDK: exit codes, stdout and stderr apart, timeouts
// as a Result field, the command after a timeout, descendants gone,
// streaming, stdin, signals, cancel, and AbortSignal.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { client, skip } from "./helpers.mjs";

let c, sb;
before(async () => {
  if (skip) return;
  c = client();
  sb = await c.create({ labels: { test: "ts-exec" } });
});
after(async () => {
  await sb?.close();
  c?.close();
});

test("exit codes and stdout/stderr apart", { skip }, async () => {
  const r = await sb.run("echo out; echo err >&2; exit 3");
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.ok, false);
  assert.equal(r.timedOut, false);
  const ok = await sb.run(["sh", "-c", 'printf "%s" "$1"', "sh", "argv works"]);
  assert.equal(ok.exitCode, 0);
  assert.equal(ok.stdout, "argv works");
  assert.ok(ok.ok);
});

test("execs({ omitOutput }) leaves the results' output out, and only that", { skip }, async () => {
  const r = await sb.run("echo out; echo err >&2; exit 3");
  const full = (await sb.execs()).find((e) => e.id === r.id);
  assert.equal(full.result.stdout, "out\n");
  assert.equal(full.result.stderr, "err\n");
  const bare = (await sb.execs({ omitOutput: true })).find((e) => e.id === r.id);
  assert.equal(bare.result.stdout, "");
  assert.equal(bare.result.stderr, "");
  assert.equal(bare.result.exitCode, 3);
  assert.equal(bare.result.stdoutBytes, 4);
  assert.equal(bare.result.stderrBytes, 4);
});

test("a timeout is a field, and the next command works", { skip }, async () => {
  const r = await sb.run("echo before; sleep 60", { timeoutMs: 300, graceMs: 200 });
  assert.equal(r.timedOut, true);
  assert.equal(r.stdout, "before\n");
  assert.notEqual(r.exitCode, 0);
  const next = await sb.run("echo after");
  assert.equal(next.exitCode, 0);
  assert.equal(next.stdout, "after\n");
});

test("descendants are gone after a timeout", { skip }, async () => {
  // A background child that holds the pipe, and one that left the process group.
  const r = await sb.run("sleep 300 & echo $!; setsid sleep 300 & echo $!; wait", { timeoutMs: 500, graceMs: 200 });
  assert.equal(r.timedOut, true);
  const pids = r.stdout.trim().split("\n");
  assert.equal(pids.length, 2, r.stdout);
  assert.ok(r.killed >= 2, `killed ${r.killed}`);
  assert.equal(r.survivors, 0);
  for (const pid of pids) {
    const alive = await sb.run(`kill -0 ${pid} 2>/dev/null && ps -o stat= -p ${pid}`);
    assert.notEqual(alive.exitCode, 0, `process ${pid} still there: ${alive.stdout}`);
  }
});

test("streaming: chunks in order, per stream, then the result", { skip }, async () => {
  const p = await sb.start("for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; sleep 0.05; done; exit 4");
  assert.ok(p.pid > 0);
  let out = "", err = "", last = 0;
  for await (const ch of p) {
    assert.ok(ch.seq > last, `seq ${ch.seq} after ${last}`);
    last = ch.seq;
    if (ch.stream === "stdout") out += ch.text;
    else err += ch.text;
  }
  assert.equal(out, "out1\nout2\nout3\nout4\nout5\n");
  assert.equal(err, "err1\nerr2\nerr3\nerr4\nerr5\n");
  assert.equal(p.result.exitCode, 4);
  assert.equal(p.lastSeq, last);
  assert.equal((await p.wait()).exitCode, 4);
});

test("stdin streamed, then closed", { skip }, async () => {
  const p = await sb.start("cat; echo done", { stdinStream: true });
  await p.writeStdin("hello ");
  await p.writeStdin(new TextEncoder().encode("world\n"));
  await p.closeStdin();
  const r = await p.wait();
  assert.equal(r.stdout, "hello world\ndone\n");
  const once = await sb.run("cat", { stdin: "given\n" });
  assert.equal(once.stdout, "given\n");
});

test("signal by name reaches the command's trap", { skip }, async () => {
  const p = await sb.start("trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.05; done");
  for await (const ch of p) {
    if (ch.text.includes("ready")) break;
  }
  assert.ok((await p.signal("SIGINT")) >= 1);
  const r = await p.wait();
  assert.equal(r.exitCode, 7);
  assert.match(r.stdout, /got INT/);
});

test("cancel stops the exec and its result says so", { skip }, async () => {
  const p = await sb.start("sleep 60", { graceMs: 200 });
  assert.equal(await p.cancel(), true);
  const r = await p.wait();
  assert.equal(r.cancelled, true);
  assert.equal(r.ok, false);
});

test("an aborted run rejects with the signal's reason and cancels the exec", { skip }, async () => {
  const ac = new AbortController();
  const id = `ts-abort-${process.pid}`;
  const running = sb.run("sleep 60", { id, signal: ac.signal });
  // Abort once the exec runs (before, the cancel would leave a tombstone).
  while (!(await sb.execs()).some((e) => e.id === id && e.state === "running")) {
    await new Promise((r) => setTimeout(r, 20));
  }
  ac.abort(new Error("stop it"));
  await assert.rejects(running, /stop it/);
  // The exec was cancelled in the sandbox: re-attaching gives its result.
  const p = await sb.attach(id, { streamOutput: false });
  const r = await p.wait();
  assert.equal(r.cancelled, true);
});

test("an aborted iteration drops the stream only; the exec runs on", { skip }, async () => {
  const p = await sb.start("for i in $(seq 1 20); do echo $i; sleep 0.02; done");
  const ac = new AbortController();
  const seen = [];
  await assert.rejects(async () => {
    for await (const ch of p.output({ signal: ac.signal })) {
      seen.push(ch.text);
      ac.abort(new Error("enough"));
    }
  }, /enough/);
  let rest = "";
  for await (const ch of p) rest += ch.text;
  const all = (seen.join("") + rest).trim().split("\n").map(Number);
  assert.deepEqual(all, Array.from({ length: 20 }, (_, i) => i + 1));
});
