import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import { AddMarkStep, RemoveMarkStep, ReplaceStep } from 'prosemirror-transform';
import { EditorState } from 'prosemirror-state';
import { schema } from '../../../schema/index.js';
import { attributedChanges } from '../../../server/history/changes.js';
import type { AttributedChange, HistoryStep, Span } from '../../../server/history/types.js';
import {
  assertProperty,
  characters,
  randomHistory,
  typist,
  type History,
} from '../../support/history_gen.js';

// What `changes(a, b)` shows a reader: every character typed between a and b inside an
// inserted span naming its typist, every character deleted inside a deleted span naming who
// deleted it, and formatting as a change over the text it touched.

function doc(...paragraphs: string[]): Node {
  return schema.node(
    'doc',
    null,
    paragraphs.map((text) => schema.node('paragraph', null, text ? schema.text(text) : [])),
  );
}

function by(user: string, step: HistoryStep['step'], at = 1): HistoryStep {
  return { step, user, clientID: `c-${user}`, at };
}

/// The text of `doc` between `from` and `to`, one entry per position: the character, or null
/// for a node boundary.
function charsAt(doc: Node, from: number, to: number): (string | null)[] {
  const out: (string | null)[] = [];
  for (let pos = from; pos < to; pos++) out.push(doc.textBetween(pos, pos + 1) || null);
  return out;
}

/// Each span with its start position in its document.
function placed(spans: readonly Span[], from: number): { span: Span; from: number; to: number }[] {
  let pos = from;
  return spans.map((span) => {
    const at = { span, from: pos, to: pos + span.length };
    pos += span.length;
    return at;
  });
}

/// True when `change` only reformatted its text: the same length on both sides, one span each
/// naming one step, and the same characters.
function isFormatting(change: AttributedChange, a: Node, b: Node): boolean {
  return (
    change.toA - change.fromA === change.toB - change.fromB &&
    change.inserted.length === 1 &&
    change.deleted.length === 1 &&
    change.inserted[0]!.at === change.deleted[0]!.at &&
    a.textBetween(change.fromA, change.toA, '¶') === b.textBetween(change.fromB, change.toB, '¶')
  );
}

/// Who deleted each base character that the history deleted: the author of the first step
/// after which it is gone (no one can type a base character again).
function deleters(history: History): Map<string, string> {
  const gone = new Map<string, string>();
  let present = characters(history.base);
  let doc = history.base;
  for (const entry of history.steps) {
    doc = entry.step.apply(doc).doc!;
    const now = characters(doc);
    for (const char of present.keys()) {
      if (typist(char) === 'base' && !now.has(char) && !gone.has(char)) gone.set(char, entry.user!);
    }
    present = now;
  }
  return gone;
}

/// What a reader sees at each position of `doc`: a character with its marks, a node's start
/// with its type, attributes and marks, or a node's end.
function tokens(doc: Node): string[] {
  const out: string[] = [];
  const marks = (node: Node): string => node.marks.map((mark) => JSON.stringify(mark)).join();
  const walk = (node: Node): void => {
    node.forEach((child) => {
      if (child.isText) {
        for (const char of child.text!) out.push(char + marks(child));
      } else {
        out.push(`${child.type.name}${JSON.stringify(child.attrs)}${marks(child)}`);
        if (!child.isLeaf) {
          walk(child);
          out.push('/');
        }
      }
    });
  };
  walk(doc);
  return out;
}

/// Asserts that the changes, in order and not overlapping, account for every difference:
/// outside them A and B hold the same tokens, and their spans cover them exactly.
function assertExplains(changes: AttributedChange[], history: History): void {
  const a = history.base;
  const b = history.head;
  const ta = tokens(a);
  const tb = tokens(b);
  let fromA = 0;
  let fromB = 0;
  for (const change of changes) {
    assert.ok(change.fromA >= fromA && change.fromB >= fromB, 'in order, not overlapping');
    assert.ok(change.toA >= change.fromA && change.toB >= change.fromB);
    assert.equal(change.fromA - fromA, change.fromB - fromB, 'unchanged stretches keep length');
    assert.deepEqual(ta.slice(fromA, change.fromA), tb.slice(fromB, change.fromB), 'same between');
    const sum = (spans: Span[]): number => spans.reduce((n, span) => n + span.length, 0);
    assert.equal(sum(change.inserted), change.toB - change.fromB, 'inserted spans cover B');
    assert.equal(sum(change.deleted), change.toA - change.fromA, 'deleted spans cover A');
    fromA = change.toA;
    fromB = change.toB;
  }
  assert.equal(a.content.size - fromA, b.content.size - fromB);
  assert.deepEqual(ta.slice(fromA), tb.slice(fromB), 'same after the last change');
}

function assertAttributed(changes: AttributedChange[], history: History): void {
  const a = history.base;
  const b = history.head;
  const deletedBy = deleters(history);
  const inHead = characters(b);
  for (const change of changes) {
    const formatting = isFormatting(change, a, b);
    for (const { span, from, to } of placed(change.inserted, change.fromB)) {
      for (const char of charsAt(b, from, to)) {
        if (char === null) continue;
        const who = typist(char);
        if (who === 'base') assert.ok(formatting, `base character ${char} shown as inserted`);
        else assert.equal(span.user, who, `${char} typed by ${who}, shown as ${span.user}'s`);
      }
    }
    for (const { span, from, to } of placed(change.deleted, change.fromA)) {
      for (const char of charsAt(a, from, to)) {
        if (char === null || inHead.has(char)) continue;
        assert.equal(span.user, deletedBy.get(char), `${char}'s deleter`);
      }
    }
  }
}

