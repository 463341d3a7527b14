// A Node.js client of runbox serve, built from the project's proto
// (generated into ./gen by protoc-gen-es) with @connectrpc/connect-node.
// It creates a sandbox over Connect's JSON protocol (HTTP/1.1), streams an
// exec's output over gRPC (HTTP/2), cancels the exec after a few lines,
// checks the result says so, and deletes the sandbox. The last line it
// prints is a JSON summary for the Go test that drives it.
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxService } from "./gen/runbox/v1/sandbox_pb.js";
import { RunboxService } from "./gen/runbox/v1/runbox_pb.js";

const host = process.env.RUNBOX_HOST;
const token = process.env.RUNBOX_TOKEN;
const bearer = (next) => async (req) => {
  req.header.set("Authorization", `Bearer ${token}`);
  return await next(req);
};

const sandboxes = createClient(
  SandboxService,
  createConnectTransport({ baseUrl: host, httpVersion: "1.1", useBinaryFormat: false, interceptors: [bearer] }),
);
const execs = createClient(
  RunboxService,
  createGrpcTransport({ baseUrl: host, interceptors: [bearer] }),
);

const { sandbox } = await sandboxes.create({ spec: { labels: { client: "node" } } });
const headers = { "Runbox-Sandbox": sandbox.id };
const id = "node-" + process.pid;
let ticks = 0;
let result;
try {
  const stream = execs.run(
    { spec: { id, command: "for i in $(seq 1 600); do echo tick $i; sleep 0.05; done", graceMs: 1000n }, streamOutput: true },
    { headers },
  );
  let cancelling;
  for await (const ev of stream) {
    if (ev.event.case === "output") {
      ticks += new TextDecoder().decode(ev.event.value.data).split("\n").filter(Boolean).length;
      if (ticks >= 3 && !cancelling) {
        cancelling = execs.cancel({ id }, { headers });
      }
    } else if (ev.event.case === "exited") {
      result = ev.event.value.result;
    }
  }
  await cancelling;
} finally {
  await sandboxes.delete({ id: sandbox.id });
}
if (!result) throw new Error("the stream ended without the exec's exit event");
console.log(JSON.stringify({
  sandbox: sandbox.id, exec: id, ticks, cancelled: result.cancelled, exit_code: result.exitCode, killed: result.killed,
}));
