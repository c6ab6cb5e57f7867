import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import assert from 'node:assert/strict';
import { Node } from 'prosemirror-model';
import { Step, Transform } from 'prosemirror-transform';
import { emptyDoc, schema, schemaVersion } from '../../schema/index.js';
import { type StepJSON } from '../../schema/events.js';
import type { AppendRequest, Snapshot, StoredDocument } from '../../server/stores/store.js';

/// A typed history: `docs[v]` is the document at version `v`, `steps[v]` the step from `v` to
/// `v + 1` (typing one character at the end of the last paragraph, a new paragraph every 20).
export interface History {
  docs: Node[];
  steps: StepJSON[];
}

/// Builds a history of `length` real ProseMirror steps, starting from `emptyDoc()`.
export function typingHistory(length: number): History {
  const docs = [emptyDoc()];
  const steps: StepJSON[] = [];
  for (let v = 0; v < length; v++) {
    const doc = docs[v]!;
    const tr = new Transform(doc);
    if (v > 0 && v % 20 === 0) tr.insert(doc.content.size, schema.node('paragraph'));
    else tr.insert(doc.content.size - 1, schema.text(String.fromCharCode(97 + (v % 26))));
    assert.equal(tr.steps.length, 1);
    steps.push(tr.steps[0]!.toJSON() as StepJSON);
    docs.push(tr.doc);
  }
  return { docs, steps };
}

/// The append request for the steps of `history` from `from` to `to`.
export function appendOf(
  history: History,
  epoch: string,
  from: number,
  to: number,
  clientID = 'client-a',
): AppendRequest {
  const steps = history.steps.slice(from, to);
  return { epoch, baseVersion: from, steps, clientIDs: steps.map(() => clientID) };
}

/// The snapshot of `history` at `version`.
export function snapshotOf(history: History, epoch: string, version: number): Snapshot {
  return {
    doc: history.docs[version]!.toJSON(),
    version,
    epoch,
    schemaVersion,
    savedAt: Date.now(),
  };
}

/// Rebuilds the document a load describes: the snapshot (or the empty document) with every
/// journal step after it applied. Asserts that the journal is contiguous, starts no later than
/// the snapshot, ends at `stored.version`, and that every step applies.
export function reconstruct(stored: StoredDocument): Node {
  let doc = stored.snapshot ? Node.fromJSON(schema, stored.snapshot.doc) : emptyDoc();
  let version = stored.snapshot ? stored.snapshot.version : 0;
  let expectedBase = stored.journal.length > 0 ? stored.journal[0]!.baseVersion : version;
  assert.ok(expectedBase <= version, 'the journal starts after the snapshot: steps are missing');
  for (const entry of stored.journal) {
    assert.equal(entry.baseVersion, expectedBase, 'journal entries are contiguous');
    assert.equal(entry.steps.length, entry.clientIDs.length);
    for (let i = 0; i < entry.steps.length; i++) {
      if (entry.baseVersion + i < version) continue;
      const result = Step.fromJSON(schema, entry.steps[i]).apply(doc);
      assert.equal(result.failed, null);
      doc = result.doc!;
      version++;
    }
    expectedBase = entry.baseVersion + entry.steps.length;
  }
  assert.equal(version, stored.version, 'the journal ends at the stored version');
  return doc;
}

/// The Redis the tests use (`REDIS_URL`, default 127.0.0.1:6379), and a fresh key prefix for
/// one test file, so that files never see each other's keys.
export function redisForTests(): { redisUrl: string; redisPort: number; keyPrefix: string } {
  const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
  return {
    redisUrl,
    redisPort: Number(new URL(redisUrl).port || 6379),
    keyPrefix: `scriptorium-test-${randomUUID()}:`,
  };
}

/// Deletes every key under `keyPrefix`.
export async function deleteRedisKeys(redisUrl: string, keyPrefix: string): Promise<void> {
  const client = createClient({ url: redisUrl });
  await client.connect();
  for await (const keys of client.scanIterator({ MATCH: `${keyPrefix}*`, COUNT: 1000 }))
    if (keys.length > 0) await client.del(keys);
  await client.close();
}
