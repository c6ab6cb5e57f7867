// How long the history's pure algorithms take over a long history of 100,000 typing steps by
// three people: `attributedChanges` across all of them (replaying, and given the newest
// document as a checkpoint gives it), `revertUser` of one writer (given the newest document;
// it still replays from the start to the range's end) and `restoreSteps` back to the start;
// applying the steps alone for scale. Run with
// `npx tsc -p tsconfig.json && node dist/bench/history-algo.bench.js [steps] [turnChance]`.
import { Slice, type Node } from 'prosemirror-model';
import { ReplaceStep, type Step } from 'prosemirror-transform';
import { Random } from '../client-sim/random.js';
import { schema } from '../schema/index.js';
import { attributedChanges } from '../server/history/changes.js';
import { restoreSteps } from '../server/history/restore.js';
import { revertUser } from '../server/history/revert.js';
import type { HistoryStep } from '../server/history/types.js';

const stepCount = Number(process.argv[2] ?? 100_000);
const runs = 5;
/// The chance, at each keystroke, that the next one is by a writer picked at random: 1 has
/// them interleave keystroke by keystroke, the worst case for merging.
const turnChance = Number(process.argv[3] ?? 0.05);

/// `count` steps as people type: each of three writers has a cursor in the document and
/// types a character at it, now and then presses Backspace, Enter, or moves elsewhere.
function typingHistory(base: Node, count: number): { steps: HistoryStep[]; head: Node } {
  const random = new Random(42);
  const writers = ['ann', 'bob', 'cy'];
  const cursors = [2, 2, 2];
  const steps: HistoryStep[] = [];
  let doc = base;
  let w = 0;
  for (let i = 0; i < count; i++) {
    // Writers take turns in bursts (a word or a sentence each), as people do.
    if (random.chance(turnChance)) w = random.int(0, 2);
    let cursor = Math.min(cursors[w]!, doc.content.size - 1);
    let $pos = doc.resolve(cursor);
    if (!$pos.parent.inlineContent || random.chance(0.001)) {
      cursor = randomTextPosition(doc, random);
      $pos = doc.resolve(cursor);
    }
    const roll = random.next();
    let step: Step;
    if (roll < 0.05 && $pos.parentOffset > 0) {
      step = new ReplaceStep(cursor - 1, cursor, Slice.empty);
      cursor -= 1;
    } else if (roll < 0.06) {
      const split = schema.node('doc', null, [schema.node('paragraph'), schema.node('paragraph')]);
      step = new ReplaceStep(cursor, cursor, split.slice(1, 3));
      cursor += 2;
    } else {
      const text = schema.text(String.fromCharCode(97 + random.int(0, 25)));
      step = new ReplaceStep(cursor, cursor, schema.node('paragraph', null, text).slice(0, 1));
      cursor += 1;
    }
    const applied = step.apply(doc).doc;
    if (!applied) continue;
    // The others' cursors move with the text, as their editors map them.
    const map = step.getMap();
    for (let c = 0; c < cursors.length; c++) cursors[c] = c === w ? cursor : map.map(cursors[c]!);
    doc = applied;
    steps.push({ step, user: writers[w]!, clientID: `c-${writers[w]}`, at: 1_700_000_000_000 + i });
  }
  return { steps, head: doc };
}

function randomTextPosition(doc: Node, random: Random): number {
  const blocks: { pos: number; size: number }[] = [];
  doc.forEach((node, offset) => blocks.push({ pos: offset, size: node.content.size }));
  const block = random.pick(blocks);
  return block.pos + 1 + random.int(0, block.size);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const base = schema.node('doc', null, [
  schema.node('paragraph', null, schema.text('The history of this document starts here.')),
]);
const { steps, head } = typingHistory(base, stepCount);
const applyTimes: number[] = [];
const changeTimes: number[] = [];
const headTimes: number[] = [];
const revertLastTimes: number[] = [];
const revertAllTimes: number[] = [];
const restoreTimes: number[] = [];
let changeCount = 0;
let revertedLast = 0;
let revertedAll = 0;
for (let r = 0; r < runs; r++) {
  const a0 = performance.now();
  let doc = base;
  for (const entry of steps) doc = entry.step.apply(doc).doc!;
  applyTimes.push(performance.now() - a0);
  if (!doc.eq(head)) throw new Error('replay diverged');
  const c0 = performance.now();
  changeCount = attributedChanges(base, steps).length;
  changeTimes.push(performance.now() - c0);
  const h0 = performance.now();
  attributedChanges(base, steps, head);
  headTimes.push(performance.now() - h0);
  // One writer's last 1,000 steps, then all of theirs, given the newest document.
  const l0 = performance.now();
  revertedLast = revertUser(
    base,
    steps,
    { user: 'ann', from: steps.length - 1000, to: steps.length },
    head,
  ).reverted;
  revertLastTimes.push(performance.now() - l0);
  const v0 = performance.now();
  revertedAll = revertUser(base, steps, { user: 'ann', from: 0, to: steps.length }, head).reverted;
  revertAllTimes.push(performance.now() - v0);
  const s0 = performance.now();
  restoreSteps(head, base);
  restoreTimes.push(performance.now() - s0);
}
console.log(
  `node ${process.version}, ${steps.length} steps, ${head.content.size} positions, turn chance ${turnChance}`,
);
console.log('| measure | median (ms) |');
console.log('|---|---|');
console.log(`| apply the steps alone | ${median(applyTimes).toFixed(1)} |`);
console.log(
  `| attributedChanges, replaying (${changeCount} changes) | ${median(changeTimes).toFixed(1)} |`,
);
console.log(`| attributedChanges, given the newest document | ${median(headTimes).toFixed(1)} |`);
console.log(
  `| revertUser, one writer's steps among the last 1,000 (${revertedLast}) | ${median(revertLastTimes).toFixed(1)} |`,
);
console.log(
  `| revertUser, all of one writer's steps (${revertedAll}) | ${median(revertAllTimes).toFixed(1)} |`,
);
console.log(
  `| restoreSteps, newest document back to the first | ${median(restoreTimes).toFixed(1)} |`,
);
