// run("true") round trips through the SDK, for the Go test that measures
// them beside the Go client (BenchmarkTypeScriptSDKRoundTrip). The sandbox is
// RUNBOX_SANDBOX; each line on stdin is a count N: run N times, then print
// one line, the JSON array of each call's round trip in microseconds. One
// client (one HTTP/2 connection) for the whole run, as an agent keeps.
import readline from "node:readline";
import { Client } from "../dist/index.js";

const client = new Client();
const sb = await client.get(process.env.RUNBOX_SANDBOX);
await sb.run("true"); // the connection
for await (const line of readline.createInterface({ input: process.stdin })) {
  const n = Number(line);
  const us = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await sb.run("true");
    us.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
  }
  console.log(JSON.stringify(us));
}
client.close();
