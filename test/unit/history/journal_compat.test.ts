import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import { emptyDoc, schema, schemaVersion } from '../../../schema/index.js';
import type { StepJSON } from '../../../schema/events.js';
import { historyPage } from '../../../server/history/sessions.js';
import { readStretch } from '../../../server/history/timeline.js';
import { parseJournalEntry } from '../../../server/stores/journal_entry.js';
import { MemoryStore } from '../../../server/stores/memory_store.js';

// Journal entries written before history was kept (no users, no time) still read, and the
// history treats their steps as unattributed; entries with users and time keep them.

function typed(count: number): StepJSON[] {
  const steps: StepJSON[] = [];
  let doc = emptyDoc();
  for (let i = 0; i < count; i++) {
    const tr = new Transform(doc).insert(doc.content.size - 1, schema.text('x'));
    steps.push(tr.steps[0]!.toJSON() as StepJSON);
    doc = tr.doc;
  }
  return steps;
}

describe('journal entries and the history', () => {
  it('parses entries without users or time, and refuses malformed ones', () => {
    const steps = typed(2);
    const old = parseJournalEntry({ baseVersion: 0, steps, clientIDs: ['a', 'a'] });
    assert.equal(old.users, undefined);
    assert.equal(old.at, undefined);
    const kept = parseJournalEntry({
      baseVersion: 0,
      steps,
      clientIDs: ['a', 'b'],
      users: ['ann', null],
      at: 5,
    });
    assert.deepEqual(kept.users, ['ann', null]);
    assert.equal(kept.at, 5);
    assert.throws(() =>
      parseJournalEntry({ baseVersion: 0, steps, clientIDs: ['a', 'a'], users: ['ann'] }),
    );
    assert.throws(() =>
      parseJournalEntry({ baseVersion: 0, steps, clientIDs: ['a', 'a'], at: 'now' }),
    );
  });

  it('reads a history mixing old entries and attributed ones', async () => {
    const store = new MemoryStore();
    const steps = typed(6);
    await store.append('doc', {
      epoch: 'e',
      baseVersion: 0,
      steps: steps.slice(0, 3),
      clientIDs: ['a', 'a', 'a'],
    });
    await store.snapshot('doc', {
      doc: emptyDoc().toJSON(),
      version: 0,
      epoch: 'e',
      schemaVersion,
      savedAt: 0,
    });
    await store.append('doc', {
      epoch: 'e',
      baseVersion: 3,
      steps: steps.slice(3),
      clientIDs: ['b', 'b', 'b'],
      users: ['bob', 'bob', 'bob'],
      at: 10 * 60_000,
    });
    const stretch = await readStretch(store, schema, 'doc', 1, 6);
    assert.deepEqual(
      stretch.steps.map((s) => s.user),
      [null, null, 'bob', 'bob', 'bob'],
    );
    const page = await historyPage(store, 'doc', {});
    assert.deepEqual(
      page.entries.map((e) => [e.fromVersion, e.toVersion, e.users]),
      [
        [3, 6, ['bob']],
        [0, 3, []],
      ],
    );
  });
});
