import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, describe, it } from 'node:test';
import { lockFileName } from '../../../server/stores/file/directory_lock.js';
import { parseStateText } from '../../../server/stores/file/format.js';
import { Random, editRandomly, openEditor } from '../../support/editors.js';
import { runServerProcess, spawnServerProcess, startServerProcess } from '../../support/process.js';
import { waitFor } from '../../support/wait.js';

// The standalone server as a supervisor sees it: how it exits when it cannot start, and after
// a bug. Server child processes on the file store, whose lock file shows whether the store was
// closed.

const tempDirs: string[] = [];

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-ops-process-'));
  tempDirs.push(dir);
  return dir;
}

function fileEnv(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return { REDIS_URL: '', DATA_DIR: dir, ...extra };
}

/// The lines of `output` that look like a stack trace.
function stackLines(output: string): string[] {
  return output.split('\n').filter((line) => /^\s+at /.test(line));
}

describe('operations: start failures and crashes (server child processes)', () => {
  it('a port in use: one clear line, exit 1, and the data directory unlocked', async (t) => {
    const dir = await tempDir();
    const holder = createServer().listen(0, '127.0.0.1');
    await once(holder, 'listening');
    const port = (holder.address() as AddressInfo).port;
    t.after(() => holder.close());
    const { exit, output } = await runServerProcess(fileEnv(dir, { PORT: String(port) }));
    assert.equal(exit, 1, output);
    assert.match(
      output,
      new RegExp(`^scriptorium: cannot listen on 127\\.0\\.0\\.1:${port} \\(EADDRINUSE\\)$`, 'm'),
    );
    assert.deepEqual(stackLines(output), [], output);
    await assert.rejects(stat(join(dir, lockFileName)), { code: 'ENOENT' }, 'lock released');
  });

  it('an address that is not this machine`s: one clear line, exit 1', async () => {
    const dir = await tempDir();
    // TEST-NET-1 (RFC 5737): never assigned to a host.
    const { exit, output } = await runServerProcess(fileEnv(dir, { HOST: '192.0.2.1' }));
    assert.equal(exit, 1, output);
    assert.match(output, /^scriptorium: cannot listen on 192\.0\.2\.1:\d+ \(EADDRNOTAVAIL\)$/m);
    assert.deepEqual(stackLines(output), [], output);
    await assert.rejects(stat(join(dir, lockFileName)), { code: 'ENOENT' }, 'lock released');
  });

  it('Redis refusing the credentials of REDIS_URL: one clear line, exit 1', async () => {
    // A Redis that is down is waited for; one that refuses the password never will answer.
    const { exit, output } = await runServerProcess({
      REDIS_URL: 'redis://nobody:not-the-password@127.0.0.1:6379',
    });
    assert.equal(exit, 1, output);
    assert.match(output, /^scriptorium: REDIS_URL: Redis refused its credentials \(WRONGPASS/m);
    assert.deepEqual(stackLines(output), [], output);
  });

  it('a REDIS_URL node-redis cannot read: one line naming it, password hidden, exit 1', async () => {
    // node-redis threw these at start with a stack trace and, for the first two, its message
    // quoted the whole URL, password included.
    for (const [url, why] of [
      ['redis://default:s3cr#et@127.0.0.1:6379', /must be percent-encoded/],
      ['redis://default:pa/ss@127.0.0.1:6379', /must be percent-encoded/],
      ['redis://127.0.0.1:99999', /port from 1 to 65535/],
      ['redis://127.0.0.1:0', /port from 1 to 65535/],
      ['redis://127.0.0.1:6379/abc', /database number/],
      ['redis://127.0.0.1:6379/1.5', /database number/],
      ['redis://ho st:6379', /is not a URL/],
      ['http://127.0.0.1:6379', /redis:\/\/ or rediss:\/\//],
    ] as const) {
      const { exit, output } = await runServerProcess({ REDIS_URL: url });
      assert.equal(exit, 1, `${url}: ${output}`);
      assert.match(output, /^scriptorium: REDIS_URL\b/m, url);
      assert.match(output, why, url);
      assert.deepEqual(stackLines(output), [], output);
      assert.doesNotMatch(output, /s3cr|pa\/ss/, 'the password is not shown');
    }
  });

  it('a REDIS_URL database Redis does not have: one clear line, exit 1', async () => {
    // Redis answers the handshake's SELECT with an error, for good: the server stayed not
    // ready forever.
    const { exit, output } = await runServerProcess({
      REDIS_URL: 'redis://127.0.0.1:6379/99',
      STORE_TIMEOUT_MS: '500',
    });
    assert.equal(exit, 1, output);
    assert.match(
      output,
      /^scriptorium: REDIS_URL: Redis refused its database number \(ERR DB index/m,
    );
    assert.deepEqual(stackLines(output), [], output);
  });

  it('bad AUTH_PUBLIC_KEY, NODE_ENV, HOST or TRUST_PROXY: one scriptorium: line naming it, exit 1, nothing opened', async () => {
    const dir = await tempDir();
    for (const [name, value] of [
      ['AUTH_PUBLIC_KEY', '-----BEGIN PUBLIC KEY-----xyz-----END PUBLIC KEY-----'],
      ['NODE_ENV', 'prod'],
      ['NODE_ENV', 'Production'],
      ['HOST', 'not a host'],
      ['PORT', '70000'],
      // Ranges proxy-addr refuses: it threw inside the server, after the store was opened.
      ['TRUST_PROXY', '0.0.0.0/0'],
      ['TRUST_PROXY', '10.0.0.1, ::/0'],
    ] as const) {
      const { exit, output } = await runServerProcess(fileEnv(dir, { [name]: value }));
      assert.equal(exit, 1, `${name}=${value}: ${output}`);
      assert.match(output, new RegExp(`^scriptorium: ${name}\\b`, 'm'), `${name}=${value}`);
      assert.deepEqual(stackLines(output), [], output);
    }
    assert.deepEqual(await readdir(dir), [], 'the store was never opened');
  });

  it('STORE=memory next to REDIS_URL: one line naming both, exit 1', async () => {
    // REDIS_URL was ignored: every document kept in memory, lost at exit, in production too.
    const { exit, output } = await runServerProcess({
      STORE: 'memory',
      REDIS_URL: 'redis://127.0.0.1:6379',
      NODE_ENV: 'production',
      AUTH: 'off',
    });
    assert.equal(exit, 1, output);
    assert.match(output, /^scriptorium: STORE=memory contradicts REDIS_URL\b/m);
    assert.deepEqual(stackLines(output), [], output);
  });

  it('SIGTERM during start-up (waiting for Redis): acted on once start-up ends, exit 0', async () => {
    // Nothing listens on port 1: start-up waits up to STORE_TIMEOUT_MS for Redis. The handlers
    // were installed only after listen: the signal killed the process here, and as PID 1 (a
    // container without an init) it was ignored and the server went on to serve.
    const { child, output, exited } = await spawnServerProcess({
      REDIS_URL: 'redis://127.0.0.1:1',
      STORE_TIMEOUT_MS: '60000',
      // Longer than the store timeout, as the server requires with Redis.
      LEASE_MS: '120000',
      LOG_LEVEL: 'info',
    });
    try {
      // Logged before start-up awaits anything.
      await waitFor(() => /open mode/.test(output()), 'start-up under way');
      child.kill('SIGTERM');
      assert.equal(await exited, 0, output());
    } finally {
      child.kill('SIGKILL');
    }
    assert.match(output(), /stopping once start-up ends/);
    assert.match(output(), /stopped during start-up/);
    assert.doesNotMatch(output(), /listening on/);
    assert.deepEqual(stackLines(output()), [], output());
  });

  it('an uncaught exception: a graceful shutdown (snapshots written, lock released), then exit 1', async () => {
    const dir = await tempDir();
    // A bug on demand: the preloaded module throws from a signal listener, outside any
    // handler of the server's.
    const bug = join(await tempDir(), 'bug.mjs');
    await writeFile(
      bug,
      "process.on('SIGUSR2', () => { throw new Error('boom (simulated bug)'); });\n",
    );
    const server = await startServerProcess(
      fileEnv(dir, {
        NODE_OPTIONS: `--import=${pathToFileURL(bug).href}`,
        SNAPSHOT_EVERY_STEPS: '1000000',
        SNAPSHOT_EVERY_MS: '86400000',
      }),
    );
    const editor = openEditor(server.url, 'crashed');
    try {
      await editor.ready();
      await editRandomly(editor, new Random(7), 10, 5);
      await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'edits stored');
      server.child.kill('SIGUSR2');
      assert.equal(await server.exited, 1, server.output());
    } finally {
      editor.close();
      await server.stop('SIGKILL');
    }
    assert.match(server.output(), /uncaught exception/);
    assert.doesNotMatch(server.output(), /second signal/);
    await assert.rejects(stat(join(dir, lockFileName)), { code: 'ENOENT' }, 'lock released');
    const names = (await readdir(dir, { recursive: true })).filter((name) =>
      /(^|\/)crashed\..*state\.json$/.test(name),
    );
    assert.equal(names.length, 1, names.join(', '));
    const state = join(dir, names[0]!);
    const snapshot = parseStateText(await readFile(state, 'utf8'), state).snapshot;
    assert.equal(snapshot?.version, editor.version, 'the shutdown snapshot');
  });
});
