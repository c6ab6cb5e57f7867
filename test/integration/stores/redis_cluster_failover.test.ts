import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Node } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import type { CollabClient } from '../../../client/index.js';
import { emptyDoc, schema } from '../../../schema/index.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import type { StoredDocument } from '../../../server/stores/store.js';
import { Random, editRandomly, openEditor, waitConverged } from '../../support/editors.js';
import { RedisCluster } from '../../support/redis_cluster.js';
import { startServer, type TestServer } from '../../support/server.js';

// A server on a Redis Cluster of 3 masters and 3 replicas (cluster-node-timeout 1000 ms), with
// editors on several documents: the master of the busiest document's slot is killed (SIGKILL)
// mid-typing, its replica takes over, and the same server goes on serving; then that slot is
// migrated to another master while the editors type.

const documents = 3;
const editorsPerDocument = 2;

/// The document at `version` as the stored journal builds it (no snapshot: the tests keep
/// every step in the journal), or null when the journal ends before `version`.
function docAt(stored: StoredDocument, version: number): Node | null {
  assert.equal(stored.snapshot, null);
  let doc = emptyDoc();
  let at = 0;
  for (const entry of stored.journal) {
    for (const step of entry.steps) {
      if (at === version) return doc;
      const result = Step.fromJSON(schema, step).apply(doc);
      assert.equal(result.failed, null);
      doc = result.doc!;
      at++;
    }
  }
  return at === version ? doc : null;
}

interface Session {
  cluster: RedisCluster;
  store: RedisStore;
  server: TestServer;
  keyPrefix: string;
  docIds: string[];
  editors: CollabClient[][];
  /// Every error an editor was shown (`onStatus`), by code.
  errors: string[];
}

async function open(minReplicasAcked: number): Promise<Session> {
  const cluster = new RedisCluster({ nodeTimeoutMs: 1000 });
  await cluster.start();
  const keyPrefix = `scriptorium-test-${randomUUID()}:`;
  const store = new RedisStore({
    cluster: { rootNodes: cluster.rootNodes },
    keyPrefix,
    minReplicasAcked,
    commandTimeoutMs: 1000,
  });
  await store.ready(5000);
  // Every step stays in the journal, so that any acknowledged version can be rebuilt.
  const server = await startServer(
    { storeTimeoutMs: 1000, snapshotEverySteps: 1_000_000, snapshotEveryMs: 86_400_000 },
    store,
  );
  const errors: string[] = [];
  const docIds = Array.from({ length: documents }, () => `doc-${randomUUID()}`);
  // The busy document's master gets a second replica: after the failover its new master still
  // has one, without which no write there could be acknowledged with WAIT 1.
  await cluster.addReplica(await cluster.masterOf(docKeys(keyPrefix, docIds[0]!).meta));
  const editors = docIds.map((docId, d) =>
    Array.from({ length: editorsPerDocument }, (_, i) =>
      openEditor(server.url, docId, {
        clientID: `d${d}-e${i}`,
        onStatus: (_status, error) => {
          if (error) errors.push(error.code);
        },
      }),
    ),
  );
  await Promise.all(
    editors.flat().map((editor) => waitConverged([editor], () => editor.version, 10_000)),
  );
  return { cluster, store, server, keyPrefix, docIds, editors, errors };
}

async function close(session: Session): Promise<void> {
  for (const editor of session.editors.flat()) editor.close();
  await session.server.close();
  await session.store.close();
  await session.cluster.stop();
}

/// Types on every document for `ms`, a few edits a second per editor.
async function typeFor(session: Session, seed: number, edits: number): Promise<void> {
  await Promise.all(
    session.editors
      .flat()
      .map((editor, i) => editRandomly(editor, new Random(seed * 97 + i), edits, 40)),
  );
}

/// Every editor of document `d` converged on the server's version.
async function converged(session: Session, d: number): Promise<void> {
  const room = (): number =>
    session.server.server.rooms.peek(session.docIds[d]!)?.publishedVersion ?? -1;
  await waitConverged(session.editors[d]!, room, 30_000);
}

