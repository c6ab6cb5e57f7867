import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { createClient } from 'redis';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { CollabClient } from '../../../client/index.js';
import type { StepJSON } from '../../../schema/events.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { Random, editRandomly, openEditor, waitConverged } from '../../support/editors.js';
import { freePortRange } from '../../support/redis_process.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { pollUntil, waitFor } from '../../support/wait.js';

// `npm run cluster`: three nodes on a real Redis behind the nginx gateway. Documents spread
// over the nodes; editors converge through the gateway; kill -9 of a document's node: the
// document is served again by another node within the lease time, nothing acknowledged lost;
// the node comes back (--restart) and its documents move back to it, every editor ending
// equal to the stored document.

const clusterEntry = fileURLToPath(new URL('../../../deploy/cluster.js', import.meta.url));
// Keys of their own: another run on the same Redis (CI's, a developer's) must not keep this
// run's node ids alive, which would have a stand-in take over a killed node's documents as
// their home.
const { redisUrl, keyPrefix } = redisForTests();

interface Served {
  node: string;
  version: number;
  doc: unknown;
}

describe('a cluster of three nodes behind the gateway', () => {
  let cluster: ChildProcess;
  let gateway: string;
  const pids = new Map<string, number>();
  const lines: string[] = [];
  const run = randomUUID().slice(0, 8);

  before(async () => {
    // The gateway and three nodes on consecutive ports outside the ephemeral range.
    const port = await freePortRange(4);
    const basePort = port + 1;
    cluster = spawn(
      process.execPath,
      [
        clusterEntry,
        ...['--nodes', '3', '--port', String(port), '--base-port', String(basePort)],
        // Restarted after the failover has happened, so that both moves can be seen.
        ...['--restart', '--restart-delay', '8000'],
      ],
      {
        env: {
          ...process.env,
          REDIS_URL: redisUrl,
          REDIS_KEY_PREFIX: keyPrefix,
          LOG_LEVEL: 'warn',
          LEASE_MS: '3000',
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const reader = createInterface({ input: cluster.stdout! });
    reader.on('line', (line) => {
      lines.push(line);
      const node = /^node (\S+) pid (\d+) (\S+)$/.exec(line);
      if (node) pids.set(node[1]!, Number(node[2]));
    });
    await waitFor(() => lines.some((line) => line.startsWith('gateway ')), 'the gateway', 30_000);
    gateway = lines.find((line) => line.startsWith('gateway '))!.slice('gateway '.length);
  });

  after(async () => {
    if (cluster.exitCode === null) {
      const exited = new Promise((resolve) => cluster.once('exit', resolve));
      cluster.kill('SIGTERM');
      await exited;
    }
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  /// What Redis and the nodes' logs say about `docId`, for a failure message: the document's
  /// lease, handover request and home, each node's liveness (and since when), and the nodes'
  /// last log lines.
  async function diagnose(docId: string): Promise<string> {
    const redis = createClient({ url: redisUrl });
    await redis.connect();
    try {
      const keys = docKeys(keyPrefix, docId);
      const facts: Record<string, unknown> = {
        lease: await redis.get(keys.lease),
        wanted: await redis.get(keys.wanted),
        home: await redis.get(keys.home),
      };
      for (const node of ['node-1', 'node-2', 'node-3']) {
        const key = `${keyPrefix}node:${node}`;
        facts[node] = { since: await redis.get(key), ttlMs: await redis.pTTL(key) };
      }
      const logs = lines.filter((line) => !line.startsWith('node ')).slice(-40);
      return `${JSON.stringify(facts)}\n${logs.join('\n')}`;
    } finally {
      await redis.quit();
    }
  }

  async function served(docId: string): Promise<Served | null> {
    const response = await fetch(`${gateway}/docs/${docId}`);
    if (response.status !== 200) return null;
    const body = (await response.json()) as { version: number; doc: unknown };
    return { node: response.headers.get('x-scriptorium-node')!, ...body };
  }

  it('prints one line per node, then the gateway', () => {
    const first = lines.slice(0, lines.findIndex((line) => line.startsWith('gateway ')) + 1);
    assert.deepEqual(
      first.filter((line) => line.startsWith('node ')).map((line) => line.split(' ')[1]),
      ['node-1', 'node-2', 'node-3'],
    );
    assert.match(first.at(-1)!, /^gateway http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('spreads documents over the nodes, each always on the same one', async () => {
    const owners = new Map<string, string>();
    const editors: CollabClient[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const editor = openEditor(gateway, `${run}-spread-${i}`, { clientID: `spread-${i}` });
        editors.push(editor);
      }
      await Promise.all(editors.map((editor) => editor.ready()));
      for (let i = 0; i < 12; i++) {
        const first = await served(`${run}-spread-${i}`);
        const again = await served(`${run}-spread-${i}`);
        assert.ok(first && again);
        assert.equal(first.node, again.node);
        owners.set(`${run}-spread-${i}`, first.node);
      }
    } finally {
      for (const editor of editors) editor.close();
    }
    assert.ok(new Set(owners.values()).size >= 2, JSON.stringify([...owners]));
  });

  it('kill -9 of a node: its document is served again within 20 s, nothing acknowledged lost; back, it gets it again', async (t) => {
    const docIds = [0, 1, 2].map((i) => `${run}-edit-${i}`);
    const acked: { version: number; docId: string }[] = [];
    const editors = docIds.flatMap((docId, d) =>
      [0, 1, 2].map((i) =>
        openEditor(gateway, docId, {
          clientID: `e-${d}-${i}`,
          onAcknowledged: (version: number, _steps: readonly StepJSON[]) =>
            acked.push({ version, docId }),
        }),
      ),
    );
    t.after(() => {
      for (const editor of editors) editor.close();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    await Promise.all(editors.map((e, i) => editRandomly(e, new Random(10 + i), 15, 20)));
    for (const docId of docIds) {
      const mine = editors.filter((e) => e.docId === docId);
      await waitConverged(mine, () => mine[0]!.version);
    }
    // The owner of the first document dies.
    const victim = (await served(docIds[0]!))!.node;
    const killedAt = Date.now();
    process.kill(pids.get(victim)!, 'SIGKILL');
    const editing = Promise.all(editors.map((e, i) => editRandomly(e, new Random(50 + i), 20, 50)));
    const after = await pollUntil(
      () => served(docIds[0]!).catch(() => null),
      (found) => found !== null && found.node !== victim,
      20_000,
      200,
    );
    assert.ok(after && after.node !== victim, 'served again by another node');
    const failoverMs = Date.now() - killedAt;
    assert.ok(failoverMs < 20_000, `served again after ${failoverMs} ms`);
    await editing;
    const checkAll = async () => {
      for (const docId of docIds) {
        const mine = editors.filter((e) => e.docId === docId);
        await waitFor(
          () => mine.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
          'settled',
          30_000,
        );
        // The killed node may have owned this document too, and the restarted one takes its
        // documents back: while a document changes hands its GET answers 503 for a moment.
        const final = await pollUntil(
          () => served(docId).catch(() => null),
          (found) => found !== null,
          20_000,
          200,
        );
        assert.ok(final, `${docId} served again`);
        const stored = final;
        await waitConverged(mine, () => stored.version);
        for (const editor of mine) {
          assert.deepEqual(JSON.parse(JSON.stringify(editor.state!.doc.toJSON())), stored.doc);
        }
        const ackedHere = acked.filter((a) => a.docId === docId).map((a) => a.version);
        assert.ok(Math.max(...ackedHere) <= stored.version, 'nothing acknowledged lost');
      }
    };
    await checkAll();
    // The node comes back (restarted by the cluster): the gateway routes the document to it
    // again, the interim node hands it over, and its editors follow.
    await waitFor(
      () => lines.filter((line) => line.startsWith(`node ${victim} pid `)).length === 2,
      'the node restarted',
      30_000,
    );
    const back = await pollUntil(
      () => served(docIds[0]!).catch(() => null),
      (found) => found?.node === victim,
      30_000,
      250,
    );
    if (back?.node !== victim)
      assert.fail(`the document did not go back to ${victim}: ${await diagnose(docIds[0]!)}`);
    await Promise.all(editors.map((e, i) => editRandomly(e, new Random(90 + i), 10, 30)));
    await checkAll();
  });
});
