// Pause, snapshots and fork through the SDK against a real runbox serve
// with the host provider: pause and resume go through the server (a run on
// a paused sandbox is SandboxPaused, info says paused); the host provider
// cannot snapshot or fork (Unsupported); unknown snapshots are InvalidSpec.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import * as runbox from "../dist/index.js";
import { client, skip } from "./helpers.mjs";

let c, sb;
before(async () => {
  if (skip) return;
  c = client();
  sb = await c.create({ labels: { test: "ts-branch" } });
});
after(async () => {
  await sb?.close();
  c?.close();
});

test("pause and resume through serve", { skip }, async () => {
  await sb.pause();
  assert.equal(sb.info.paused, true);
  assert.equal((await c.get(sb.id)).info.paused, true);
  await assert.rejects(sb.run("true"), runbox.SandboxPaused);
  await sb.resume();
  assert.equal((await c.get(sb.id)).info.paused, false);
  assert.equal((await sb.run("echo ok")).exitCode, 0);
});

test("the host provider cannot snapshot; unknown snapshots", { skip }, async () => {
  await assert.rejects(sb.snapshot({ name: "base" }), runbox.Unsupported);
  await assert.rejects(sb.fork(2), runbox.Unsupported);
  assert.deepEqual(await c.snapshots(), []);
  await assert.rejects(c.deleteSnapshot("nope"), runbox.InvalidSpec);
  await assert.rejects(c.create({ fromSnapshot: "nope" }), runbox.InvalidSpec);
});