interface Acknowledged {
  /// The newest version an editor was told is durable (its own batch acknowledged, or other
  /// editors' steps received: both are sent only once stored).
  version: number;
  /// The newest document an editor with nothing unconfirmed holds, and its version.
  doc: Node;
  docVersion: number;
}

/// What the editors of document `d` hold as acknowledged now.
function acknowledged(session: Session, d: number): Acknowledged {
  const ack: Acknowledged = { version: 0, doc: emptyDoc(), docVersion: 0 };
  for (const editor of session.editors[d]!) {
    ack.version = Math.max(ack.version, editor.acknowledgedVersion);
    if (editor.state && !editor.hasUnconfirmed && editor.version > ack.docVersion) {
      ack.doc = editor.state.doc;
      ack.docVersion = editor.version;
    }
  }
  ack.version = Math.max(ack.version, ack.docVersion);
  return ack;
}

/// Acknowledged steps of document `d` that the store no longer has: the versions past what it
/// holds, or every step up to an acknowledged document that differs from the stored one.
async function lostSteps(session: Session, d: number, ack: Acknowledged): Promise<number> {
  const stored = await session.store.load(session.docIds[d]!);
  assert.ok(stored);
  if (stored.version < ack.version) return ack.version - stored.version;
  return docAt(stored, ack.docVersion)!.eq(ack.doc) ? 0 : ack.docVersion;
}

describe('RedisStore on a Redis Cluster: failover', () => {
  for (const minReplicasAcked of [1, 0]) {
    it(`a killed master's replica takes over, REDIS_MIN_REPLICAS_ACKED=${minReplicasAcked}`, async (t) => {
      const session = await open(minReplicasAcked);
      t.after(() => close(session));
      const busy = 0;
      const typing = typeFor(session, minReplicasAcked + 1, 60);
      // Mid-typing: the master of the busy document's slot dies without a word.
      await new Promise((resolve) => setTimeout(resolve, 800));
      const master = await session.cluster.masterOf(
        docKeys(session.keyPrefix, session.docIds[busy]!).meta,
      );
      const before = session.docIds.map((_, d) => acknowledged(session, d));
      await session.cluster.kill(master);
      const killedAt = performance.now();
      await typing;
      for (let d = 0; d < documents; d++) await converged(session, d);
      const servedAgainMs = performance.now() - killedAt;
      // The same server serves every document again: an edit on the busy document after the
      // failover is acknowledged and reaches its other editor.
      await typeFor(session, 7 + minReplicasAcked, 5);
      for (let d = 0; d < documents; d++) await converged(session, d);
      let lost = 0;
      for (let d = 0; d < documents; d++) {
        const stored = await session.store.load(session.docIds[d]!);
        assert.ok(stored);
        // Editors hold exactly what the store holds.
        const doc = docAt(stored, stored.version);
        for (const editor of session.editors[d]!) assert.ok(editor.state?.doc.eq(doc!));
        lost += await lostSteps(session, d, before[d]!);
      }
      t.diagnostic(
        `min replicas ${minReplicasAcked}: editors converged ${Math.round(servedAgainMs)} ms after the kill; acknowledged steps lost: ${lost}`,
      );
      if (minReplicasAcked > 0) assert.equal(lost, 0, 'an acknowledged step was lost');
    });
  }
});

describe('RedisStore on a Redis Cluster: resharding', () => {
  let session: Session;
  before(async () => {
    session = await open(0);
  });
  after(() => close(session));

  it("moves a busy document's slot to another master under load, no error reaching an editor", async () => {
    const { cluster, keyPrefix, docIds } = session;
    const key = docKeys(keyPrefix, docIds[0]!).meta;
    const typing = typeFor(session, 11, 60);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const source = await cluster.masterOf(key);
    const target = (await cluster.masters()).find((port) => port !== source)!;
    await cluster.migrateSlotOf(key, source, target);
    assert.equal(await cluster.masterOf(key), target);
    await typing;
    for (let d = 0; d < documents; d++) await converged(session, d);
    assert.deepEqual(session.errors, []);
    const stored = await session.store.load(docIds[0]!);
    assert.ok(stored);
    const doc = docAt(stored, stored.version);
    for (const editor of session.editors[0]!) assert.ok(editor.state?.doc.eq(doc!));
  });
});