describe('attributedChanges', () => {
  it('attributes typing and deleting to their authors, apart when they differ', () => {
    const base = doc('hello world');
    const steps = [
      by('ann', new ReplaceStep(7, 7, doc('brave ').slice(1, 7)), 10),
      by('bob', new ReplaceStep(13, 14, doc('').slice(0, 0)), 20),
      by('ann', new ReplaceStep(13, 13, doc('new ').slice(1, 5)), 30),
      by('bob', new ReplaceStep(2, 3, doc('a').slice(1, 2)), 40),
    ];
    // hello world → hello brave world → hello brave orld (bob deleted "w") → hello brave new
    // orld → hallo brave new orld. Ann's two insertions touch: one span, at her later time.
    assert.deepEqual(attributedChanges(base, steps), [
      {
        fromA: 2,
        toA: 3,
        fromB: 2,
        toB: 3,
        inserted: [{ length: 1, user: 'bob', clientID: 'c-bob', at: 40 }],
        deleted: [{ length: 1, user: 'bob', clientID: 'c-bob', at: 40 }],
      },
      {
        fromA: 7,
        toA: 8,
        fromB: 7,
        toB: 17,
        inserted: [{ length: 10, user: 'ann', clientID: 'c-ann', at: 30 }],
        deleted: [{ length: 1, user: 'bob', clientID: 'c-bob', at: 20 }],
      },
    ]);
  });

  it('keeps the typist of text another user typed into', () => {
    const base = doc('');
    const steps = [
      by('ann', new ReplaceStep(1, 1, doc('aaaa').slice(1, 5)), 1),
      by('bob', new ReplaceStep(3, 3, doc('bb').slice(1, 3)), 2),
    ];
    const [change] = attributedChanges(base, steps);
    assert.deepEqual(
      change!.inserted.map((span) => [span.user, span.length]),
      [
        ['ann', 2],
        ['bob', 2],
        ['ann', 2],
      ],
    );
  });

  it('shows formatting as a change over the text it touched, typed text keeping its typist', () => {
    const base = doc('plain text');
    const strong = schema.marks.strong!.create();
    const steps = [
      by('ann', new ReplaceStep(11, 11, doc(' more').slice(1, 6)), 1),
      // bob bolds "text more": base text and ann's.
      by('bob', new AddMarkStep(7, 16, strong), 2),
    ];
    const changes = attributedChanges(base, steps);
    assert.deepEqual(
      changes.map((c) => [c.fromA, c.toA, c.fromB, c.toB, c.inserted[0]!.user, c.deleted[0]?.user]),
      [
        [7, 11, 7, 11, 'bob', 'bob'],
        [11, 11, 11, 16, 'ann', undefined],
      ],
    );
  });

  it('shows nothing for formatting undone, and a heading level change', () => {
    const strong = schema.marks.strong!.create();
    const base = schema.node('doc', null, [
      schema.node('heading', { level: 1 }, schema.text('title')),
      schema.node('paragraph', null, schema.text('body')),
    ]);
    let state = EditorState.create({ doc: base });
    const tr = state.tr
      .addMark(8, 12, strong)
      .removeMark(8, 12, strong)
      .setNodeAttribute(0, 'level', 2);
    state = state.apply(tr);
    const changes = attributedChanges(
      base,
      tr.steps.map((step) => by('cy', step)),
    );
    assert.deepEqual(
      changes.map((c) => [c.fromA, c.toA, c.fromB, c.toB]),
      [[0, 1, 0, 1]],
    );
  });

  it('names the last to format each stretch', () => {
    const base = doc('abcdefgh');
    const strong = schema.marks.strong!.create();
    const em = schema.marks.em!.create();
    const steps = [
      by('ann', new AddMarkStep(1, 9, strong), 1),
      by('bob', new AddMarkStep(3, 5, em), 2),
      // Undone by ann: "gh" ends as it began.
      by('ann', new AddMarkStep(7, 9, em), 3),
      by('ann', new RemoveMarkStep(7, 9, em), 4),
      by('ann', new RemoveMarkStep(7, 9, strong), 5),
    ];
    assert.deepEqual(
      attributedChanges(base, steps).map((c) => [
        c.fromB,
        c.toB,
        c.inserted[0]!.user,
        c.inserted[0]!.at,
      ]),
      [
        [1, 3, 'ann', 1],
        [3, 5, 'bob', 2],
        // ann's bold here and her later steps on "gh" touch: one span, at her latest time.
        [5, 7, 'ann', 5],
      ],
    );
  });

  it('is empty for no steps', () => {
    assert.deepEqual(attributedChanges(doc('x'), []), []);
  });

  it('covers exactly what changed, each span attributed (random multi-author histories)', () => {
    assertProperty(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 25 }),
        (seed, rounds) => {
          const history = randomHistory(seed, rounds, { concurrency: 0.4 });
          const changes = attributedChanges(history.base, history.steps);
          assertExplains(changes, history);
          assertAttributed(changes, history);
          assert.deepEqual(JSON.parse(JSON.stringify(changes)), changes, 'plain JSON');
          assert.deepEqual(
            attributedChanges(history.base, history.steps, history.head),
            changes,
            'the same from the newest document as from replaying',
          );
        },
      ),
      { numRuns: 200 },
    );
  });
});
