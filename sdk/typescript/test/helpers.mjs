// Shared by the SDK's tests: a client of the server the Go test started
// (RUNBOX_HOST, RUNBOX_TOKEN), and a TCP proxy whose connections a test can
// cut. Importing this file runs no test.
import net from "node:net";
import { Client } from "../dist/index.js";

/** Whether a server is there to test against. */
export const haveServer = Boolean(process.env.RUNBOX_HOST && process.env.RUNBOX_TOKEN);
/** The reason the tests skip without one. */
export const skip = haveServer ? false : "RUNBOX_HOST/RUNBOX_TOKEN unset: run through go test -run TestTypeScriptSDK ./internal/server/e2e/";

/** A client of the test's server (options override). */
export function client(opts = {}) {
  return new Client(opts);
}

/**
 * A TCP proxy on 127.0.0.1 to the server: url is its address; cut()
 * destroys every connection through it (both sides), as a network failure
 * would; close() stops it.
 */
export async function proxy() {
  const target = new URL(process.env.RUNBOX_HOST);
  const sockets = new Set();
  let cuts = 0;
  const server = net.createServer((down) => {
    const up = net.connect(Number(target.port), target.hostname);
    sockets.add(down);
    sockets.add(up);
    const drop = () => {
      down.destroy();
      up.destroy();
      sockets.delete(down);
      sockets.delete(up);
    };
    down.on("error", drop).on("close", drop);
    up.on("error", drop).on("close", drop);
    down.pipe(up);
    up.pipe(down);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    get cuts() {
      return cuts;
    },
    cut() {
      cuts++;
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    close() {
      this.cut();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
