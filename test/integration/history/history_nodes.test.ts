import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { pino } from 'pino';
import type { CollabClient } from '../../../client/index.js';
import { createCollab, RedisStore, type Collab } from '../../../server/index.js';
import { editRandomly, openEditor, Random } from '../../support/editors.js';
import { startServerProcess, type ServerProcess } from '../../support/process.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { delay, waitFor } from '../../support/wait.js';

// History across processes, on Redis: a server killed with SIGKILL mid-session and restarted,
// and a document handed from one server to another, lose no history. The history is read by
// this test's own collab on the same Redis, as any node may read it.

const { redisUrl, keyPrefix } = redisForTests();
const reader = new RedisStore({ url: redisUrl, keyPrefix });
const collab: Collab = createCollab({ store: reader, logger: pino({ level: 'silent' }) });

after(async () => {
  await collab.close();
  await deleteRedisKeys(redisUrl, keyPrefix);
});

const env = {
  REDIS_URL: redisUrl,
  REDIS_KEY_PREFIX: keyPrefix,
  LEASE_MS: '1500',
  STORE_TIMEOUT_MS: '1400',
  SNAPSHOT_EVERY_STEPS: '10',
};

/// Everything the history says of versions up to `head`: each version's document (as JSON)
/// and the page of sessions ending there.
async function historyUpTo(docId: string, head: number): Promise<unknown> {
  const docs: unknown[] = [];
  for (let v = 0; v <= head; v++) docs.push((await collab.documentAt(docId, v)).doc.toJSON());
  const page = await collab.history(docId, { before: head, limit: 1000, gapMs: 60_000 });
  return { docs, page };
}

async function settled(editors: CollabClient[]): Promise<void> {
  await waitFor(
    () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
    'editors to settle',
    30_000,
  );
}

async function storedHead(docId: string): Promise<number> {
  return (await reader.load(docId))!.version;
}

describe('history across server processes', () => {
  it('a SIGKILL mid-session and a restart lose no history', async (t) => {
    await reader.ready();
    const docId = `history-crash-${randomUUID()}`;
    let server: ServerProcess = await startServerProcess(env);
    const editors = [0, 1, 2].map((i) => openEditor(server.url, docId, { clientID: `crash-${i}` }));
    t.after(async () => {
      for (const editor of editors) editor.close();
      await server.stop('SIGKILL');
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    await Promise.all(editors.map((e, i) => editRandomly(e, new Random(i + 1), 30, 4)));
    await settled(editors);
    const head = await storedHead(docId);
    const before = await historyUpTo(docId, head);
    // Mid-session: killed while the editors type.
    const editing = Promise.all(editors.map((e, i) => editRandomly(e, new Random(i + 7), 60, 8)));
    await delay(100);
    assert.equal(await server.stop('SIGKILL'), 'SIGKILL');
    server = await startServerProcess(env, server.port);
    await editing;
    await settled(editors);
    assert.deepEqual(await historyUpTo(docId, head), before);
    // And what came after is there too, every version of it.
    const end = await storedHead(docId);
    assert.ok(end > head);
    for (let v = head; v <= end; v++) await collab.documentAt(docId, v);
  });

  it('a hand-over from one server to another loses no history', async (t) => {
    const docId = `history-handover-${randomUUID()}`;
    const first = await startServerProcess({ ...env, NODE_ID: 'history-a' });
    const second = await startServerProcess({ ...env, NODE_ID: 'history-b' });
    const editors = [openEditor(first.url, docId, { clientID: 'hand-0' })];
    t.after(async () => {
      for (const editor of editors) editor.close();
      await first.stop('SIGKILL');
      await second.stop('SIGKILL');
    });
    await editors[0]!.ready();
    await editRandomly(editors[0]!, new Random(3), 40, 2);
    await settled(editors);
    const head = await storedHead(docId);
    const before = await historyUpTo(docId, head);
    // An editor on the second server asks for the document: the first hands it over.
    editors.push(openEditor(second.url, docId, { clientID: 'hand-1' }));
    await editors[1]!.ready();
    await editRandomly(editors[1]!, new Random(4), 20, 2);
    await settled(editors.slice(1));
    assert.deepEqual(await historyUpTo(docId, head), before);
    const end = await storedHead(docId);
    assert.ok(end > head);
    for (let v = head; v <= end; v++) await collab.documentAt(docId, v);
  });
});
