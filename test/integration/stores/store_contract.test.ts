import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { createClient } from 'redis';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { MemoryStore } from '../../../server/stores/memory_store.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import type { Store } from '../../../server/stores/store.js';
import { RedisCluster } from '../../support/redis_cluster.js';
import { appendOf, reconstruct, snapshotOf, typingHistory } from '../../support/store_fixtures.js';

// One suite, run against every Store implementation: the server relies on these rules and must
// not be able to tell the stores apart.

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const redisPrefix = `scriptorium-test-${randomUUID()}:`;
const tempDirs: string[] = [];
// The same contract on a Redis Cluster of its own (3 masters, 3 replicas), started once.
let cluster: Promise<RedisCluster> | null = null;
function startCluster(): Promise<RedisCluster> {
  cluster ??= (async () => {
    const started = new RedisCluster();
    await started.start();
    return started;
  })();
  return cluster;
}

interface Implementation {
  name: string;
  open(): Promise<Store>;
}

const implementations: Implementation[] = [
  { name: 'MemoryStore', open: async () => new MemoryStore() },
  {
    name: 'FileStore',
    open: async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'scriptorium-store-'));
      tempDirs.push(dataDir);
      return new FileStore({ dataDir });
    },
  },
  {
    name: 'RedisStore',
    open: async () => {
      const store = new RedisStore({ url: redisUrl, keyPrefix: redisPrefix });
      await store.ready();
      return store;
    },
  },
  {
    name: 'RedisStore on a Redis Cluster',
    open: async () => {
      const { rootNodes } = await startCluster();
      // Asking one replica to confirm every write: the contract holds with WAIT too.
      const store = new RedisStore({
        cluster: { rootNodes },
        keyPrefix: redisPrefix,
        minReplicasAcked: 1,
      });
      await store.ready();
      return store;
    },
  },
];

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
  if (cluster) await (await cluster).stop();
  const client = createClient({ url: redisUrl });
  await client.connect();
  for await (const keys of client.scanIterator({ MATCH: `${redisPrefix}*`, COUNT: 1000 }))
    if (keys.length > 0) await client.del(keys);
  await client.close();
});

const history = typingHistory(250);
const epoch = 'epoch-1';

