// Re-attach: after a cut connection the Process re-attaches by itself from
// the last sequence number (every chunk once, in order, the exec run once),
// and a closed Process is picked up by attach(id, { fromSeq }).
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, proxy, skip } from "./helpers.mjs";

const N = 40;
const want = Array.from({ length: N }, (_, i) => i + 1);
const lines = (s) => s.trim().split("\n").map(Number);

test("re-attach after a cut connection, from the last sequence number", { skip }, async () => {
  const px = await proxy();
  const c = client({ host: px.url });
  const sb = await c.create({ labels: { test: "ts-reattach" } });
  try {
    const p = await sb.start(`for i in $(seq 1 ${N}); do echo $i; sleep 0.02; done; echo once >> runs.log`);
    let out = "";
    for await (const ch of p) {
      out += ch.text;
      // Cut every connection twice on the way, mid-stream.
      if (ch.seq === 5 || ch.seq === 20) px.cut();
    }
    assert.deepEqual(lines(out), want);
    assert.ok(px.cuts === 2);
    assert.ok(p.reconnects >= 2, `reconnects ${p.reconnects}`);
    assert.equal(p.result.exitCode, 0);
    // The command ran once, whatever the reconnects.
    assert.equal((await sb.files.readText("runs.log")), "once\n");
    // And a unary run survives a cut too (made again with the same exec id).
    const r = sb.run("sleep 0.5; echo unary >> runs.log; echo ran");
    setTimeout(() => px.cut(), 200);
    assert.equal((await r).stdout, "ran\n");
    assert.equal(await sb.files.readText("runs.log"), "once\nunary\n");
  } finally {
    await sb.close();
    c.close();
    await px.close();
  }
});

test("close, then attach from lastSeq + 1 in a new client", { skip }, async () => {
  const c = client();
  const sb = await c.create({ labels: { test: "ts-attach" } });
  try {
    const p = await sb.start(`for i in $(seq 1 ${N}); do echo $i; sleep 0.02; done`);
    let out = "";
    for await (const ch of p) {
      out += ch.text;
      if (lines(out).length >= 10) break;
    }
    p.close();
    const c2 = client();
    try {
      const again = await (await c2.get(sb.id)).attach(p.id, { fromSeq: p.lastSeq + 1 });
      for await (const ch of again) out += ch.text;
      assert.deepEqual(lines(out), want);
      assert.equal(again.result.exitCode, 0);
      assert.equal(again.attached, true);
    } finally {
      c2.close();
    }
  } finally {
    await sb.close();
    c.close();
  }
});
