// Drives runbox's MCP server with the official MCP TypeScript SDK, a client
// no one at runbox wrote. Run by ../../node_test.go:
//
//   MODE=stdio RUNBOX=path/to/runbox WORKDIR=dir MARKER=1000.123 node mcp_flow.mjs
//   MODE=http URL=http://127.0.0.1:PORT/ TOKEN=t MARKER=1000.123 node mcp_flow.mjs
//
// FLOW=long runs only the 65-second command of issue 29 with the SDK's
// default request timeout (60 s); by default it runs the tool checks and a
// coding agent's loop (agentLoop).
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

async function ok(client, name, args, options) {
  if (env.TRACE) console.error(`call ${name} ${JSON.stringify(args)}`);
  const res = await call(client, name, args, options);
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
  const want = ['exec', 'exec_cancel', 'exec_list', 'exec_output', 'file_delete', 'file_edit', 'file_list',
    'file_read', 'file_write', 'network_set', 'port_expose', 'sandbox_create', 'sandbox_fork', 'sandbox_list', 'sandbox_pause',
    'sandbox_remove', 'sandbox_resume', 'sandbox_snapshot'];
  check(JSON.stringify(names) === JSON.stringify(want), 'tools', names);
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
  const pending = call(client, 'exec', { command: `sleep ${marker}`, timeout_seconds: 600 }, { signal: abort.signal });
  pending.catch(() => {});
  let running = false;
  let cancelID = '';
  for (let i = 0; i < 600 && !running; i++) {
    const list = await ok(client, 'exec_list', {});
    const e = list.execs.find((e) => e.command === `sleep ${marker}` && e.state === 'running');
    running = e !== undefined;
    if (running) cancelID = e.id;
    if (!running) await sleepMs(50);
  }
  check(running, 'the exec to cancel runs', null);
  abort.abort();
  let cancelled = false;
  for (let i = 0; i < 1200 && !cancelled; i++) {
    const list = await ok(client, 'exec_list', {});
    cancelled = list.execs.some((e) => e.id === cancelID && e.cancelled === true);
    if (!cancelled) await sleepMs(50);
  }
  check(cancelled, 'the cancelled call stopped its exec', null);

  // Background: start, follow, cancel.
  const bg = await ok(client, 'exec', { command: `echo bg-line; sleep ${marker}`, background: true });
  check(bg.state === 'running' && bg.id, 'background start', bg);
  let out;
  for (let i = 0; i < 600; i++) {
    out = await ok(client, 'exec_output', { id: bg.id });
    if (out.output !== '') break;
    await sleepMs(50);
  }
  check(out.output === 'bg-line\n' && out.next_offset === 8 && out.state === 'running', 'exec_output', out);
  const stopped = await ok(client, 'exec_cancel', { id: bg.id });
  check(stopped.cancelled === true, 'exec_cancel', stopped);

  // Files: write, read with line numbers, refuse an ambiguous edit; an
  // absolute path outside the workspace is the sandbox's file.
  await ok(client, 'file_write', { path: 'node-dir/f.txt', content: 'a\nb\na\n' });
  const read = await call(client, 'file_read', { path: 'node-dir/f.txt' });
  check(!read.isError && read.content[0].text.includes('     2\tb'), 'file_read', read);
  const amb = await call(client, 'file_edit', { path: 'node-dir/f.txt', old_string: 'a', new_string: 'c' });
  check(amb.isError === true && amb.content[0].text.includes('occurs 2 times'), 'ambiguous edit refused', amb);
  const cat = await ok(client, 'exec', { command: 'cat /etc/os-release' });
  const osr = await ok(client, 'file_read', { path: '/etc/os-release' });
  check(osr.content === cat.stdout, 'file_read /etc/os-release', osr);
  const noContent = await call(client, 'file_write', { path: 'node-dir/empty.txt' }).catch((e) => ({ isError: true, content: [{ text: String(e) }] }));
  check(noContent.isError === true, 'file_write without content refused', noContent);
}

