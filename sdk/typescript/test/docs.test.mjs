// docs/typescript.md's agent loop, run as it is written: compiled from
// TypeScript, with a decide() that answers from a list (a command, one
// that times out, a failing one, done).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import { skip } from "./helpers.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

test("the agent loop of docs/typescript.md", { skip }, async () => {
  const doc = await fs.readFile(path.join(here, "..", "..", "..", "docs", "typescript.md"), "utf8");
  const after = doc.split("<!-- agent-loop -->")[1];
  assert.ok(after, "docs/typescript.md has no <!-- agent-loop --> marker");
  const block = after.split("```ts\n")[1].split("```")[0];
  assert.ok(block.split("\n").length <= 25, "the loop is about 20 lines");
  const sdk = pathToFileURL(path.join(here, "..", "dist", "index.js")).href;
  const decide =
    'const answers = ["export GREETING=hello", "echo $GREETING from the loop", "sleep 60", "echo after; exit 3", null];\n' +
    "async function decide(_t) { return answers.shift(); }\n";
  const js = ts.transpileModule(decide + block.replace('"@runbox/sdk"', JSON.stringify(sdk)), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "rbts-doc-"));
  try {
    const file = path.join(dir, "loop.mjs");
    await fs.writeFile(file, js);
    const out = await new Promise((resolve, reject) =>
      execFile(process.execPath, [file], (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout))),
    );
    assert.match(out, /\$ echo \$GREETING from the loop\nhello from the loop\n\[exit 0\]/);
    assert.match(out, /\$ sleep 60\n\[stopped after [\d.]+ ms: timeout\]/);
    assert.match(out, /\$ echo after; exit 3\nafter\n\[exit 3\]/);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
