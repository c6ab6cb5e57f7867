import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import { ReplaceStep, type Step } from 'prosemirror-transform';
import { schema } from '../../../schema/index.js';
import { revertUser } from '../../../server/history/revert.js';
import type { HistoryStep } from '../../../server/history/types.js';
import {
  assertProperty,
  characters,
  randomHistory,
  typist,
  users,
  type History,
} from '../../support/history_gen.js';

// Reverting one user's edits: what they typed goes, what they deleted comes back where its
// surroundings still exist, and everyone else's text stays.

function doc(...paragraphs: string[]): Node {
  return schema.node(
    'doc',
    null,
    paragraphs.map((text) => schema.node('paragraph', null, text ? schema.text(text) : [])),
  );
}

function by(user: string, step: Step): HistoryStep {
  return { step, user, clientID: `c-${user}`, at: 1 };
}

function insert(pos: number, text: string): Step {
  return new ReplaceStep(pos, pos, doc(text).slice(1, 1 + text.length));
}

function remove(from: number, to: number): Step {
  return new ReplaceStep(from, to, doc('').slice(0, 0));
}

function applyAll(doc: Node, steps: readonly Step[]): Node {
  for (const step of steps) {
    const result = step.apply(doc);
    assert.ok(result.doc, `a revert step does not apply: ${result.failed}`);
    doc = result.doc;
  }
  return doc;
}

function text(doc: Node): string {
  return doc.textBetween(0, doc.content.size, '|');
}

/// The user-typed characters of `history` that no step moved after they were typed: at every
/// later step their position is where the step's map sends it (a step that deleted and
/// re-inserted them, as a join of blocks of different kinds can, moved them).
function unmoved(history: History): Set<string> {
  const moved = new Set<string>();
  let doc = history.base;
  let before = characters(doc);
  for (const entry of history.steps) {
    doc = entry.step.apply(doc).doc!;
    const after = characters(doc);
    const map = entry.step.getMap();
    for (const [char, pos] of before) {
      const now = after.get(char);
      if (now !== undefined && map.map(pos, 1) !== now) moved.add(char);
    }
    before = after;
  }
  return new Set([...characters(doc).keys()].filter((c) => typist(c) !== 'base' && !moved.has(c)));
}

describe('revertUser', () => {
  it("removes one user's typing and keeps what another typed inside it", () => {
    const base = doc('ab');
    const steps = [
      by('ann', insert(2, 'xxxx')), // axxxxb
      by('bob', insert(4, 'YY')), // axxYYxxb
      by('ann', remove(1, 2)), // xxYYxxb
    ];
    const head = steps.reduce((d, s) => s.step.apply(d).doc!, base);
    const result = revertUser(base, steps, { user: 'ann', from: 0, to: steps.length });
    assert.equal(text(applyAll(head, result.steps)), 'aYYb');
    assert.deepEqual([result.reverted, result.skipped], [2, 0]);
    // Reverting bob instead keeps all of ann's edits.
    const bob = revertUser(base, steps, { user: 'bob', from: 0, to: steps.length });
    assert.equal(text(applyAll(head, bob.steps)), 'xxxxb');
  });

  it('restores what the user deleted, and skips it when others deleted its surroundings', () => {
    const base = doc('one two', 'three');
    const steps = [
      by('ann', remove(4, 8)), // "one" | three
      by('bob', insert(4, '!')), // "one!" | three
      by('ann', remove(7, 12)), // "one!" | ""
      by('bob', remove(0, 6)), // "" (bob deletes the first paragraph)
    ];
    const head = steps.reduce((d, s) => s.step.apply(d).doc!, base);
    const result = revertUser(base, steps, { user: 'ann', from: 0, to: steps.length });
    // " two" was inside the paragraph bob then deleted: its place is gone; "three" returns.
    assert.equal(text(applyAll(head, result.steps)), 'three');
    assert.deepEqual([result.reverted, result.skipped], [1, 1]);
  });

  it('reverts only the steps inside the range', () => {
    const base = doc('');
    const steps = [by('ann', insert(1, 'a')), by('ann', insert(2, 'b')), by('ann', insert(3, 'c'))];
    const head = steps.reduce((d, s) => s.step.apply(d).doc!, base);
    const result = revertUser(base, steps, { user: 'ann', from: 1, to: 2 });
    assert.equal(text(applyAll(head, result.steps)), 'ac');
    assert.deepEqual([result.reverted, result.skipped], [1, 0]);
  });

  it('gives back the base when reverting every step of a single-author history', () => {
    assertProperty(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 20 }),
        (seed, rounds) => {
          const history = randomHistory(seed, rounds, { only: 'ann' });
          const result = revertUser(history.base, history.steps, {
            user: 'ann',
            from: 0,
            to: history.steps.length,
          });
          assert.ok(applyAll(history.head, result.steps).eq(history.base), 'back to base');
          assert.equal(result.skipped, 0);
          assert.equal(result.reverted, history.steps.length);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("removes the user's typing, restores their deletions, keeps the others' text (random histories)", () => {
    assertProperty(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 25 }),
        fc.constantFrom(...users),
        (seed, rounds, user) => {
          const history = randomHistory(seed, rounds, { concurrency: 0.4 });
          const mine = history.steps.filter((entry) => entry.user === user).length;
          const result = revertUser(history.base, history.steps, {
            user,
            from: 0,
            to: history.steps.length,
          });
          assert.equal(result.reverted + result.skipped, mine, 'every step of theirs counted once');
          const after = applyAll(history.head, result.steps);
          after.check();
          const now = characters(after);
          const intact = unmoved(history);
          for (const char of characters(history.head).keys()) {
            const who = typist(char);
            if (who !== user && who !== 'base') assert.ok(now.has(char), `${who}'s ${char} kept`);
            if (who === user && intact.has(char))
              assert.ok(!now.has(char), `${user}'s ${char} removed`);
          }
          if (result.skipped === 0) {
            for (const char of characters(history.base).keys()) {
              if (!characters(history.head).has(char) && deletedBy(history, char) === user) {
                assert.ok(now.has(char), `${char}, deleted by ${user}, restored`);
              }
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('reverts a range the same given the newest document as replaying (random ranges)', () => {
    assertProperty(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 25 }),
        fc.constantFrom(...users),
        fc.tuple(fc.nat(), fc.nat()),
        (seed, rounds, user, ends) => {
          const history = randomHistory(seed, rounds, { concurrency: 0.4 });
          const n = history.steps.length + 1;
          const from = Math.min(ends[0] % n, ends[1] % n);
          const to = Math.max(ends[0] % n, ends[1] % n);
          const select = { user, from, to };
          const replayed = revertUser(history.base, history.steps, select);
          const given = revertUser(history.base, history.steps, select, history.head);
          assert.deepEqual(
            given.steps.map((step) => step.toJSON()),
            replayed.steps.map((step) => step.toJSON()),
          );
          assert.deepEqual([given.reverted, given.skipped], [replayed.reverted, replayed.skipped]);
          const mine = history.steps.slice(from, to).filter((entry) => entry.user === user).length;
          assert.equal(given.reverted + given.skipped, mine);
          applyAll(history.head, given.steps).check();
        },
      ),
      { numRuns: 150 },
    );
  });
});

/// The author of the first step after which `char` is gone.
function deletedBy(history: History, char: string): string | null {
  let doc = history.base;
  for (const entry of history.steps) {
    doc = entry.step.apply(doc).doc!;
    if (!characters(doc).has(char)) return entry.user;
  }
  return null;
}