// A coding agent's loop, as a model drives it: write code and a test, see
// the test fail, fix the code with an edit, see it pass, start a server in
// the background and check it answers, stop it, and run a command longer
// than the client's request timeout (5 s here), collecting its end with
// exec_output.
async function agentLoop(client) {
  const short = { timeout: 5000 };
  const add = await ok(client, 'file_write', { path: 'loop/add.sh', content: 'echo $(( $1 - $2 ))\n' }, short);
  const dir = add.path.slice(0, -'/add.sh'.length);
  await ok(client, 'file_write', {
    path: 'loop/test.sh',
    content: 'got=$(sh add.sh 2 3)\nif [ "$got" != 5 ]; then echo "FAIL: add 2 3 = $got, want 5"; exit 1; fi\necho PASS\n',
  }, short);
  let r = await ok(client, 'exec', { command: `cd '${dir}' && sh test.sh` }, short);
  check(r.exit_code === 1 && r.stdout === 'FAIL: add 2 3 = -1, want 5\n' && r.cwd === dir, 'the failing test', r);
  const res = await call(client, 'exec', { command: 'sh test.sh' }, short);
  check(res.content[0].text.startsWith('exit 1 in ') && res.content[0].text.split('\n')[0].endsWith('/loop'), 'first line: status, duration, cwd', res.content);
  await ok(client, 'file_edit', { path: 'loop/add.sh', old_string: '$1 - $2', new_string: '$1 + $2' }, short);
  r = await ok(client, 'exec', { command: 'sh test.sh' }, short);
  check(r.exit_code === 0 && r.stdout === 'PASS\n', 'the passing test', r);

  // A server in the background answers; exec_cancel stops it.
  const port = 20000 + Math.floor(Math.random() * 20000);
  const server = await ok(client, 'exec', {
    command: `exec busybox httpd -f -p 127.0.0.1:${port} -h .`, background: true,
  }, short);
  check(server.state === 'running', 'the server starts', server);
  const fetch = `curl -sf http://127.0.0.1:${port}/add.sh`;
  r = await ok(client, 'exec', { command: `for i in $(seq 1 40); do ${fetch} && exit 0; sleep 0.1; done; exit 1` }, short);
  check(r.exit_code === 0 && r.stdout === 'echo $(( $1 + $2 ))\n', 'the server answers', r);
  const stopped = await ok(client, 'exec_cancel', { id: server.id }, short);
  check(stopped.cancelled === true && stopped.state === 'exited', 'the server stops', stopped);
  r = await ok(client, 'exec', { command: fetch }, short);
  check(r.exit_code !== 0, 'the stopped server no longer answers', r);

  // Longer than the client's request timeout: exec returns within it, the
  // command runs on, exec_output (each call shorter than 5 s) collects it.
  r = await ok(client, 'exec', { command: `echo begin; sleep 8; echo end ${marker}; exit 4`, wait_seconds: 2 }, short);
  check(r.state === 'running' && r.output === 'begin\n' && r.id, 'the long command returns still running', r);
  let out = { state: 'running', output: '' };
  let all = r.output;
  let offset = r.next_offset;
  for (let i = 0; i < 100 && out.state === 'running'; i++) {
    out = await ok(client, 'exec_output', { id: r.id, offset, wait_seconds: 3 }, short);
    all += out.output;
    offset = out.next_offset;
  }
  check(out.state === 'exited' && out.result.exit_code === 4 && all === `begin\nend ${marker}\n`, 'exec_output collects the end', { out, all });
}

// The command of issue 29, with the SDK's default request timeout (60 s):
// it returns its first output within exec's default wait with the command
// still running, and its full output and exit status through exec_output.
async function longFlow(client) {
  const start = Date.now();
  const r = await ok(client, 'exec', { command: `echo working; sleep 65; echo done ${marker}` });
  check(r.state === 'running' && r.output === 'working\n' && Date.now() - start < 60000, 'the 65 s command returns still running', r);
  let out = { state: 'running' };
  let all = r.output;
  let offset = r.next_offset;
  while (out.state === 'running') {
    out = await ok(client, 'exec_output', { id: r.id, offset, wait_seconds: 30 });
    all += out.output;
    offset = out.next_offset;
  }
  check(out.result.exit_code === 0 && all === `working\ndone ${marker}\n`, 'the 65 s command ends', { out, all });
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
    if (env.FLOW === 'long') {
      await longFlow(client);
    } else {
      await flow(client);
      await agentLoop(client);
    }
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
