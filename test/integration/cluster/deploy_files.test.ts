import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { io } from 'socket.io-client';
import type { SyncAnswer } from '../../../schema/events.js';
import { parseNodeList, renderNginxConfig } from '../../../deploy/nginx.js';
import { createTokenVerifier } from '../../../server/protocol/auth.js';
import { freePort } from '../../support/redis_process.js';
import { nginxBinary, startNginx } from '../../support/nginx.js';
import { startServer } from '../../support/server.js';
import { ask } from '../../support/socket.js';

// The deployment files, checked without the platforms (no Docker, no Render here): the
// Blueprint and the compose file have the shape the README promises and refer only to things
// that exist; the gateway's rendered config is accepted by the real nginx.

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../../', import.meta.url));

type Doc = Record<string, unknown>;
const load = async (file: string): Promise<Doc> =>
  parse(await readFile(join(root, file), 'utf8'), { merge: true }) as Doc;

/// Render's Blueprint fields this repository uses, per service type: a misspelt field would be
/// ignored by Render (or refused when syncing), so an unknown one fails here.
const knownFields: Record<string, Set<string>> = {
  web: new Set([
    ...['type', 'name', 'runtime', 'dockerfilePath', 'dockerContext', 'plan'],
    ...['healthCheckPath', 'maxShutdownDelaySeconds', 'envVars', 'numInstances'],
  ]),
  // No healthCheckPath: Render health-checks web services only, and a path that looks like a
  // check but is never requested promises what the platform does not do.
  pserv: new Set([
    ...['type', 'name', 'runtime', 'dockerfilePath', 'dockerContext', 'plan'],
    ...['maxShutdownDelaySeconds', 'envVars', 'numInstances'],
  ]),
  keyvalue: new Set(['type', 'name', 'plan', 'maxmemoryPolicy', 'persistenceMode', 'ipAllowList']),
};

describe('render.yaml', () => {
  it('has a gateway, single-instance nodes on one private Key Value, and a shared secret', async () => {
    const blueprint = await load('render.yaml');
    const services = blueprint['services'] as Doc[];
    const groups = blueprint['envVarGroups'] as Doc[];
    for (const service of services) {
      const known = knownFields[String(service['type'])];
      assert.ok(known, `service type ${String(service['type'])}`);
      for (const field of Object.keys(service)) {
        assert.ok(known.has(field), `${String(service['name'])}: unknown field ${field}`);
      }
      if (service['dockerfilePath']) {
        assert.ok(existsSync(join(root, String(service['dockerfilePath']))), 'the Dockerfile');
      }
    }
    const byType = (type: string) => services.filter((s) => s['type'] === type);
    const [gateway, ...otherWeb] = byType('web');
    assert.ok(gateway && otherWeb.length === 0, 'one public service: the gateway');
    assert.equal(gateway['runtime'], 'docker');
    assert.equal(gateway['dockerfilePath'], './deploy/gateway.Dockerfile');
    const nodes = byType('pserv');
    assert.ok(nodes.length >= 2);
    const [kv, ...otherKv] = byType('keyvalue');
    assert.ok(kv && otherKv.length === 0);
    assert.equal(kv['maxmemoryPolicy'], 'noeviction');
    // Explicit, not the plan's default: the journal is what keeps acknowledged batches across a
    // restart of the Key Value instance.
    assert.equal(kv['persistenceMode'], 'journal-snapshot');
    assert.deepEqual(kv['ipAllowList'], [], 'no public access to Key Value');
    assert.notEqual(kv['plan'], 'free', 'a plan that keeps data');

    const shared = groups.find((g) => g['name'] === 'scriptorium-shared')!;
    const sharedVars = shared['envVars'] as Doc[];
    assert.deepEqual(
      sharedVars.find((v) => v['key'] === 'AUTH_SECRET'),
      { key: 'AUTH_SECRET', generateValue: true },
    );
    // The nodes' metrics must not be open to whoever reaches them.
    assert.deepEqual(
      sharedVars.find((v) => v['key'] === 'METRICS_TOKEN'),
      { key: 'METRICS_TOKEN', generateValue: true },
    );

    const nodeIds = new Set<string>();
    for (const node of nodes) {
      assert.equal(node['numInstances'], 1, `${String(node['name'])}: one instance`);
      assert.ok(Number(node['maxShutdownDelaySeconds']) >= 10);
      const vars = node['envVars'] as Doc[];
      const id = vars.find((v) => v['key'] === 'NODE_ID')?.['value'];
      assert.ok(typeof id === 'string' && !nodeIds.has(id), `a node id of its own: ${String(id)}`);
      nodeIds.add(id);
      const redis = vars.find((v) => v['key'] === 'REDIS_URL')?.['fromService'] as Doc;
      assert.deepEqual(redis, {
        type: 'keyvalue',
        name: kv['name'],
        property: 'connectionString',
      });
      assert.ok(vars.some((v) => v['fromGroup'] === 'scriptorium-shared'));
    }
    // The gateway routes to every node, each once.
    const routed = (gateway['envVars'] as Doc[])
      .filter((v) => String(v['key']).startsWith('SCRIPTORIUM_NODE_'))
      .map((v) => (v['fromService'] as Doc)['name']);
    assert.deepEqual([...routed].sort(), nodes.map((n) => n['name']).sort());
  });
});

