import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { renderNginxConfig } from './nginx.js';

// `npm run cluster -- --nodes N`: N Scriptorium nodes on one Redis and an nginx gateway in
// front of them, all on loopback. Prints `node <id> pid <pid> <url>` per node, then
// `gateway <url>`, and stops everything on Ctrl-C or SIGTERM. It is also how one machine uses
// all its cores: one node per core, the gateway spreading documents over them. An entry
// point: it reads the environment (REDIS_URL, and whatever the nodes should get: AUTH_SECRET…).

const usage = `usage: npm run cluster -- --nodes N [--port P] [--base-port B] [--restart]
  --nodes N      nodes to start (1-16, default 3)
  --port P       the gateway's port (default 4000)
  --base-port B  the first node's port; node i listens on B + i - 1 (default 4101)
  --restart      start a node again when it dies
  --restart-delay MS  wait this long before restarting it (default 1000)
Needs REDIS_URL: the nodes share one Redis (documents and their leases).`;

const serverEntry = fileURLToPath(new URL('../server/main.js', import.meta.url));

function fail(message: string): never {
  console.error(`cluster: ${message}\n${usage}`);
  process.exit(1);
}

const options = {
  nodes: { type: 'string', default: '3' },
  port: { type: 'string', default: '4000' },
  'base-port': { type: 'string', default: '4101' },
  restart: { type: 'boolean', default: false },
  'restart-delay': { type: 'string', default: '1000' },
  help: { type: 'boolean', default: false },
} as const;
let values: ReturnType<typeof parseArgs<{ options: typeof options }>>['values'];
try {
  ({ values } = parseArgs({ options }));
} catch (err) {
  fail((err as Error).message);
}
if (values.help) {
  console.log(usage);
  process.exit(0);
}
const count = Number(values.nodes);
const gatewayPort = Number(values.port);
const basePort = Number(values['base-port']);
if (!Number.isInteger(count) || count < 1 || count > 16) fail('--nodes must be 1 to 16');
for (const [name, port] of [
  ['--port', gatewayPort],
  ['--base-port', basePort],
] as const) {
  if (!Number.isInteger(port) || port < 1 || port + count > 65_535) fail(`bad ${name}`);
}
const restartDelayMs = Number(values['restart-delay']);
if (!Number.isInteger(restartDelayMs) || restartDelayMs < 0) fail('bad --restart-delay');
const redisUrl = process.env['REDIS_URL'];
if (!redisUrl) fail('REDIS_URL is not set: the nodes share one Redis');

interface NodeProcess {
  id: string;
  port: number;
  url: string;
  child: ChildProcess;
}

const nodes: NodeProcess[] = [];
let stopping = false;
let gateway: ChildProcess | null = null;
const dir = await mkdtemp(join(tmpdir(), 'scriptorium-gateway-'));

function startNode(index: number): NodeProcess {
  const id = `node-${index + 1}`;
  const port = basePort + index;
  const child = spawn(process.execPath, [serverEntry], {
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      NODE_ID: id,
      REDIS_URL: redisUrl,
      // The gateway is the only client of the nodes: its X-Forwarded-For names the editors.
      TRUST_PROXY: 'loopback',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
    // A process group of its own: Ctrl-C signals the terminal's whole group, and a node that
    // got that SIGINT and then ours would take ours for a second signal and exit at once,
    // without saving or releasing its leases. Each node hears from `stop` only, once.
    detached: true,
  });
  const node = { id, port, url: `http://127.0.0.1:${port}`, child };
  child.on('exit', (code, signal) => {
    if (stopping) return;
    console.log(`node ${id} exited (${signal ?? code})${values.restart ? ': restarting' : ''}`);
    if (values.restart) {
      setTimeout(() => {
        if (stopping) return;
        const again = startNode(index);
        nodes[index] = again;
        void ready(again.url, 30_000, '/readyz', again.child).then(
          () => console.log(`node ${id} pid ${again.child.pid} ${again.url}`),
          (err: unknown) => console.log(`node ${id} did not come back: ${(err as Error).message}`),
        );
      }, restartDelayMs);
    }
  });
  return node;
}

