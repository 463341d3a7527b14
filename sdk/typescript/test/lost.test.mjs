// A sandbox whose runboxd was killed: with recreate, the next exec runs in a
// fresh one and says so, streamed or not (Result.recreated, Process.recreated);
// without, the exec fails with SandboxLost. Needs the server's home
// (RUNBOX_TEST_HOME, set by TestTypeScriptSDK) to find the runboxd.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs/promises";
import path from "node:path";
import * as runbox from "../dist/index.js";
import { client, skip } from "./helpers.mjs";

const home = process.env.RUNBOX_TEST_HOME;
const skipLost = skip || (home ? false : "RUNBOX_TEST_HOME unset (the server's home): run through TestTypeScriptSDK");

/** SIGKILLs sb's runboxd (host provider: a process on this machine). */
async function killRunboxd(sb) {
  const info = await sb.refresh();
  const rec = JSON.parse(await fs.readFile(path.join(home, "sandboxes", info.providerId, "sandbox.json"), "utf8"));
  assert.match(await fs.readFile(`/proc/${rec.pid}/cmdline`, "utf8"), /runboxd/);
  process.kill(rec.pid, "SIGKILL");
  // Gone once /proc has no such process (or only its zombie).
  for (;;) {
    const stat = await fs.readFile(`/proc/${rec.pid}/stat`, "utf8").catch(() => "");
    if (stat === "" || / Z /.test(stat)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("recreated says so on a streamed exec, and on a run", { skip: skipLost }, async () => {
  const c = client();
  const sb = await c.create({ recreate: true, labels: { test: "ts-recreate" } });
  try {
    await sb.run("export X=1", { session: "s" });
    await killRunboxd(sb);
    const p = await sb.start("echo fresh");
    const r = await p.wait();
    assert.equal(r.stdout, "fresh\n");
    assert.equal(p.recreated, true);
    assert.equal(r.recreated, true);
    const next = await sb.run("true");
    assert.equal(next.recreated, false);
    await killRunboxd(sb);
    assert.equal((await sb.run("true")).recreated, true);
    assert.equal((await sb.refresh()).recreated, 2);
  } finally {
    await sb.close();
    c.close();
  }
});

test("without recreate, a lost sandbox is SandboxLost", { skip: skipLost }, async () => {
  const c = client({ reconnectWindowMs: 2_000 });
  const sb = await c.create({ labels: { test: "ts-lost" } });
  try {
    await killRunboxd(sb);
    await assert.rejects(sb.run("true"), runbox.SandboxLost);
    await assert.rejects(sb.start("true").then((p) => p.wait()), runbox.SandboxLost);
  } finally {
    await sb.remove({ force: true });
    c.close();
  }
});

test("Symbol.asyncDispose removes the sandbox (await using)", { skip }, async () => {
  const c = client();
  const sb = await c.create({ labels: { test: "ts-dispose" } });
  await sb[Symbol.asyncDispose]();
  await assert.rejects(c.get(sb.id), runbox.SandboxNotFound);
  const p = await (await c.create({ labels: { test: "ts-dispose-p" } })).start("sleep 60");
  await p[Symbol.asyncDispose](); // cancels an exec that has not ended
  const again = await p.sandbox.attach(p.id, { streamOutput: false });
  assert.equal((await again.wait()).cancelled, true);
  await p.sandbox.close();
  await c[Symbol.asyncDispose]();
});
