import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Step } from 'prosemirror-transform';
import type { CollabClient, CollabClientOptions } from '../../../client/index.js';
import { emptyDoc, schema } from '../../../schema/index.js';
import { type StepJSON } from '../../../schema/events.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import type { Store } from '../../../server/stores/store.js';
import { Random, editRandomly, openEditor, waitConverged } from '../../support/editors.js';
import { startServerProcess } from '../../support/process.js';
import { RedisProcess } from '../../support/redis_process.js';
import { deleteRedisKeys, reconstruct, redisForTests } from '../../support/store_fixtures.js';
import { TcpProxy } from '../../support/tcp_proxy.js';
import { delay, waitFor } from '../../support/wait.js';

// Keys of this run's own (node ids too): another run on the same Redis must not keep this run's
// nodes alive or read its documents.
const { redisUrl, keyPrefix } = redisForTests();

// Settings that keep the whole history in the journal, so a test can read every step back.
const keepJournal = { SNAPSHOT_EVERY_STEPS: '1000000', SNAPSHOT_EVERY_MS: '86400000' };

/// `GET /docs/:id` of `url`, retried while the answer is `moved`: after a kill -9 the dead
/// process's lease holds the document until it expires (`LEASE_MS`).
async function servedAfterCrash(url: string, docId: string): Promise<{ version: number }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const response = await fetch(`${url}/docs/${docId}`);
    const body = (await response.json()) as { version: number; code?: string };
    if (body.code !== 'moved' || Date.now() > deadline) return body;
    await delay(100);
  }
}

/// Every batch an editor saw acknowledged, with the version it ended at.
interface Acked {
  clientID: string;
  version: number;
  steps: readonly StepJSON[];
}

function trackedEditors(
  url: () => string,
  docId: string,
  count: number,
  acked: Acked[],
  tag: string,
  extra: Partial<CollabClientOptions> = {},
) {
  return Array.from({ length: count }, (_, i) => {
    const clientID = `${tag}-${i}`;
    return openEditor(url(), docId, {
      ...extra,
      clientID,
      // Through JSON, as the server saw them (ProseMirror's attrs have no prototype).
      onAcknowledged: (version, steps) =>
        acked.push({ clientID, version, steps: JSON.parse(JSON.stringify(steps)) as StepJSON[] }),
    });
  });
}

/// Reads the document's whole stored history and checks that every acknowledged batch is in it,
/// at the version it was acknowledged at, under its editor's id. Returns the stored version.
async function assertAckedStored(
  store: Store,
  docId: string,
  acked: readonly Acked[],
): Promise<number> {
  const stored = await store.load(docId);
  assert.ok(stored, 'the document is stored');
  assert.equal(stored.snapshot, null, 'the test keeps the whole history in the journal');
  const steps: StepJSON[] = [];
  const clientIDs: string[] = [];
  for (const entry of stored.journal) {
    assert.equal(entry.baseVersion, steps.length, 'the journal has no gap');
    steps.push(...entry.steps);
    clientIDs.push(...entry.clientIDs);
  }
  assert.equal(steps.length, stored.version);
  for (const batch of acked) {
    assert.ok(
      batch.version <= stored.version,
      `acknowledged version ${batch.version} > stored ${stored.version}`,
    );
    const start = batch.version - batch.steps.length;
    assert.deepEqual(
      steps.slice(start, batch.version),
      batch.steps,
      `batch ending at ${batch.version} is stored`,
    );
    assert.deepEqual(
      clientIDs.slice(start, batch.version),
      batch.steps.map(() => batch.clientID),
      `batch ending at ${batch.version} carries ${batch.clientID}`,
    );
  }
  // The journal replays into a valid document.
  let doc = emptyDoc();
  for (const json of steps) doc = Step.fromJSON(schema, json).apply(doc).doc!;
  doc.check();
  return stored.version;
}

async function closeAll(editors: readonly CollabClient[]): Promise<void> {
  for (const editor of editors) editor.close();
}

