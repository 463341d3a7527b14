// Drives runbox's MCP server with the official MCP TypeScript SDK, a client
// no one at runbox wrote. Run by ../../node_test.go:
//
//   MODE=stdio RUNBOX=path/to/runbox WORKDIR=dir MARKER=1000.123 node mcp_flow.mjs
//   MODE=http URL=http://127.0.0.1:PORT/ TOKEN=t MARKER=1000.123 node mcp_flow.mjs
//
// It exits 0 after printing "flow ok", or non-zero naming what failed. The
// Go test then counts, on the host, the processes left with MARKER in their
// command line (there must be none).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = process.env;
const marker = env.MARKER;

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}: ${JSON.stringify(detail)}`);
  }
}

function transport(token) {
  if (env.MODE === 'stdio') {
    return new StdioClientTransport({
      command: env.RUNBOX,
      args: ['mcp', '--provider', 'host', '--allow-host', '--workdir', env.WORKDIR],
      env: { ...env },
      stderr: 'inherit',
    });
  }
  return new StreamableHTTPClientTransport(new URL(env.URL), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
}

async function connect(token) {
  const client = new Client({ name: 'runbox-node-test', version: '0.0.0' });
  await client.connect(transport(token));
  return client;
}

async function call(client, name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

async function ok(client, name, args) {
  const res = await call(client, name, args);
  check(!res.isError, `${name} failed`, res.content);
  check(res.structuredContent, `${name} has no structured content`, res);
  return res.structuredContent;
}

async function sleepMs(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function flow(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  check(names.length === 12, 'tools', names);
  for (const t of tools) {
    check(t.inputSchema?.type === 'object' && t.outputSchema?.type === 'object', `schemas of ${t.name}`, t);
  }

  // A result, and the persistent shell session.
  let r = await ok(client, 'exec', { command: 'echo out; echo err >&2; exit 3' });
  check(r.exit_code === 3 && r.stdout === 'out\n' && r.stderr === 'err\n', 'exec result', r);
  await ok(client, 'exec', { command: 'mkdir -p node-dir && cd node-dir && export NODE_VAR=42' });
  r = await ok(client, 'exec', { command: 'echo "$(basename "$PWD") $NODE_VAR"' });
  check(r.stdout === 'node-dir 42\n', 'cd and export carry over', r);

  // An endless command returns at its timeout with its output so far.
  r = await ok(client, 'exec', { command: `echo started; sleep ${marker} & sleep ${marker}`, timeout_seconds: 1 });
  check(r.timed_out === true && r.stdout === 'started\n' && r.exit_code === 143, 'timed-out exec', r);

  // A cancelled call (notifications/cancelled) stops its command.
  const abort = new AbortController();
  const pending = call(client, 'exec', { command: `sleep ${marker}`, id: 'node-cancel', timeout_seconds: 600 }, { signal: abort.signal });
  pending.catch(() => {});
  let running = false;
  for (let i = 0; i < 600 && !running; i++) {
    const list = await ok(client, 'exec_list', {});
    running = list.execs.some((e) => e.id === 'node-cancel' && e.state === 'running');
    if (!running) await sleepMs(50);
  }
  check(running, 'the exec to cancel runs', null);
  abort.abort();
  let cancelled = false;
  for (let i = 0; i < 1200 && !cancelled; i++) {
    const list = await ok(client, 'exec_list', {});
    cancelled = list.execs.some((e) => e.id === 'node-cancel' && e.cancelled === true);
    if (!cancelled) await sleepMs(50);
  }
  check(cancelled, 'the cancelled call stopped its exec', null);

  // Background: start, follow, cancel.
  const bg = await ok(client, 'exec', { command: `echo bg-line; sleep ${marker}`, background: true });
  check(bg.state === 'running' && bg.id, 'background start', bg);
  const out = await ok(client, 'exec_output', { id: bg.id, wait_seconds: 30 });
  check(out.output === 'bg-line\n' && out.next_offset === 8, 'exec_output', out);
  const stopped = await ok(client, 'exec_cancel', { id: bg.id });
  check(stopped.cancelled === true, 'exec_cancel', stopped);

  // Files: write, read with line numbers, refuse an ambiguous edit and an
  // escape.
  await ok(client, 'file_write', { path: 'node-dir/f.txt', content: 'a\nb\na\n' });
  const read = await call(client, 'file_read', { path: 'node-dir/f.txt' });
  check(!read.isError && read.content[0].text.includes('     2\tb'), 'file_read', read);
  const amb = await call(client, 'file_edit', { path: 'node-dir/f.txt', old_string: 'a', new_string: 'c' });
  check(amb.isError === true && amb.content[0].text.includes('occurs 2 times'), 'ambiguous edit refused', amb);
  const esc = await call(client, 'file_read', { path: '../../../../etc/passwd' });
  check(esc.isError === true && esc.content[0].text.includes('escapes'), 'escape refused', esc);
}

async function main() {
  if (env.MODE === 'http') {
    let refused = false;
    try {
      const bad = await connect('not-a-token');
      await bad.close();
    } catch (e) {
      refused = true;
    }
    check(refused, 'a wrong token was accepted', null);
  }
  const client = await connect(env.TOKEN);
  try {
    await flow(client);
  } finally {
    if (env.MODE === 'http') {
      await client.transport.terminateSession();
    }
    await client.close();
  }
  console.log('flow ok');
}

main().catch((e) => {
  console.error(`flow failed: ${e.stack || e}`);
  process.exit(1);
});
