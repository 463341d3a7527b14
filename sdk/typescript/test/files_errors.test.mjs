// Files (read, write, list, trees both ways) and errors as classes decided
// by the wire's error code and Runbox-Error tag.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import * as runbox from "../dist/index.js";
import { client, skip } from "./helpers.mjs";

let c, sb, tmp;
before(async () => {
  if (skip) return;
  c = client();
  sb = await c.create({ labels: { test: "ts-files" } });
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), "rbts-"));
});
after(async () => {
  await sb?.close();
  c?.close();
  if (tmp) await fs.rm(tmp, { recursive: true, force: true });
});

test("write, read, stat, list, move, remove", { skip }, async () => {
  const info = await sb.files.write("dir/a.txt", "hello\n", { mode: 0o600 });
  assert.equal(info.size, 6);
  assert.equal(await sb.files.readText("dir/a.txt"), "hello\n");
  const big = new Uint8Array(3 * 1024 * 1024 + 7).map((_, i) => i % 251);
  await sb.files.write("dir/big.bin", big);
  assert.deepEqual(new Uint8Array(await sb.files.read("dir/big.bin")), big);
  assert.deepEqual(new Uint8Array(await sb.files.read("dir/big.bin", { offset: 10, length: 5 })), big.subarray(10, 15));
  const st = await sb.files.stat("dir/a.txt");
  assert.equal(st.type, "file");
  assert.equal(st.mode & 0o777, 0o600);
  const names = (await sb.files.list("dir")).map((f) => f.path).sort();
  assert.deepEqual(names, ["a.txt", "big.bin"]);
  await sb.files.move("dir/a.txt", "dir/b.txt");
  assert.equal(await sb.files.exists("dir/a.txt"), false);
  assert.equal(await sb.files.exists("dir/b.txt"), true);
  await sb.files.remove("dir", { recursive: true });
  assert.equal(await sb.files.exists("dir"), false);
});

test("upload and download a tree", { skip }, async () => {
  const src = path.join(tmp, "src");
  await fs.mkdir(path.join(src, "sub", "empty"), { recursive: true });
  await fs.writeFile(path.join(src, "top.txt"), "top\n");
  await fs.writeFile(path.join(src, "sub", "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
  await fs.symlink("top.txt", path.join(src, "link"));
  const stats = await sb.files.uploadDir(src, "tree");
  assert.equal(stats.files, 2);
  assert.equal((await sb.run("./tree/sub/run.sh; readlink tree/link; test -d tree/sub/empty && echo empty")).stdout, "hi\ntop.txt\nempty\n");
  const dst = path.join(tmp, "dst");
  const names = await sb.files.downloadDir("tree", dst);
  assert.ok(names.includes("sub/run.sh"), names.join(","));
  assert.equal(await fs.readFile(path.join(dst, "top.txt"), "utf8"), "top\n");
  assert.equal((await fs.stat(path.join(dst, "sub", "run.sh"))).mode & 0o777, 0o755);
  assert.equal(await fs.readlink(path.join(dst, "link")), "top.txt");
});

test("download refuses a link out of the directory before writing", { skip }, async () => {
  await sb.run("mkdir -p evil && ln -sfn /etc evil/out && echo x > evil/file");
  const dst = path.join(tmp, "evil");
  await assert.rejects(sb.files.downloadDir("evil", dst), runbox.EscapesRoot);
  await assert.rejects(fs.lstat(path.join(dst, "file")), { code: "ENOENT" });
});

test("errors are classes decided by the wire's code", { skip }, async () => {
  await assert.rejects(c.get("sb-does-not-exist"), (e) => e instanceof runbox.SandboxNotFound && e instanceof runbox.NotFound && e.code === "not_found");
  await assert.rejects(sb.files.read("no/such/file"), runbox.FileNotFound);
  await assert.rejects(sb.files.read("."), runbox.IsDirectory);
  await assert.rejects(sb.attach("ts-never-started"), runbox.ExecNotFound);
  await assert.rejects(sb.files.read("../../etc/passwd", { root: "." }), runbox.EscapesRoot);
  const done = await sb.start("true");
  await done.wait();
  await assert.rejects(done.signal("TERM"), runbox.NotRunning);
  await assert.rejects(sb.run(""), runbox.InvalidArgument);
  assert.throws(() => runbox.signalNumber("NOPE"), runbox.InvalidArgument);
  const bad = client({ token: "rbx_not_a_token" });
  try {
    await assert.rejects(bad.list(), (e) => e instanceof runbox.Unauthenticated && e.code === "unauthenticated");
  } finally {
    bad.close();
  }
  assert.throws(() => new runbox.Client({ token: "" , host: "http://127.0.0.1:1"}), runbox.Unauthenticated);
});

test("a sandbox that was removed is NotFound; close() twice is fine", { skip }, async () => {
  const other = await c.create({ labels: { test: "ts-gone" } });
  await other.close();
  await other.close();
  await assert.rejects(other.run("true"), runbox.SandboxNotFound);
});
