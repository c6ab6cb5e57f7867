import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Node } from 'prosemirror-model';
import { schema } from '../../../schema/index.js';
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
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';

// The history kept on each real store: every version rebuilt by documentAt equals the document
// the authority published at it, sessions and users come back as written, and all of it is
// still there after the store is closed and opened again (the file and Redis stores).

const { redisUrl, keyPrefix } = redisForTests();
const dirs: string[] = [];

after(async () => {
  await deleteRedisKeys(redisUrl, keyPrefix);
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/// A store kind: how to open it (again, on the same data).
interface Kind {
  name: string;
  open(): Promise<() => Promise<Store>>;
}

const kinds: Kind[] = [
  {
    name: 'memory',
    async open() {
      const store = new MemoryStore();
      return async () => store;
    },
  },
  {
    name: 'file',
    async open() {
      const dir = await mkdtemp(join(tmpdir(), 'scriptorium-history-'));
      dirs.push(dir);
      return async () => new FileStore({ dataDir: dir });
    },
  },
  {
    name: 'redis',
    async open() {
      return async () => {
        const store = new RedisStore({ url: redisUrl, keyPrefix });
        await store.ready();
        return store;
      };
    },
  },
];

/// A clock the test moves.
function testClock(start = Date.UTC(2026, 0, 1)): { now: () => number; advance(ms: number): void } {
  let time = start;
  return {
    now: () => time,
    advance(ms) {
      time += ms;
    },
  };
}

function collabOn(store: Store, clock: () => number): Collab {
  return createCollab({ store, clock, limits: { snapshotEverySteps: 7 }, logger: undefined });
}

/// Types `count` characters, alternating users in runs, the clock moving `stepMs` each; returns
/// the document after each version (index = version).
async function typeInto(
  collab: Collab,
  docId: string,
  count: number,
  clock: { advance(ms: number): void },
  users: string[],
  stepMs = 1000,
): Promise<Node[]> {
  const docs: Node[] = [];
  for (let i = 0; i < count; i++) {
    clock.advance(stepMs);
    const user = users[Math.floor(i / 5) % users.length]!;
    await collab.change(
      docId,
      (tr) => {
        if (i % 11 === 10) tr.insert(tr.doc.content.size, schema.node('paragraph'));
        else tr.insert(tr.doc.content.size - 1, schema.text(String.fromCharCode(97 + (i % 26))));
      },
      { user, clientID: `c-${user}` },
    );
    const current = await collab.document(docId);
    docs[current!.version] = current!.doc;
  }
  return docs;
}

async function settle(collab: Collab, docId: string): Promise<void> {
  const room = roomsOf(collab).peek(docId);
  if (room) {
    await room.whenIdle();
    await room.snapshot();
  }
}

for (const kind of kinds) {
  describe(`history on the ${kind.name} store`, () => {
    it('rebuilds every version, groups sessions, and keeps them across a restart', async () => {
      const reopen = await kind.open();
      const clock = testClock();
      const docId = `hist-${kind.name}-${Date.now()}`;
      let store = await reopen();
      let collab = collabOn(store, clock.now);
      const docs = await typeInto(collab, docId, 30, clock, ['ann', 'bob']);
      clock.advance(60 * 60_000);
      const more = await typeInto(collab, docId, 20, clock, ['cy']);
      for (let v = 0; v < more.length; v++) if (more[v]) docs[v] = more[v]!;
      await settle(collab, docId);
      const check = async (c: Collab) => {
        const head = (await c.document(docId))!.version;
        assert.equal(head, 50);
        for (let v = 1; v <= head; v++) {
          const at = await c.documentAt(docId, v);
          assert.ok(at.doc.eq(docs[v]!), `version ${v}`);
        }
        const page = await c.history(docId);
        assert.equal(page.entries.length, 2);
        assert.deepEqual(page.entries[0]!.users, ['cy']);
        assert.deepEqual(
          { from: page.entries[0]!.fromVersion, to: page.entries[0]!.toVersion },
          { from: 30, to: 50 },
        );
        assert.deepEqual(page.entries[1]!.users, ['ann', 'bob']);
        assert.deepEqual(
          { from: page.entries[1]!.fromVersion, to: page.entries[1]!.toVersion },
          { from: 0, to: 30 },
        );
        const paged = await c.history(docId, { before: 30, limit: 1 });
        assert.equal(paged.entries.length, 1);
        assert.equal(paged.entries[0]!.toVersion, 30);
      };
      await check(collab);
      await collab.nameVersion(docId, 12, 'draft one', { user: 'ann' });
      await assert.rejects(collab.documentAt(docId, 51), (err: unknown) => {
        return err instanceof CodedError && err.code === 'bad-request';
      });
      await assert.rejects(collab.nameVersion(docId, 3, '  ', { user: 'ann' }), CodedError);
      if (kind.name === 'memory') return void (await collab.close());
      await collab.close();
      store = await reopen();
      collab = collabOn(store, clock.now);
      await check(collab);
      const page = await collab.history(docId);
      assert.deepEqual(
        page.named.map((n) => [n.version, n.name, n.user]),
        [[12, 'draft one', 'ann']],
      );
      await collab.close();
    });
  });
}

describe('history edits through the room', () => {
  it('answers attributed changes, restores an old version and reverts one user', async () => {
    const clock = testClock();
    const collab = collabOn(new MemoryStore(), clock.now);
    const docId = 'hist-edits';
    const docs = await typeInto(collab, docId, 20, clock, ['ann', 'bob']);
    const { changes } = await collab.changes(docId, 0, 20);
    const typed = new Map<string | null, number>();
    for (const change of changes)
      for (const span of change.inserted)
        typed.set(span.user, (typed.get(span.user) ?? 0) + span.length);
    // 20 steps, 10 each; the new paragraph (2 positions) is one of ann's first ten.
    assert.deepEqual([...typed.keys()].sort(), ['ann', 'bob']);
    const restored = await collab.restore(docId, 7, { user: 'ann' });
    assert.ok(restored > 20);
    assert.ok((await collab.document(docId))!.doc.eq(docs[7]!));
    const history = await collab.history(docId);
    assert.equal(history.entries[0]!.toVersion, restored);
    // bob wrote versions 5..10 and 15..20, all gone with the restore to 7 but 5..7.
    const reverted = await collab.revert(
      docId,
      { user: 'bob', fromVersion: 0, toVersion: 10 },
      {
        by: 'ann',
      },
    );
    assert.ok(reverted.reverted > 0);
    assert.ok(!(await collab.document(docId))!.doc.textContent.includes('fg'));
    await assert.rejects(
      collab.revert(docId, { user: 'bob', fromVersion: 5, toVersion: 999 }, { by: 'ann' }),
      (err: unknown) => err instanceof CodedError && err.code === 'bad-request',
    );
    await collab.close();
  });
});

describe('history edits longer than a batch', () => {
  it('splits a revert into batches of MAX_STEPS_PER_BATCH', async () => {
    const clock = testClock();
    const collab = createCollab({
      store: new MemoryStore(),
      clock: clock.now,
      limits: { maxStepsPerBatch: 2 },
    });
    const docId = 'hist-long-revert';
    await typeInto(collab, docId, 4, clock, ['ann']);
    await typeInto(collab, docId, 5, clock, ['bob']);
    const before = (await collab.documentAt(docId, 4)).doc;
    const result = await collab.revert(docId, { user: 'bob' }, { by: 'ann' });
    assert.equal(result.reverted, 5);
    assert.equal(result.skipped, 0);
    assert.ok((await collab.document(docId))!.doc.eq(before));
    await collab.close();
  });
});