describe('docker-compose.yml', () => {
  it('runs one server by default and, with the cluster profile, a gateway and three nodes', async () => {
    const compose = await load('docker-compose.yml');
    const services = compose['services'] as Record<string, Doc>;
    const inDefault = Object.keys(services).filter((name) => !services[name]!['profiles']);
    assert.deepEqual(inDefault.sort(), ['redis', 'server']);
    const cluster = Object.keys(services).filter((name) =>
      (services[name]!['profiles'] as string[] | undefined)?.includes('cluster'),
    );
    assert.deepEqual(cluster.sort(), ['gateway', 'node-1', 'node-2', 'node-3']);
    const gatewayEnv = services['gateway']!['environment'] as Doc;
    const listed = parseNodeList(String(gatewayEnv['SCRIPTORIUM_NODES']));
    const ids = new Set<string>();
    for (const name of ['node-1', 'node-2', 'node-3']) {
      const env = services[name]!['environment'] as Doc;
      ids.add(String(env['NODE_ID']));
      assert.equal(env['REDIS_URL'], 'redis://redis:6379');
      assert.match(String(env['AUTH_SECRET']), /^\$\{AUTH_SECRET:\?/);
      assert.ok(listed.includes(`${name}:${String(env['PORT'])}`), `the gateway lists ${name}`);
    }
    assert.equal(ids.size, 3, 'three node ids');
    // Docker must wait out the server's own shutdown bound (SHUTDOWN_TIMEOUT_MS 10 s and its
    // grace) before it sends SIGKILL.
    for (const name of ['server', 'node-1', 'node-2', 'node-3']) {
      const grace = /^(\d+)s$/.exec(String(services[name]!['stop_grace_period']));
      assert.ok(grace && Number(grace[1]) >= 12, `${name}: stop_grace_period`);
    }
    const build = services['gateway']!['build'] as Doc;
    assert.ok(existsSync(join(root, String(build['dockerfile']))));
    assert.match(String((services['server']!['environment'] as Doc)['AUTH_SECRET']), /AUTH_SECRET/);
  });

  it('with the redis-cluster profile, runs six cluster nodes and a server on them', async () => {
    const compose = await load('docker-compose.yml');
    const services = compose['services'] as Record<string, Doc>;
    const inProfile = Object.keys(services).filter((name) =>
      (services[name]!['profiles'] as string[] | undefined)?.includes('redis-cluster'),
    );
    const nodes = inProfile.filter((name) => /^redis-cluster-\d$/.test(name));
    assert.equal(nodes.length, 6, 'three masters and three replicas');
    for (const name of nodes) {
      const command = (services[name]!['command'] as unknown[]).map(String);
      const option = (flag: string) => command[command.indexOf(`--${flag}`) + 1];
      assert.equal(option('cluster-enabled'), 'yes', name);
      assert.equal(option('appendfsync'), 'always', name);
      assert.equal(option('maxmemory-policy'), 'noeviction', name);
    }
    const init = String((services['redis-cluster-init']!['command'] as unknown[])[0]);
    assert.match(init, /--cluster-replicas 1/);
    const env = services['server-cluster']!['environment'] as Doc;
    for (const seed of String(env['REDIS_CLUSTER_NODES']).split(','))
      assert.ok(nodes.includes(seed.split(':')[0]!), `seed ${seed} is a cluster node`);
    assert.equal(env['REDIS_MIN_REPLICAS_ACKED'], '1');
    assert.equal(env['REDIS_URL'], undefined);
  });

  it('caps Redis below its container`s memory, refusing writes rather than evicting', async () => {
    const compose = await load('docker-compose.yml');
    const redis = (compose['services'] as Record<string, Doc>)['redis']!;
    const command = (redis['command'] as unknown[]).map(String);
    const option = (name: string) => {
      const at = command.indexOf(`--${name}`);
      return at < 0 ? undefined : command[at + 1];
    };
    assert.equal(option('maxmemory-policy'), 'noeviction');
    // Without maxmemory (0, unlimited) noeviction never applies: Redis grows until the
    // kernel kills it, and whatever its AOF had not written yet goes with it.
    const max = bytesOf(option('maxmemory'));
    const limit = bytesOf(redis['mem_limit']);
    assert.ok(max > 0, `maxmemory: ${option('maxmemory')}`);
    // Headroom for what maxmemory does not count: the AOF rewrite's fork (pages copied on
    // write), client buffers, fragmentation.
    assert.ok(max <= 0.8 * limit, `maxmemory ${max} leaves room under mem_limit ${limit}`);
  });
});

/// Bytes in a Redis or Compose size (`700mb`, `1g`), in binary units as Docker reads them and
/// Redis reads `mb` and `gb` (its `m` and `g` are decimal: a little less); NaN for anything else.
function bytesOf(size: unknown): number {
  const match = /^(\d+)\s*(b|k|kb|m|mb|g|gb)?$/i.exec(String(size ?? ''));
  if (!match) return NaN;
  const unit = (match[2] ?? 'b').toLowerCase()[0]!;
  return (
    Number(match[1]) *
    ({ b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 } as const)[unit as 'b' | 'k' | 'm' | 'g']
  );
}

describe('the Dockerfiles', () => {
  it('run node under tini, not as PID 1', async () => {
    // PID 1 ignores signals it has no handler for and a SIGKILL it sends itself: the server's
    // last resort on a hung disk (killing itself, status 137) did nothing in a container.
    for (const [file, tini, command] of [
      ['Dockerfile', '/usr/bin/tini', ['node', 'dist/server/main.js']],
      ['deploy/gateway.Dockerfile', '/sbin/tini', ['node', 'deploy/gateway_start.js']],
    ] as const) {
      const text = await readFile(join(root, file), 'utf8');
      // The image that runs: the last stage.
      const last = text.slice(text.lastIndexOf('\nFROM '));
      assert.match(last, /^RUN .*\b(apt-get install|apk add)\b.*\btini\b/m, file);
      const instruction = (name: string) =>
        JSON.parse(new RegExp(`^${name} (\\[.*\\])$`, 'm').exec(last)?.[1] ?? 'null') as unknown;
      assert.deepEqual(instruction('ENTRYPOINT'), [tini, '--'], file);
      assert.deepEqual(instruction('CMD'), command, file);
    }
  });
});

describe('docker-compose config', () => {
  it('accepts the file, for the default set and the cluster profile, and demands AUTH_SECRET', async () => {
    const compose = (args: string[], env: Record<string, string>) =>
      run('docker-compose', ['-f', join(root, 'docker-compose.yml'), ...args], {
        cwd: root,
        env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', ...env },
      });
    const secret = { AUTH_SECRET: 'x'.repeat(64) };
    await compose(['config', '-q'], secret);
    const services = async (profile: string[]) =>
      (await compose([...profile, 'config', '--services'], secret)).stdout
        .split('\n')
        .filter(Boolean)
        .sort();
    // (Which services each profile starts is checked on the parsed file above: docker-compose
    // v1 lists every service here, whatever the profile.)
    assert.deepEqual(await services(['--profile', 'cluster']), [
      'gateway',
      'node-1',
      'node-2',
      'node-3',
      'redis',
      'redis-cluster-1',
      'redis-cluster-2',
      'redis-cluster-3',
      'redis-cluster-4',
      'redis-cluster-5',
      'redis-cluster-6',
      'redis-cluster-init',
      'server',
      'server-cluster',
    ]);
    await assert.rejects(compose(['config', '-q'], {}), /AUTH_SECRET/);
  });
});

describe('the gateway config', () => {
  it('routes documents by id, upgrades websockets, and is accepted by nginx -t', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'scriptorium-nginx-'));
    try {
      const config = renderNginxConfig({
        nodes: ['127.0.0.1:4101', '127.0.0.1:4102', '127.0.0.1:4103'],
        listen: '127.0.0.1:4100',
        prefix: dir,
      });
      assert.match(config, /hash \$scriptorium_doc consistent;/);
      assert.match(config, /set \$scriptorium_doc \$scriptorium_query_doc;/);
      assert.match(
        config,
        /location ~\* \^\/docs\/\(\[\^\/\]\+\)\(\/\.\*\)\?\$ \{\s+set \$scriptorium_doc \$1;/,
      );
      assert.match(config, /proxy_set_header Upgrade \$http_upgrade;/);
      assert.equal(config.match(/server 127\.0\.0\.1:410[123] max_fails=1/g)?.length, 6);
      await writeFile(join(dir, 'nginx.conf'), config);
      const { stderr } = await run(nginxBinary, [
        ...['-t', '-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
      ]);
      assert.match(stderr, /test is successful/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    assert.throws(() => renderNginxConfig({ nodes: [], listen: '80', prefix: '/tmp' }));
    assert.throws(() => renderNginxConfig({ nodes: ['a b:1'], listen: '80', prefix: '/tmp' }));
  });
});

describe('the gateway, running', () => {
  it('answers 404 for the metrics and the dashboard (nodes are scraped directly) and proxies the rest', async (t) => {
    const node = await startServer({ nodeId: 'behind-the-gateway' });
    const dir = await mkdtemp(join(tmpdir(), 'scriptorium-nginx-'));
    const port = await freePort();
    const gateway = `http://127.0.0.1:${port}`;
    let stopNginx: (() => Promise<void>) | null = null;
    t.after(async () => {
      await stopNginx?.();
      await node.close();
      await rm(dir, { recursive: true, force: true });
    });
    stopNginx = await startNginx(
      dir,
      renderNginxConfig({
        nodes: [`127.0.0.1:${node.port}`],
        listen: `127.0.0.1:${port}`,
        prefix: dir,
        workers: 1,
      }),
      `${gateway}/healthz`,
    );
    for (const path of [
      ...['/metrics', '/metrics/', '/metrics/windows?last=1', '/METRICS', '//metrics'],
      ...['/dashboard', '/dashboard/', '/dashboard/app.js', '/dashboard/app.css'],
    ]) {
      // The node itself serves each (so the 404 below is the gateway's doing).
      const direct = await fetch(`${node.url}${path.replace('//', '/')}`, { redirect: 'manual' });
      await direct.arrayBuffer();
      assert.notEqual(direct.status, 404, `${path} on the node`);
      const response = await fetch(`${gateway}${path}`, { redirect: 'manual' });
      assert.equal(response.status, 404, path);
      assert.equal(((await response.json()) as { code: string }).code, 'not-found', path);
    }
    const served = await fetch(`${gateway}/docs/never-seen`);
    assert.equal(served.status, 404);
    assert.equal(served.headers.get('x-scriptorium-node'), 'behind-the-gateway');
    // A page the gateway served opens its socket through it: the node sees the gateway's
    // Host, so the page's Origin is its own, and admits it (once, the node saw the upstream's
    // name and refused every browser).
    const socket = io(gateway, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      query: { doc: 'through-the-gateway' },
      auth: { clientID: 'gateway-page' },
      extraHeaders: { origin: gateway },
    });
    try {
      const connected = await new Promise<string>((resolve) => {
        socket.once('connect', () => resolve('connected'));
        socket.once('connect_error', (err: Error & { data?: { code?: string } }) =>
          resolve(`refused: ${err.data?.code ?? err.message}`),
        );
      });
      assert.equal(connected, 'connected');
      const joined = await ask<SyncAnswer>(socket, 'join', {});
      assert.equal(joined.ok, true, JSON.stringify(joined));
    } finally {
      socket.close();
    }
  });
});

describe("the gateway's forwarded headers", () => {
  /// Starts nginx with the gateway's config for one node, `trustForwardedFrom` as given; the
  /// node answers with the Host and X-Forwarded-For it got. Returns what it answered for a
  /// request to each of the gateway's proxied locations carrying each of `sent` (undefined: no
  /// X-Forwarded-For), as `<path> <host> <x-forwarded-for>` lines.
  async function forwarded(
    trustForwardedFrom: string[],
    sent: (string | undefined)[],
  ): Promise<{ port: number; seen: string[] }> {
    const node = createServer((req, res) =>
      res.end(`${req.headers.host} ${req.headers['x-forwarded-for'] ?? '-'}`),
    );
    node.listen(0, '127.0.0.1');
    await once(node, 'listening');
    const nodePort = (node.address() as AddressInfo).port;
    const dir = await mkdtemp(join(tmpdir(), 'scriptorium-nginx-'));
    const port = await freePort();
    let stopNginx: (() => Promise<void>) | null = null;
    try {
      stopNginx = await startNginx(
        dir,
        renderNginxConfig({
          nodes: [`127.0.0.1:${nodePort}`],
          listen: `127.0.0.1:${port}`,
          prefix: dir,
          workers: 1,
          trustForwardedFrom,
        }),
        `http://127.0.0.1:${port}/`,
      );
      const seen: string[] = [];
      for (const path of ['/', '/docs/a-doc', '/socket.io/?doc=a-doc&EIO=4&transport=polling']) {
        for (const header of sent) {
          const response = await fetch(`http://127.0.0.1:${port}${path}`, {
            headers: header === undefined ? {} : { 'X-Forwarded-For': header },
          });
          seen.push(`${path.split('?')[0]} ${await response.text()}`);
        }
      }
      return { port, seen };
    } finally {
      await stopNginx?.();
      node.close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("passes the browser's Host, and the address that connected as X-Forwarded-For, never the client's own", async () => {
    // The nodes compare a browser's Origin with Host, and trust the gateway's network, which
    // can hold the address a client connects from (Docker's userland proxy): a header passed
    // on or appended to would let that client name any address it likes.
    const { port, seen } = await forwarded([], [undefined, '203.0.113.7, 10.1.2.3']);
    const host = `127.0.0.1:${port}`;
    assert.deepEqual(seen, [
      `/ ${host} 127.0.0.1`,
      `/ ${host} 127.0.0.1`,
      `/docs/a-doc ${host} 127.0.0.1`,
      `/docs/a-doc ${host} 127.0.0.1`,
      `/socket.io/ ${host} 127.0.0.1`,
      `/socket.io/ ${host} 127.0.0.1`,
    ]);
  });

  it('behind a trusted proxy, passes the client that proxy names', async () => {
    // The rightmost address the trusted proxies did not add: a client's own entries to its
    // left are ignored.
    const { seen } = await forwarded(['127.0.0.0/8'], ['203.0.113.7', '198.51.100.1, 203.0.113.7']);
    assert.deepEqual(
      seen.map((line) => line.split(' ')[2]),
      Array<string>(6).fill('203.0.113.7'),
    );
    assert.throws(
      () =>
        renderNginxConfig({
          nodes: ['a:1'],
          listen: '80',
          prefix: '/tmp',
          trustForwardedFrom: ['x; y'],
        }),
      /not an address or CIDR range/,
    );
  });
});

describe('the README', () => {
  it('gives a token URL whose command prints the token and nothing else', async () => {
    const readme = await readFile(join(root, 'README.md'), 'utf8');
    const command = /#token=\$\((AUTH_SECRET=… [^)]+)\)/.exec(readme)?.[1];
    assert.ok(command, 'the token URL in the README');
    const secret = 'a-readme-secret-that-is-long-enough-0123456789';
    const { stdout } = await run('sh', ['-c', command.replace('AUTH_SECRET=…', '')], {
      cwd: root,
      env: { ...process.env, AUTH_SECRET: secret },
    });
    // What `$(…)` captures: one JWT, which the page reads from the fragment as it is.
    assert.match(stdout.trim(), /^[\w-]+\.[\w-]+\.[\w-]+$/, stdout);
    const token = stdout.trim();
    const verifier = createTokenVerifier({ secret });
    assert.equal((await verifier.verify(token, 'notes')).ok, true);
  });
});