/// Resolves once `url`/readyz answers 200; rejects after `timeoutMs`, or as soon as `child`
/// (the process that should answer) has exited: a node that stops at start (a bad setting)
/// would be waited for the whole 30 s.
async function ready(
  url: string,
  timeoutMs: number,
  path = '/readyz',
  child: ChildProcess | null = null,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      throw new Error(`${url} exited (${child.signalCode ?? child.exitCode}) before it was ready`);
    }
    try {
      const response = await fetch(url + path, { signal: AbortSignal.timeout(1000) });
      if (response.ok) return;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) throw new Error(`${url}${path} not ready after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

let stopped: Promise<never> | null = null;

/// Stops every node (SIGTERM: their graceful shutdown) and the gateway, then exits with `code`.
/// Once: Ctrl-C under npm brings a SIGINT from the terminal and another forwarded by npm, and
/// a second SIGTERM would make each node exit without waiting for its shutdown.
function stop(code: number): Promise<never> {
  stopped ??= stopOnce(code);
  return stopped;
}

async function stopOnce(code: number): Promise<never> {
  stopping = true;
  const exits = nodes.map(
    (node) =>
      new Promise<void>((resolve) => {
        if (node.child.exitCode !== null || node.child.signalCode !== null) return resolve();
        node.child.once('exit', () => resolve());
        node.child.kill('SIGTERM');
      }),
  );
  if (gateway && gateway.exitCode === null) {
    exits.push(new Promise<void>((resolve) => gateway!.once('exit', () => resolve())));
    gateway.kill('SIGQUIT');
  }
  // The nodes' own shutdown is bounded by SHUTDOWN_TIMEOUT_MS; this bounds the whole.
  await Promise.race([Promise.all(exits), new Promise((resolve) => setTimeout(resolve, 20_000))]);
  for (const node of nodes) node.child.kill('SIGKILL');
  gateway?.kill('SIGKILL');
  await rm(dir, { recursive: true, force: true });
  process.exit(code);
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => void stop(0));
}
// Detached children outlive this process unless told: should it end any other way (a bug),
// they go with it rather than hold their ports and leases.
process.on('exit', () => {
  for (const node of nodes) node.child.kill('SIGKILL');
  gateway?.kill('SIGKILL');
});

try {
  for (let i = 0; i < count; i++) nodes.push(startNode(i));
  await Promise.all(nodes.map((node) => ready(node.url, 30_000, '/readyz', node.child)));
  for (const node of nodes) console.log(`node ${node.id} pid ${node.child.pid} ${node.url}`);
  await mkdir(dir, { recursive: true });
  const config = renderNginxConfig({
    nodes: nodes.map((node) => `127.0.0.1:${node.port}`),
    listen: `127.0.0.1:${gatewayPort}`,
    prefix: dir,
    // Failover is decided by the leases; a short skip lets a restarted node back in quickly.
    failTimeoutSec: 2,
  });
  await writeFile(join(dir, 'nginx.conf'), config);
  gateway = spawn(
    process.env['NGINX'] ?? (existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx'),
    ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log'), '-g', 'daemon off;'],
    // Its own group too, so it gets only our SIGQUIT (a graceful stop), not the terminal's.
    { stdio: ['ignore', 'inherit', 'inherit'], detached: true },
  );
  gateway.on('error', (err) => {
    console.error(`cluster: nginx could not start (${err.message}): apt-get install nginx-light`);
    void stop(1);
  });
  gateway.on('exit', (code) => {
    if (!stopping) {
      console.error(`cluster: the gateway exited (${code})`);
      void stop(1);
    }
  });
  await ready(`http://127.0.0.1:${gatewayPort}`, 10_000, '/healthz', gateway);
  console.log(`gateway http://127.0.0.1:${gatewayPort}`);
} catch (err) {
  console.error(`cluster: ${(err as Error).message}`);
  await stop(1);
}
