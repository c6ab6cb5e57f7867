import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { createClient } from 'redis';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { Random, editRandomly, openEditor } from '../../support/editors.js';
import { freePortRange } from '../../support/redis_process.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { waitFor } from '../../support/wait.js';

// Ctrl-C on `npm run cluster`: the terminal signals its whole foreground process group. Each
// node must still get exactly one signal and shut down gracefully: snapshots written, its
// leases released (a quick restart would otherwise answer `moved` until they
// expire).

const clusterEntry = fileURLToPath(new URL('../../../deploy/cluster.js', import.meta.url));
const { redisUrl, keyPrefix } = redisForTests();

/// `npm run cluster` with one node, `env` added, as the leader of a process group of its own (as
/// a shell makes a foreground job); `output()` is what it printed so far.
async function startCluster(env: Record<string, string>) {
  const port = await freePortRange(2);
  const cluster = spawn(
    process.execPath,
    [clusterEntry, ...['--nodes', '1', '--port', String(port), '--base-port', String(port + 1)]],
    {
      env: { ...process.env, REDIS_URL: redisUrl, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  let output = '';
  cluster.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  cluster.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return { cluster, output: () => output };
}

describe('npm run cluster, stopped as Ctrl-C stops it', () => {
  after(async () => {
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  it('a node that stops at start: the cluster says so and exits 1 at once, not after 30 s', async (t) => {
    // Production without a key: the node refuses to start, exit 1.
    const { cluster, output: printed } = await startCluster({
      NODE_ENV: 'production',
      AUTH: '',
      AUTH_SECRET: '',
      AUTH_PUBLIC_KEY: '',
    });
    t.after(() => {
      if (cluster.exitCode === null && cluster.signalCode === null) {
        process.kill(-cluster.pid!, 'SIGKILL');
      }
    });
    const [code] = (await once(cluster, 'exit')) as [number | null];
    assert.equal(code, 1, printed());
    assert.match(
      printed(),
      /^cluster: http:\/\/127\.0\.0\.1:\d+ exited \(1\) before it was ready$/m,
    );
  });

  it('a SIGINT to the process group: each node shuts down once, gracefully, and releases its leases', async (t) => {
    const { cluster, output: printed } = await startCluster({
      REDIS_KEY_PREFIX: keyPrefix,
      LOG_LEVEL: 'info',
      // Long enough that a lease left behind is still there when the test looks.
      LEASE_MS: '30000',
    });
    const exited = once(cluster, 'exit') as Promise<[number | null, string | null]>;
    const docId = 'ctrl-c';
    let editor: ReturnType<typeof openEditor> | null = null;
    t.after(() => {
      editor?.close();
      if (cluster.exitCode === null && cluster.signalCode === null) {
        process.kill(-cluster.pid!, 'SIGKILL');
      }
    });
    await waitFor(() => /^gateway (\S+)$/m.test(printed()), `the gateway:\n${printed()}`, 30_000);
    const gateway = /^gateway (\S+)$/m.exec(printed())![1]!;
    editor = openEditor(gateway, docId);
    await editor.ready();
    await editRandomly(editor, new Random(3), 10, 5);
    await waitFor(() => editor!.status === 'synced' && !editor!.hasUnconfirmed, 'edits stored');
    const redis = createClient({ url: redisUrl });
    await redis.connect();
    try {
      assert.ok(await redis.exists(docKeys(keyPrefix, docId).lease), 'the node holds the lease');
      process.kill(-cluster.pid!, 'SIGINT');
      const [code] = await exited;
      assert.equal(code, 0, printed());
      assert.doesNotMatch(printed(), /second signal/, printed());
      assert.equal(
        await redis.exists(docKeys(keyPrefix, docId).lease),
        0,
        `the lease is released:\n${printed()}`,
      );
    } finally {
      await redis.quit();
    }
  });
});
