// Egress rules and exposed ports through the SDK against a real runbox
// serve: a dev server in a sandbox reached through the server's port route
// with the token and with the signed URL, refused without them and once
// unexposed; egress rules reach the server and are checked there.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import * as runbox from "../dist/index.js";
import { client, skip } from "./helpers.mjs";

let c, sb;
before(async () => {
  if (skip) return;
  c = client();
  sb = await c.create({ labels: { test: "ts-network" } });
});
after(async () => {
  await sb?.close();
  c?.close();
});

async function fetchText(url, headers = {}) {
  const resp = await fetch(url, { headers });
  return [resp.status, await resp.text()];
}

test("expose a dev server: by token, by signed URL, refused without, gone once unexposed", { skip }, async () => {
  const port = 30000 + Math.floor(Math.random() * 9999);
  const mark = `hello-${Math.random().toString(36).slice(2)}`;
  const res = await sb.run(
    `mkdir -p site && echo ${mark} > site/hello.txt && (cd site && nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 &)`,
    { timeoutMs: 30_000 },
  );
  assert.equal(res.exitCode, 0);
  try {
    const exp = await sb.expose(port, { ttlMs: 600_000 });
    assert.ok(exp.url.endsWith(`/sandboxes/${sb.id}/ports/${port}/`), exp.url);
    assert.ok(exp.signedUrl.startsWith(exp.url + "?"), exp.signedUrl);
    assert.ok(exp.expiresAt.getTime() > Date.now());
    const auth = { Authorization: `Bearer ${process.env.RUNBOX_TOKEN}` };
    let got;
    for (let i = 0; i < 100; i++) {
      got = await fetchText(exp.url + "hello.txt", auth);
      if (got[0] === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(got, [200, mark + "\n"]);
    const signed = new URL(exp.signedUrl);
    signed.pathname += "hello.txt";
    assert.deepEqual(await fetchText(signed.toString()), [200, mark + "\n"]);
    const [code, body] = await fetchText(exp.url + "hello.txt");
    assert.equal(code, 401);
    assert.match(body, /Authorization: Bearer/);
    assert.ok((await sb.refresh()).exposedPorts.includes(port));
    await sb.unexpose(port);
    const [code2, body2] = await fetchText(signed.toString());
    assert.equal(code2, 403);
    assert.match(body2, /not exposed/);
  } finally {
    await sb.run(`pkill -f 'http.server ${port}' || true`, { timeoutMs: 30_000 });
  }
});

test("egress rules reach the server", { skip }, async () => {
  await assert.rejects(c.create({ provider: "host", allow: ["pypi.org"], deny: ["evil.example"] }), (err) => {
    assert.ok(err instanceof runbox.InvalidArgument, String(err));
    assert.match(err.message, /network private/);
    return true;
  });
  await assert.rejects(sb.setEgress({ allow: ["pypi.org"] }), /network private/);
  await assert.rejects(sb.expose(70000), (err) => err instanceof runbox.InvalidArgument);
});
