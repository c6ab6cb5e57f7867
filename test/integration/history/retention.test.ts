import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Node } from 'prosemirror-model';
import { schema, schemaVersion } from '../../../schema/index.js';
import {
  CodedError,
  createCollab,
  FileStore,
  MemoryStore,
  RedisStore,
  type Collab,
  type Store,
} from '../../../server/index.js';
import { roomsOf } from '../../../server/collab.js';
import { retainHistory } from '../../../server/history/retention.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';

// Retention with a clock moved forward, on each real store: old steps are coarsened to one
// version per window (who wrote kept), named versions stay rebuildable, versions in between
// answer history-gone, and the archive takes fewer bytes.

const { redisUrl, keyPrefix } = redisForTests();
const dirs: string[] = [];
after(async () => {
  await deleteRedisKeys(redisUrl, keyPrefix);
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

const stores: [string, () => Promise<Store>][] = [
  ['memory', async () => new MemoryStore()],
  [
    'file',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'scriptorium-retention-'));
      dirs.push(dir);
      return new FileStore({ dataDir: dir });
    },
  ],
  [
    'redis',
    async () => {
      const store = new RedisStore({ url: redisUrl, keyPrefix });
      await store.ready();
      return store;
    },
  ],
];

const day = 86_400_000;
const minute = 60_000;

for (const [name, open] of stores) {
  describe(`retention on the ${name} store`, () => {
    it('coarsens old steps, keeps named versions, refuses the rest as history-gone', async (t) => {
      let time = Date.UTC(2026, 0, 1);
      const clock = () => time;
      const store = await open();
      const collab: Collab = createCollab({
        store,
        clock,
        limits: { snapshotEverySteps: 6, historyRetentionDays: 30, historyCoarseMinutes: 60 },
      });
      t.after(() => collab.close());
      const docId = `retention-${name}`;
      const docs: Node[] = [];
      // Three hours of typing, 20 steps an hour, by ann then bob then cy.
      const users = ['ann', 'bob', 'cy'];
      for (let i = 0; i < 60; i++) {
        time += 3 * minute;
        const user = users[Math.floor(i / 20)]!;
        await collab.change(
          docId,
          (tr) =>
            tr.insert(tr.doc.content.size - 1, schema.text(String.fromCharCode(97 + (i % 26)))),
          { user, clientID: `c-${user}` },
        );
        const current = (await collab.document(docId))!;
        docs[current.version] = current.doc;
      }
      const room = roomsOf(collab).peek(docId)!;
      await room.whenIdle();
      await room.snapshot();
      await collab.nameVersion(docId, 25, 'kept', { user: 'ann' });
      const before = await store.archive!.stats(docId);
      time += 40 * day;
      const outcome = await retainHistory(store, docId, {
        retentionMs: 30 * day,
        coarseMs: 60 * minute,
        maxBytes: 1 << 30,
        now: time,
        schema,
        schemaVersion,
      });
      assert.ok(outcome && outcome.coarsened > 0, 'old segments coarsened');
      const afterStats = await store.archive!.stats(docId);
      assert.ok(afterStats.bytes < before.bytes, `${afterStats.bytes} < ${before.bytes}`);
      // The named version and the window ends are rebuilt; versions inside windows are gone.
      assert.ok((await collab.documentAt(docId, 25)).doc.eq(docs[25]!));
      const windows = await store.archive!.windows(docId);
      assert.ok(windows.length >= 3, `${windows.length} windows`);
      for (const window of windows) {
        if (window.toVersion > 0)
          assert.ok(
            (await collab.documentAt(docId, window.toVersion)).doc.eq(docs[window.toVersion]!),
          );
      }
      const inside = windows.find((w) => w.toVersion - w.fromVersion > 2)!;
      await assert.rejects(
        collab.documentAt(docId, inside.fromVersion + 1),
        (err: unknown) => err instanceof CodedError && err.code === 'history-gone',
      );
      // The timeline still says who wrote, window by window.
      const page = await collab.history(docId);
      const writers = new Set(page.entries.flatMap((entry) => entry.users));
      assert.deepEqual([...writers].sort(), ['ann', 'bob', 'cy']);
      assert.deepEqual(
        page.named.map((n) => n.version),
        [25],
      );
      // The live part (after the newest snapshot) is untouched.
      assert.ok((await collab.documentAt(docId, 60)).doc.eq(docs[60]!));
      // Over the byte limit: every unnamed checkpoint goes, the named one stays.
      await retainHistory(store, docId, {
        retentionMs: 30 * day,
        coarseMs: 60 * minute,
        maxBytes: 1,
        now: time,
        schema,
        schemaVersion,
      });
      assert.ok((await collab.documentAt(docId, 25)).doc.eq(docs[25]!));
      assert.ok((await store.archive!.stats(docId)).bytes < afterStats.bytes);
      await collab.close();
    });

    it('thins the history of a document nobody edits when it is next read', async (t) => {
      let time = Date.UTC(2026, 0, 1);
      const store = await open();
      const collab: Collab = createCollab({
        store,
        clock: () => time,
        limits: { snapshotEverySteps: 6, historyRetentionDays: 30, historyCoarseMinutes: 60 },
      });
      t.after(() => collab.close());
      const docId = `retention-idle-${name}`;
      for (let i = 0; i < 30; i++) {
        time += 3 * minute;
        await collab.change(docId, (tr) => tr.insert(tr.doc.content.size - 1, schema.text('x')), {
          user: 'ann',
          clientID: 'c-ann',
        });
      }
      const room = roomsOf(collab).peek(docId)!;
      await room.whenIdle();
      await room.snapshot();
      assert.equal((await collab.documentAt(docId, 1)).version, 1, 'kept while recent');
      // No edit, so no snapshot, ever after: the read itself finds the steps past retention.
      time += 40 * day;
      await assert.rejects(
        collab.documentAt(docId, 1),
        (err: unknown) => err instanceof CodedError && err.code === 'history-gone',
      );
      assert.ok((await store.archive!.windows(docId)).length > 0, 'coarsened in the store');
    });
  });
}