for (const implementation of implementations) {
  describe(`${implementation.name} (store contract)`, () => {
    let store: Store;
    let docId: string;

    // A fresh store and a fresh document id for every test.
    async function setUp(): Promise<void> {
      store = await implementation.open();
      docId = `doc-${randomUUID()}`;
    }

    async function tearDown(): Promise<void> {
      await store.close();
    }

    it('returns null for a document it has never seen', async () => {
      await setUp();
      assert.equal(await store.load(docId), null);
      await tearDown();
    });

    it('appends with a compare-and-set and advances the version', async () => {
      await setUp();
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 2)), {
        ok: true,
        version: 2,
      });
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 2, 5, 'client-b')), {
        ok: true,
        version: 5,
      });
      const stored = await store.load(docId);
      assert.ok(stored);
      assert.equal(stored.epoch, epoch);
      assert.equal(stored.version, 5);
      assert.equal(stored.snapshot, null);
      assert.deepEqual(stored.journal, [
        { baseVersion: 0, steps: history.steps.slice(0, 2), clientIDs: ['client-a', 'client-a'] },
        {
          baseVersion: 2,
          steps: history.steps.slice(2, 5),
          clientIDs: ['client-b', 'client-b', 'client-b'],
        },
      ]);
      assert.ok(reconstruct(stored).eq(history.docs[5]!));
      await tearDown();
    });

    it('refuses conflicting appends with the stored version and epoch', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 3));
      const conflict = { ok: false, reason: 'conflict', version: 3, epoch };
      // A stale base version, a base version from the future, another epoch.
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 1, 4)), conflict);
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 1)), conflict);
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 4, 5)), conflict);
      assert.deepEqual(await store.append(docId, appendOf(history, 'epoch-2', 3, 4)), conflict);
      // A document that does not exist accepts only base version 0.
      assert.deepEqual(await store.append(`${docId}-new`, appendOf(history, epoch, 3, 4)), {
        ok: false,
        reason: 'conflict',
        version: 0,
        epoch: null,
      });
      assert.equal(await store.load(`${docId}-new`), null);
      const stored = await store.load(docId);
      assert.equal(stored?.version, 3);
      assert.equal(stored?.journal.length, 1);
      await tearDown();
    });

    it('stores a snapshot and trims the journal entries it covers', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 2));
      await store.append(docId, appendOf(history, epoch, 2, 5));
      await store.append(docId, appendOf(history, epoch, 5, 6));
      // With the ledger of each editor's last batch, which the store keeps as it is.
      const clients = { 'client-a': 5, 'client-b': 2 };
      assert.deepEqual(await store.snapshot(docId, { ...snapshotOf(history, epoch, 5), clients }), {
        ok: true,
      });
      const stored = await store.load(docId);
      assert.ok(stored);
      assert.equal(stored.version, 6);
      assert.equal(stored.snapshot?.version, 5);
      assert.deepEqual(stored.snapshot?.doc, history.docs[5]!.toJSON());
      assert.deepEqual(stored.snapshot?.clients, clients);
      assert.deepEqual(stored.journal, [
        { baseVersion: 5, steps: history.steps.slice(5, 6), clientIDs: ['client-a'] },
      ]);
      assert.ok(reconstruct(stored).eq(history.docs[6]!));
      // Appending after a snapshot continues the same history.
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 6, 9)), {
        ok: true,
        version: 9,
      });
      assert.ok(reconstruct((await store.load(docId))!).eq(history.docs[9]!));
      // A snapshot at the head leaves an empty journal.
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 9)), { ok: true });
      const head = await store.load(docId);
      assert.deepEqual(head?.journal, []);
      assert.equal(head?.version, 9);
      assert.ok(reconstruct(head!).eq(history.docs[9]!));
      await tearDown();
    });

    it('reconstructs the document from a snapshot that ends inside an entry', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 4));
      await store.append(docId, appendOf(history, epoch, 4, 10));
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 7)), { ok: true });
      const stored = await store.load(docId);
      assert.ok(stored);
      assert.equal(stored.version, 10);
      // The entry 4–10 is kept (whole or cut at 7); the entry 0–4 is gone.
      assert.equal(stored.journal.length, 1);
      assert.ok(reconstruct(stored).eq(history.docs[10]!));
      await tearDown();
    });

    it('fences snapshots: conflict when ahead of the journal or of another epoch', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 4));
      const conflict = { ok: false, reason: 'conflict' };
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 5)), conflict);
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, 'epoch-2', 4)), conflict);
      // A document never journaled takes a snapshot of version 0 only.
      assert.deepEqual(
        await store.snapshot(`${docId}-new`, snapshotOf(history, epoch, 3)),
        conflict,
      );
      assert.equal(await store.load(`${docId}-new`), null);
      const stored = await store.load(docId);
      assert.equal(stored?.snapshot, null);
      assert.equal(stored?.journal.length, 1);
      await tearDown();
    });

    it('fences snapshots: outdated when not newer than the stored one', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 6));
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 4)), { ok: true });
      const outdated = { ok: false, reason: 'outdated' };
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 3)), outdated);
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 4)), outdated);
      const stored = await store.load(docId);
      assert.equal(stored?.snapshot?.version, 4);
      assert.ok(reconstruct(stored!).eq(history.docs[6]!));
      await tearDown();
    });

    it('starts a document from a snapshot at version 0 and journals after it', async () => {
      await setUp();
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 0)), { ok: true });
      const fresh = await store.load(docId);
      assert.deepEqual(
        { epoch: fresh?.epoch, version: fresh?.version, journal: fresh?.journal },
        { epoch, version: 0, journal: [] },
      );
      assert.deepEqual(await store.append(docId, appendOf(history, 'epoch-2', 0, 1)), {
        ok: false,
        reason: 'conflict',
        version: 0,
        epoch,
      });
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 2)), {
        ok: true,
        version: 2,
      });
      assert.ok(reconstruct((await store.load(docId))!).eq(history.docs[2]!));
      await tearDown();
    });

    it('gives concurrent loads of one document the same answer', async () => {
      await setUp();
      await store.append(docId, appendOf(history, epoch, 0, 5));
      await store.snapshot(docId, snapshotOf(history, epoch, 3));
      await store.append(docId, appendOf(history, epoch, 5, 8));
      const loads = await Promise.all(Array.from({ length: 20 }, () => store.load(docId)));
      for (const stored of loads) assert.deepEqual(stored, loads[0]);
      assert.ok(reconstruct(loads[0]!).eq(history.docs[8]!));
      await tearDown();
    });

    it('lets exactly one of 200 concurrent appends at one version through', async () => {
      await setUp();
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          store.append(docId, appendOf(history, epoch, 0, 1, `client-${i}`)),
        ),
      );
      const accepted = outcomes.filter((outcome) => outcome.ok);
      assert.equal(accepted.length, 1);
      for (const outcome of outcomes)
        if (!outcome.ok)
          assert.deepEqual(outcome, { ok: false, reason: 'conflict', version: 1, epoch });
      const stored = await store.load(docId);
      assert.equal(stored?.version, 1);
      assert.equal(stored?.journal.length, 1);
      await tearDown();
    });

    it('races 200 appends, two per version: the first of each pair wins, no gaps', async () => {
      await setUp();
      // Issued in one turn, in order: pair k applies at version k. Stores take appends in the
      // order they were issued, so the first of each pair finds the document at k.
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, (_, i) => {
          const base = Math.floor(i / 2);
          return store.append(docId, appendOf(history, epoch, base, base + 1, `client-${i % 2}`));
        }),
      );
      for (let i = 0; i < 200; i++) {
        const base = Math.floor(i / 2);
        if (i % 2 === 0) assert.deepEqual(outcomes[i], { ok: true, version: base + 1 });
        else
          assert.deepEqual(outcomes[i], {
            ok: false,
            reason: 'conflict',
            version: base + 1,
            epoch,
          });
      }
      const stored = await store.load(docId);
      assert.ok(stored);
      assert.equal(stored.version, 100);
      assert.equal(stored.journal.length, 100);
      for (const entry of stored.journal) assert.deepEqual(entry.clientIDs, ['client-0']);
      assert.ok(reconstruct(stored).eq(history.docs[100]!));
      await tearDown();
    });

    it('resets a document to a new epoch only from where the caller saw it', async (t) => {
      await setUp();
      if (!store.reset) {
        await tearDown();
        t.skip('this store has no reset');
        return;
      }
      await store.append(docId, appendOf(history, epoch, 0, 5));
      await store.snapshot(docId, snapshotOf(history, epoch, 3));
      // Not where the store is: nothing changes.
      for (const expected of [
        { epoch, version: 4 },
        { epoch: 'epoch-0', version: 5 },
        { epoch: null, version: 0 },
      ]) {
        assert.deepEqual(await store.reset(docId, snapshotOf(history, 'epoch-2', 7), expected), {
          ok: false,
          reason: 'conflict',
        });
      }
      assert.equal((await store.load(docId))?.version, 5);
      // From where it is: the history is the snapshot alone, and goes on from there.
      assert.deepEqual(
        await store.reset(docId, snapshotOf(history, 'epoch-2', 7), { epoch, version: 5 }),
        { ok: true },
      );
      let stored = await store.load(docId);
      assert.equal(stored?.epoch, 'epoch-2');
      assert.equal(stored?.version, 7);
      assert.deepEqual(stored?.journal, []);
      assert.ok(reconstruct(stored!).eq(history.docs[7]!));
      assert.equal((await store.append(docId, appendOf(history, epoch, 7, 8))).ok, false);
      assert.deepEqual(await store.append(docId, appendOf(history, 'epoch-2', 7, 9)), {
        ok: true,
        version: 9,
      });
      stored = await store.load(docId);
      assert.ok(reconstruct(stored!).eq(history.docs[9]!));
      // A document the store lost altogether.
      const gone = `${docId}:gone`;
      assert.deepEqual(
        await store.reset(gone, snapshotOf(history, 'epoch-3', 4), { epoch: null, version: 0 }),
        { ok: true },
      );
      assert.equal((await store.load(gone))?.version, 4);
      await tearDown();
    });

    it('keeps documents apart', async () => {
      await setUp();
      const other = `${docId}:other`;
      await store.append(docId, appendOf(history, epoch, 0, 3));
      await store.append(other, appendOf(history, 'epoch-2', 0, 1));
      assert.equal((await store.load(docId))?.version, 3);
      assert.equal((await store.load(other))?.version, 1);
      assert.equal((await store.load(other))?.epoch, 'epoch-2');
      await tearDown();
    });
  });
}
