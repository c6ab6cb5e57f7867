import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../support/redis_process.js';
import { delay } from '../../support/wait.js';

// The gateway image's entry point with the real nginx, in a mount namespace of its own whose
// /etc/hosts the test rewrites: a node's host name moving to another address (a redeployed
// Render service, a recreated compose container) must move the gateway's routes with it.

const gatewayStart = fileURLToPath(new URL('../../../deploy/gateway_start.js', import.meta.url));
const host = 'scriptorium-gateway-test-node';
// A private mount namespace needs CAP_SYS_ADMIN (root on a CI machine); without it the names
// cannot be moved under a running process, and the test says so instead of passing.
const namespaces =
  spawnSync('unshare', ['--mount', 'true'], { stdio: 'ignore' }).status === 0
    ? true
    : 'needs `unshare --mount` (root)';

describe(
  'the gateway follows its nodes to new addresses',
  { skip: namespaces !== true && namespaces },
  () => {
    let dir: string;
    let hosts: string;
    let port: number;
    const backends: Server[] = [];
    let gateway: ChildProcess | null = null;
    let output = '';

    /// An HTTP server on `address`:`port` that answers every request with `name`.
    async function backend(address: string, name: string): Promise<Server> {
      const server = createServer((_req, res) => res.end(name));
      server.listen(port, address);
      await once(server, 'listening');
      backends.push(server);
      return server;
    }

    /// What the gateway answers for `/` (any node), or the error's text.
    async function answer(gatewayPort: number): Promise<string> {
      try {
        const res = await fetch(`http://127.0.0.1:${gatewayPort}/`);
        return `${res.status} ${await res.text()}`;
      } catch (err) {
        return String(err);
      }
    }

    async function until(gatewayPort: number, expected: string, what: string): Promise<void> {
      const deadline = Date.now() + 10_000;
      let last = '';
      while (Date.now() < deadline) {
        last = await answer(gatewayPort);
        if (last === expected) return;
        await delay(50);
      }
      assert.fail(`${what}: the gateway answered ${last}; its output: ${output}`);
    }

    /// Runs the gateway's entry point in a mount namespace whose /etc/hosts is `hosts`,
    /// routing to `nodes`; resolves with the port it listens on.
    async function start(nodes: string): Promise<number> {
      const gatewayPort = await freePort();
      gateway = spawn(
        'unshare',
        [
          '--mount',
          'sh',
          '-c',
          'mount --bind "$HOSTS_FILE" /etc/hosts && exec "$NODE" "$GATEWAY_START"',
        ],
        {
          env: {
            ...process.env,
            PATH: `${process.env['PATH'] ?? ''}:/usr/sbin`,
            HOSTS_FILE: hosts,
            NODE: process.execPath,
            GATEWAY_START: gatewayStart,
            SCRIPTORIUM_NODES: nodes,
            PORT: String(gatewayPort),
            GATEWAY_PREFIX: join(dir, 'nginx'),
            GATEWAY_RESOLVE_INTERVAL_MS: '200',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      output = '';
      gateway.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      gateway.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      return gatewayPort;
    }

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'scriptorium-gateway-'));
      hosts = join(dir, 'hosts');
      port = await freePort();
    });
    after(async () => {
      if (gateway && gateway.exitCode === null) {
        gateway.kill('SIGTERM');
        await once(gateway, 'exit');
      }
      for (const server of backends) server.close();
      await rm(dir, { recursive: true, force: true });
    });

    it(
      'reloads nginx when a node host name resolves to a new address',
      { timeout: 30_000 },
      async () => {
        const base = readFileSync('/etc/hosts', 'utf8');
        await writeFile(hosts, `${base}\n127.0.0.2 ${host}\n`);
        const first = await backend('127.0.0.2', 'first');
        await backend('127.0.0.3', 'second');
        const gatewayPort = await start(`${host}:${port}`);
        await until(gatewayPort, '200 first', 'the node at its first address');

        // The node moves: its name now resolves to the other address, and the old one is gone.
        await writeFile(hosts, `${base}\n127.0.0.3 ${host}\n`);
        first.close();
        await until(gatewayPort, '200 second', 'the node at its new address');
        assert.match(output, new RegExp(`${host} is now at 127\\.0\\.0\\.3: reloading nginx`));

        // It stops on SIGTERM (nginx's graceful stop) with nothing left running.
        gateway!.kill('SIGTERM');
        const [code] = (await once(gateway!, 'exit')) as [number | null];
        assert.equal(code, 0, output);
      },
    );

    it(
      'reloads nginx for a node that moved while another node did not resolve, once it does',
      { timeout: 30_000 },
      async () => {
        const previous = gateway as ChildProcess | null;
        if (previous && previous.exitCode === null) {
          previous.kill('SIGTERM');
          await once(previous, 'exit');
        }
        const other = 'scriptorium-gateway-test-other';
        const base = readFileSync('/etc/hosts', 'utf8');
        await writeFile(hosts, `${base}\n127.0.0.5 ${host}\n127.0.0.7 ${other}\n`);
        const first = await backend('127.0.0.5', 'first');
        await backend('127.0.0.6', 'moved');
        await backend('127.0.0.7', 'other');
        const gatewayPort = await start(`${host}:${port},${other}:${port}`);
        await until(gatewayPort, '200 first', 'the first node at its first address');

        // In one change (a deploy of both services): the first node moves, and the other one
        // has no address for a moment. nginx cannot read a configuration naming a host that
        // does not resolve, so a reload now would keep the old routes.
        await writeFile(hosts, `${base}\n127.0.0.6 ${host}\n`);
        first.close();
        await delay(1000);
        // The other node is back, at the address it had.
        await writeFile(hosts, `${base}\n127.0.0.6 ${host}\n127.0.0.7 ${other}\n`);
        await until(gatewayPort, '200 moved', 'the first node at its new address');
      },
    );
  },
);