describe('durability (real Redis, server child processes)', () => {
  let store: RedisStore;
  before(() => {
    store = new RedisStore({ url: redisUrl, keyPrefix, commandTimeoutMs: 2000 });
  });
  after(async () => {
    await store.close();
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  it('restart: stop gracefully, start again, same document and version; clients catch up without reloading', async (t) => {
    const docId = `restart-${randomUUID()}`;
    let server = await startServerProcess({ REDIS_URL: redisUrl, REDIS_KEY_PREFIX: keyPrefix });
    const acked: Acked[] = [];
    let reloads = 0;
    const editors = trackedEditors(() => server.url, docId, 3, acked, 'restart', {
      onReload: () => reloads++,
    });
    t.after(async () => {
      await closeAll(editors);
      await server.stop('SIGTERM');
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    await Promise.all(editors.map((editor, i) => editRandomly(editor, new Random(70 + i), 20, 5)));
    await Promise.all(editors.map((editor) => editor.settled()));
    const before = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
      version: number;
      doc: unknown;
    };
    assert.equal(await server.stop('SIGTERM'), 0, `graceful stop exits 0:\n${server.output()}`);
    server = await startServerProcess(
      { REDIS_URL: redisUrl, REDIS_KEY_PREFIX: keyPrefix },
      server.port,
    );
    const afterRestart = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
      version: number;
      doc: unknown;
    };
    assert.equal(afterRestart.version, before.version);
    assert.deepEqual(afterRestart.doc, before.doc);
    await waitFor(
      () => editors.every((editor) => editor.reconnects >= 1 && editor.status === 'synced'),
      'reconnects',
    );
    await Promise.all(editors.map((editor, i) => editRandomly(editor, new Random(80 + i), 10, 5)));
    const room = async () =>
      ((await (await fetch(`${server.url}/docs/${docId}`)).json()) as { version: number }).version;
    let version = await room();
    await waitFor(() => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed), 'settle');
    version = await room();
    await waitConverged(editors, () => version);
    assert.equal(reloads, 0, 'no editor had to reload the document');
  });

  it('crash: SIGKILL mid-stream, three times; every acknowledged step survives and editors converge', async (t) => {
    const docId = `crash-${randomUUID()}`;
    // A short lease: the restarted process waits for the dead one's to expire.
    const env = {
      REDIS_URL: redisUrl,
      REDIS_KEY_PREFIX: keyPrefix,
      LEASE_MS: '1500',
      // Under the lease time, as the server requires.
      STORE_TIMEOUT_MS: '1400',
      ...keepJournal,
    };
    let server = await startServerProcess(env);
    const acked: Acked[] = [];
    const editors = trackedEditors(() => server.url, docId, 4, acked, 'crash');
    t.after(async () => {
      await closeAll(editors);
      await server.stop('SIGKILL');
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    for (let round = 0; round < 3; round++) {
      const editing = Promise.all(
        editors.map((editor, i) => editRandomly(editor, new Random(round * 10 + i), 60, 4)),
      );
      // Killed mid-stream: once some of this round's batches are acknowledged (a fixed delay
      // left a loaded machine too few to prove anything), while the rest are still coming.
      const ackedBefore = acked.length;
      await waitFor(() => acked.length >= ackedBefore + 8, 'batches acknowledged before the kill');
      assert.equal(await server.stop('SIGKILL'), 'SIGKILL');
      const ackedAtCrash = Math.max(0, ...acked.map((batch) => batch.version));
      server = await startServerProcess(env, server.port);
      const served = await servedAfterCrash(server.url, docId);
      assert.ok(
        served.version >= ackedAtCrash,
        `version ${served.version} went below acknowledged ${ackedAtCrash}`,
      );
      await editing;
    }
    await waitFor(
      () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
      'editors to settle',
      30_000,
    );
    const version = await assertAckedStored(store, docId, acked);
    await waitConverged(editors, () => version);
    assert.ok(acked.length > 20, `only ${acked.length} batches were acknowledged`);
  });

  it('file store crash: SIGKILL mid-stream, twice, restarting on the same directory; the stale lock is taken over and every acknowledged step survives', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'scriptorium-durability-file-'));
    // REDIS_URL emptied: the file store, whatever the test run has set.
    const env = { REDIS_URL: '', DATA_DIR: dir, ...keepJournal };
    const docId = `file-crash-${randomUUID()}`;
    let server = await startServerProcess(env);
    const acked: Acked[] = [];
    const editors = trackedEditors(() => server.url, docId, 3, acked, 'file-crash');
    try {
      await Promise.all(editors.map((editor) => editor.ready()));
      for (let round = 0; round < 2; round++) {
        const editing = Promise.all(
          editors.map((editor, i) => editRandomly(editor, new Random(round * 10 + i), 60, 4)),
        );
        await delay(150);
        const killed = server.child.pid;
        assert.equal(await server.stop('SIGKILL'), 'SIGKILL');
        server = await startServerProcess(env, server.port);
        assert.match(server.output(), new RegExp(`lock of process ${killed}\\b`));
        await editing;
      }
      await waitFor(
        () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
        'editors to settle',
        30_000,
      );
    } finally {
      await closeAll(editors);
      await server.stop('SIGKILL');
    }
    const local = new FileStore({ dataDir: dir });
    t.after(async () => {
      await local.close();
      await rm(dir, { recursive: true, force: true });
    });
    const version = await assertAckedStored(local, docId, acked);
    assert.ok(editors.every((editor) => editor.version === version));
    assert.ok(acked.length > 10, `only ${acked.length} batches were acknowledged`);
  });

  it('Redis outage: steps are refused with unavailable, nothing acknowledged is lost, editing resumes', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'scriptorium-redis-'));
    const redis = new RedisProcess(undefined, { dir });
    await redis.start();
    const server = await startServerProcess({
      REDIS_URL: redis.url,
      STORE_TIMEOUT_MS: '300',
      ...keepJournal,
    });
    const docId = `outage-${randomUUID()}`;
    const acked: Acked[] = [];
    const editors = trackedEditors(() => server.url, docId, 3, acked, 'outage');
    const local = new RedisStore({ url: redis.url, commandTimeoutMs: 2000 });
    t.after(async () => {
      await closeAll(editors);
      await server.stop('SIGTERM');
      await local.close();
      await redis.kill();
      await rm(dir, { recursive: true, force: true });
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    await Promise.all(editors.map((editor, i) => editRandomly(editor, new Random(40 + i), 10, 5)));
    // A Redis that stops answering (paused), then one that is gone (killed and restarted).
    for (const outage of ['pause', 'kill'] as const) {
      if (outage === 'pause') redis.pause();
      else await redis.kill();
      await Promise.all(
        editors.map((editor, i) => editRandomly(editor, new Random(50 + i), 15, 20)),
      );
      await waitFor(
        () => editors.some((editor) => (editor.refusals['unavailable'] ?? 0) > 0),
        'an unavailable refusal',
      );
      const health = await fetch(`${server.url}/docs/${docId}`);
      assert.equal(health.status, 200, 'reads of a loaded document go on during the outage');
      if (outage === 'pause') redis.resume();
      else await redis.start();
      await waitFor(
        () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
        `editing to resume after the ${outage}`,
        30_000,
      );
    }
    assert.equal(server.child.exitCode, null, 'the server did not crash');
    await local.ready(5000);
    const version = await assertAckedStored(local, docId, acked);
    await waitConverged(editors, () => version);
  });

  it('deploy overlap: a new process of the same node takes the documents over while the old one drains; nobody diverges, nothing acknowledged is lost', async (t) => {
    const docIds = [`deploy-${randomUUID()}`, `deploy-${randomUUID()}`];
    const env = {
      REDIS_URL: redisUrl,
      REDIS_KEY_PREFIX: keyPrefix,
      LEASE_MS: '1000',
      STORE_TIMEOUT_MS: '900',
      NODE_ID: 'node-1',
      ...keepJournal,
    };
    const old = await startServerProcess(env);
    const route = new TcpProxy(old.port);
    await route.start();
    const acked: Acked[] = [];
    const editors = docIds.flatMap((docId, d) =>
      trackedEditors(() => `http://127.0.0.1:${route.port}`, docId, 3, acked, `deploy-${d}`),
    );
    let fresh: Awaited<ReturnType<typeof startServerProcess>> | null = null;
    t.after(async () => {
      await closeAll(editors);
      await fresh?.stop('SIGTERM');
      await route.stop();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    const editing = Promise.all(
      editors.map((editor, i) => editRandomly(editor, new Random(300 + i), 80, 40)),
    );
    await delay(500);
    // The new process starts, the route sends new connections to it, and the old one keeps
    // serving its editors for a while before it is told to stop (as a platform's deploy
    // does: start the new instance, shift traffic, SIGTERM the old one).
    fresh = await startServerProcess(env);
    route.retarget(fresh.port);
    await delay(1500);
    await old.stop('SIGTERM');
    await editing;
    await waitFor(
      () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
      'editors to settle',
      30_000,
    );
    for (const [d, docId] of docIds.entries()) {
      const stored = (await store.load(docId))!;
      const mineEditors = editors.filter((e) => e.docId === docId);
      await waitConverged(mineEditors, () => stored.version);
      const doc = reconstruct(stored);
      for (const editor of mineEditors) {
        assert.ok(editor.state!.doc.eq(doc), `${editor.clientID} equals the stored document`);
      }
      const mine = acked.filter((batch) => batch.clientID.startsWith(`deploy-${d}`));
      assert.ok(mine.length > 0);
      for (const batch of mine) assert.ok(batch.version <= stored.version);
    }
    assert.doesNotMatch(old.output() + fresh.output(), /journal conflict/);
  });

  it('two processes on one Redis: one serves the document at a time; when the routes converge every editor ends on one, equal to the store, nothing acknowledged lost', async (t) => {
    const docId = `two-${randomUUID()}`;
    const env = {
      REDIS_URL: redisUrl,
      REDIS_KEY_PREFIX: keyPrefix,
      LEASE_MS: '1000',
      STORE_TIMEOUT_MS: '900',
      ...keepJournal,
    };
    const a = await startServerProcess({ ...env, NODE_ID: 'node-a' });
    const b = await startServerProcess({ ...env, NODE_ID: 'node-b' });
    // Two routes, as two balancers that disagree would give: half the editors reach a, half b.
    const toA = new TcpProxy(a.port);
    const toB = new TcpProxy(b.port);
    await Promise.all([toA.start(), toB.start()]);
    const acked: Acked[] = [];
    const editors = [
      ...trackedEditors(() => `http://127.0.0.1:${toA.port}`, docId, 2, acked, 'via-a'),
      ...trackedEditors(() => `http://127.0.0.1:${toB.port}`, docId, 2, acked, 'via-b'),
    ];
    t.after(async () => {
      await closeAll(editors);
      await a.stop('SIGTERM');
      await b.stop('SIGTERM');
      await Promise.all([toA.stop(), toB.stop()]);
    });
    // Both routes in use: whichever process does not hold the lease answers `moved` and asks
    // the holder for the document, which hands it over after holding it a lease time. So
    // every editor gets it in turn, and edits while the document goes back and forth: an
    // editor on the process that does not hold it keeps its edits until it reaches the one
    // that does.
    await Promise.all(editors.map((editor) => editor.ready()));
    await Promise.all(editors.map((editor, i) => editRandomly(editor, new Random(90 + i), 40, 50)));
    // The routes converge on a (as the gateway's consistent hash does): b hands the document
    // over if it holds it, its editors reconnect, and every one of them ends on a.
    toB.retarget(a.port);
    await waitFor(
      () => editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
      'editors to settle',
      30_000,
    );
    // Settled, then caught up with the last broadcasts: every editor at the stored version.
    const stored = (await store.load(docId))!;
    await waitConverged(editors, () => stored.version);
    const doc = reconstruct(stored);
    for (const editor of editors) {
      assert.ok(editor.state!.doc.eq(doc), `${editor.clientID} equals the stored document`);
    }
    for (const batch of acked) assert.ok(batch.version <= stored.version);
    assert.ok(acked.some((batch) => batch.clientID.startsWith('via-a')));
    assert.ok(acked.some((batch) => batch.clientID.startsWith('via-b')));
    // The leases kept the writers apart: the journal's compare-and-set never had to.
    assert.doesNotMatch(a.output() + b.output(), /journal conflict/);
  });
});
