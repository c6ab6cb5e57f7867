import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { renderNginxConfig, parseNodeList } from './nginx.js';
import { hostNames, watchAddresses } from './node_addresses.js';

// The gateway image's entry point (deploy/gateway.Dockerfile): renders nginx.conf from the
// environment, then runs nginx in the foreground, passing on the platform's stop signal. The
// nodes are `SCRIPTORIUM_NODES` (`host:port,…`) and/or `SCRIPTORIUM_NODE_1`,
// `SCRIPTORIUM_NODE_2`… (one `host:port` each, as Render's `fromService … hostport` gives
// them), in that order: the order is the ring's, so keep it stable. The nodes' host names are
// looked up again every `GATEWAY_RESOLVE_INTERVAL_MS` (5000; 0: never), and nginx reads its
// configuration again when an address changed (`node_addresses.ts`). `GATEWAY_TRUST_PROXY`
// (addresses or CIDR ranges, comma-separated) names the proxies in front of the gateway whose
// X-Forwarded-For is believed (a platform's load balancer); without it the gateway is the edge.

const env = process.env;
const numbered = Object.keys(env)
  .map((key) => /^SCRIPTORIUM_NODE_(\d+)$/.exec(key))
  .filter((match): match is RegExpExecArray => match !== null)
  .sort((a, b) => Number(a[1]) - Number(b[1]))
  .map((match) => env[match[0]]!.trim())
  .filter((value) => value !== '');
const nodes = [...parseNodeList(env['SCRIPTORIUM_NODES'] ?? ''), ...numbered];
if (nodes.length === 0) {
  console.error('gateway: set SCRIPTORIUM_NODES (host:port,…) or SCRIPTORIUM_NODE_1, _2, …');
  process.exit(1);
}
const intervalText = env['GATEWAY_RESOLVE_INTERVAL_MS'] ?? '5000';
const resolveIntervalMs = /^\d{1,9}$/.test(intervalText) ? Number(intervalText) : NaN;
if (!(resolveIntervalMs === 0 || resolveIntervalMs >= 100)) {
  console.error(
    `gateway: GATEWAY_RESOLVE_INTERVAL_MS must be 0 (never) or at least 100 ms, got ${intervalText}`,
  );
  process.exit(1);
}
const prefix = env['GATEWAY_PREFIX'] ?? '/tmp/gateway';
await mkdir(prefix, { recursive: true });
let config: string;
try {
  config = renderNginxConfig({
    nodes,
    listen: env['PORT'] ?? '8080',
    prefix,
    trustForwardedFrom: parseNodeList(env['GATEWAY_TRUST_PROXY'] ?? ''),
  });
} catch (err) {
  console.error(`gateway: ${(err as Error).message}`);
  process.exit(1);
}
await writeFile(`${prefix}/nginx.conf`, config);
// nginx writes its pid file once it has read its configuration and set up its signal
// handlers; until then a SIGHUP would kill it. A leftover from an earlier run must not pass for
// that sign.
const pidFile = `${prefix}/nginx.pid`;
await rm(pidFile, { force: true });
console.log(`gateway: ${nodes.length} node(s): ${nodes.join(', ')}`);
const nginx = spawn(
  'nginx',
  ['-p', prefix, '-c', `${prefix}/nginx.conf`, '-e', `${prefix}/error.log`, '-g', 'daemon off;'],
  { stdio: 'inherit' },
);
// A change seen while nginx is still starting is applied once it can take a SIGHUP (its own
// resolution may have come before or after the change).
let nginxReady = false;
let reloadPending = false;
const reload = (): void => {
  if (nginxReady) nginx.kill('SIGHUP');
  else reloadPending = true;
};
const readiness = setInterval(() => {
  if (!existsSync(pidFile)) return;
  clearInterval(readiness);
  nginxReady = true;
  if (reloadPending) reload();
}, 50);
const hosts = hostNames(nodes);
const stopWatch =
  resolveIntervalMs > 0 && hosts.length > 0
    ? watchAddresses({
        hosts,
        intervalMs: resolveIntervalMs,
        onChange: (changes) => {
          for (const { host, addresses } of changes)
            console.log(`gateway: ${host} is now at ${addresses.join(', ')}: reloading nginx`);
          reload();
        },
        onError: (host, error) => {
          console.error(`gateway: looking up ${host} failed (${error.message}); routes kept`);
        },
      })
    : () => {};
// SIGQUIT is nginx's graceful stop: open websockets are closed only when the platform's
// shutdown delay runs out, after the nodes were told to drain.
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    stopWatch();
    clearInterval(readiness);
    nginx.kill('SIGQUIT');
  });
}
nginx.on('exit', (code) => process.exit(code ?? 1));
