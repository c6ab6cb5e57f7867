import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { Pace } from '../../client-sim/pace.js';
import { Random } from '../../client-sim/random.js';
import {
  convergenceOf,
  generatorLimited,
  sleepUntil,
  type SteadySummary,
} from '../../client-sim/swarm.js';
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

/// Keeps the thread busy for `ms`, as a saturated simulator does: no timer can fire meanwhile.
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('workload: Pace', () => {
  it('keeps its schedule through a busy thread: missed beats come at once, each with its due time', async () => {
    const meanGapMs = 20;
    const pace = new Pace(1000 / meanGapMs, new Random(5));
    // The same draws as the pace's own: the schedule it was given, beat by beat.
    const draws = new Random(5);
    const beats: { dueMs: number; atMs: number }[] = [];
    const startedMs = performance.now();
    pace.start(0, (dueMs) => beats.push({ dueMs, atMs: performance.now() }));
    busy(400);
    await new Promise((resolve) => setTimeout(resolve, 300));
    pace.stop();
    const stoppedMs = performance.now();
    const count = beats.length;
    await new Promise((resolve) => setTimeout(resolve, 3 * meanGapMs));
    assert.equal(beats.length, count, 'no beat after stop');

    // Every beat the schedule had due by well before the stop was made: the 400 ms the thread
    // was busy were made up, not lost (gaps counted from the late firing made about half).
    let due = startedMs + draws.next() * meanGapMs;
    let dueBefore = 0;
    while (due < stoppedMs - 100) {
      dueBefore++;
      due += meanGapMs * (0.5 + draws.next());
    }
    assert.ok(dueBefore > 25, `${dueBefore} beats due`);
    assert.ok(count >= dueBefore, `${count} beats made of ${dueBefore} due`);
    // The due times are the schedule's, not the late firings: gaps of half to one and a half
    // of the mean, the first beat due within the first gap although made after the busy time.
    for (let i = 1; i < count; i++) {
      const gap = beats[i]!.dueMs - beats[i - 1]!.dueMs;
      assert.ok(gap >= 0.5 * meanGapMs && gap <= 1.5 * meanGapMs, `gap ${gap} ms`);
    }
    assert.ok(beats[0]!.dueMs <= startedMs + meanGapMs + 1, 'first beat due in the first gap');
    assert.ok(beats[0]!.atMs - beats[0]!.dueMs >= 350, 'the first beat was made late');
  });
});

describe('workload: a level the simulator could not offer', () => {
  const steady = (windows: number, offeredPerSec: number, editsPerSec: number): SteadySummary => ({
    windows,
    offeredPerSec,
    editsPerSec,
    sendsPerSec: editsPerSec,
    confirmedPerSec: editsPerSec,
    latency: null,
    refusalShare: 0,
    refusalShares: {},
    reconnects: 0,
    server: null,
  });

  it('is generator-limited when the edits made fall short of those offered', () => {
    // The reviewer's case: 200 people at 5/s whose timers made 952/s, then 678/s.
    assert.equal(generatorLimited(steady(5, 1000, 952), 10_000), true);
    assert.equal(generatorLimited(steady(5, 1000, 678), 10_000), true);
    assert.equal(generatorLimited(steady(5, 1000, 995), 10_000), false);
    assert.equal(generatorLimited(steady(5, 1000, 1004), 10_000), false);
  });

  it('is not for a short count that the draws of the gaps explain', () => {
    // 6 people over three 1 s windows: ~90 edits, whose count varies by ~3 from luck alone.
    assert.equal(generatorLimited(steady(3, 30, 28), 1000), false);
    assert.equal(generatorLimited(steady(3, 30, 20), 1000), true);
  });
});

describe('workload: the end of a level', () => {
  it('is never reached early: the wait lasts until the wall clock reads the stop time', async () => {
    // Timers armed while the thread is busy, as the coordinator's is: a quarter of those set
    // for `target - Date.now()` fired before Date.now() reached the target.
    const waits: Promise<number | null>[] = [];
    for (let i = 0; i < 40; i++) {
      const target = Date.now() + 20 + ((i * 37) % 200);
      waits.push(sleepUntil(target).then(() => (Date.now() < target ? target : null)));
      busy(2);
    }
    const early = (await Promise.all(waits)).filter((target) => target !== null);
    assert.deepEqual(early, [], 'waits that ended before their stop time');
  });
});

describe('workload: the convergence check of a level', () => {
  it('reads a level that compared nothing as unchecked, never as converged', () => {
    assert.deepEqual(convergenceOf([]), {
      converged: false,
      unchecked: true,
      checked: 0,
      failures: [],
    });
    const equal = { docId: 'd', clientID: 'replica', converged: true, detail: '' };
    const differs = { ...equal, converged: false, detail: 'document differs' };
    assert.equal(convergenceOf([equal]).converged, true);
    assert.deepEqual(convergenceOf([equal, differs]), {
      converged: false,
      unchecked: false,
      checked: 2,
      failures: ['d replica: document differs'],
    });
  });
});
