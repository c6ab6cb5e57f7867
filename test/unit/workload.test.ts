import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { Random } from '../../client-sim/random.js';
import { randomEdit } from '../../client-sim/workload.js';
import { emptyDoc, schema } from '../../schema/index.js';

/// Makes `count` edits from an empty document with `seed`; returns the steps of every edit as
/// JSON and the final document.
function run(seed: number, count: number): { steps: string[]; doc: EditorState['doc'] } {
  const random = new Random(seed);
  let state = EditorState.create({ schema, doc: emptyDoc() });
  const steps: string[] = [];
  for (let i = 0; i < count; i++) {
    const tr = randomEdit(state, random);
    if (!tr) {
      steps.push('none');
      continue;
    }
    steps.push(JSON.stringify(tr.steps.map((step) => step.toJSON())));
    state = state.apply(tr);
  }
  return { steps, doc: state.doc };
}

describe('workload: randomEdit', () => {
  it('makes the same edits for the same seed', () => {
    const a = run(42, 300);
    const b = run(42, 300);
    assert.deepEqual(a.steps, b.steps);
    assert.ok(a.doc.eq(b.doc));
    const other = run(43, 300);
    assert.notDeepEqual(other.steps, a.steps, 'another seed should make other edits');
  });

  it('only makes edits that apply and leave a valid document, over many seeds', () => {
    for (let seed = 1; seed <= 40; seed++) {
      const random = new Random(seed);
      let state = EditorState.create({ schema, doc: emptyDoc() });
      let made = 0;
      for (let i = 0; i < 300; i++) {
        const tr = randomEdit(state, random);
        if (!tr) continue;
        made++;
        // Replaying the steps on the state they were made for must work step by step.
        const replay = state.tr;
        for (const step of tr.steps) {
          assert.equal(replay.maybeStep(step).failed, null, `seed ${seed}, edit ${i}`);
        }
        assert.ok(replay.doc.eq(tr.doc));
        assert.doesNotThrow(() => tr.doc.check(), `seed ${seed}, edit ${i}`);
        state = state.apply(tr);
      }
      assert.ok(made > 200, `seed ${seed}: only ${made} of 300 edits were made`);
      assert.doesNotThrow(() => schema.nodeFromJSON(state.doc.toJSON()).check());
    }
  });
});
