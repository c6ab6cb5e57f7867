import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import { schema } from '../../../schema/index.js';
import { restoreSteps } from '../../../server/history/restore.js';
import { assertProperty, randomHistory } from '../../support/history_gen.js';

// Restoring a version: the steps that bring the current document to it, exactly.

function doc(...paragraphs: string[]): Node {
  return schema.node(
    'doc',
    null,
    paragraphs.map((text) => schema.node('paragraph', null, text ? schema.text(text) : [])),
  );
}

function restored(current: Node, target: Node): { doc: Node; count: number } {
  const steps = restoreSteps(current, target);
  let doc = current;
  for (const step of steps) {
    const result = step.apply(doc);
    assert.ok(result.doc, `a restore step does not apply: ${result.failed}`);
    doc = result.doc;
  }
  return { doc, count: steps.length };
}

describe('restoreSteps', () => {
  it('is empty for equal documents', () => {
    assert.deepEqual(restoreSteps(doc('same'), doc('same')), []);
  });

  it('replaces only the range that differs, in one step', () => {
    const steps = restoreSteps(
      doc('keep this', 'old', 'and this'),
      doc('keep this', 'new', 'and this'),
    );
    assert.equal(steps.length, 1);
    assert.deepEqual(steps[0]!.toJSON(), {
      stepType: 'replace',
      from: 12,
      to: 15,
      slice: { content: [{ type: 'text', text: 'new' }] },
    });
  });

  it('handles a repeated character at the change ("aa" → "aaa")', () => {
    const { doc: after, count } = restored(doc('aa'), doc('aaa'));
    assert.ok(after.eq(doc('aaa')));
    assert.equal(count, 1);
  });

  it('restores formatting and block types, not only text', () => {
    const strong = schema.marks.strong!.create();
    const target = schema.node('doc', null, [
      schema.node('heading', { level: 2 }, schema.text('title', [strong])),
      schema.node('bullet_list', null, [
        schema.node('list_item', null, [schema.node('paragraph', null, schema.text('item'))]),
      ]),
    ]);
    const { doc: after } = restored(doc('title', 'item'), target);
    assert.ok(after.eq(target));
  });

  it('brings any document to any other (random pairs)', () => {
    assertProperty(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 0, max: 20 }),
        (seedA, seedB, rounds) => {
          const a = randomHistory(seedA, rounds, { concurrency: 0.3 });
          const b = randomHistory(seedB, rounds, { concurrency: 0.3 });
          // Related pairs (a version and a later one, both ways) and unrelated ones.
          for (const [current, target] of [
            [a.base, a.head],
            [a.head, a.base],
            [a.head, b.head],
          ] as const) {
            const { doc: after, count } = restored(current, target);
            assert.ok(after.eq(target), 'reaches the target');
            assert.ok(count <= 3, `${count} steps`);
            if (current.eq(target)) assert.equal(count, 0);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
