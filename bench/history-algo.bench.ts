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

/// The median time of `count` calls of `f`, after `warmup` untimed ones (the JIT's), and its
/// last result.
function timed<T>(count: number, warmup: number, f: () => T): { ms: number; result: T } {
  let result = f();
  for (let i = 1; i < warmup; i++) result = f();
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    result = f();
    times.push(performance.now() - t0);
  }
  return { ms: median(times), result };
}

const replay = timed(runs, 1, () => {
  let doc = base;
  for (const entry of steps) doc = entry.step.apply(doc).doc!;
  if (!doc.eq(head)) throw new Error('replay diverged');
});
const replaying = timed(runs, 1, () => attributedChanges(base, steps));
const given = timed(21, 3, () => attributedChanges(base, steps, head));
// One writer's steps among the last 1,000 and the last 10,000, given the newest document:
// revertUser still replays from the start to the range's end, and maps each reverted step
// over every later one.
const last = (count: number) =>
  timed(runs, 1, () => {
    const from = Math.max(0, steps.length - count);
    return revertUser(base, steps, { user: 'ann', from, to: steps.length }, head).reverted;
  });
const revertLast = last(1_000);
const revertMore = last(10_000);
const restore = timed(21, 3, () => restoreSteps(head, base));
console.log(
  `node ${process.version}, ${steps.length} steps, ${head.content.size} positions, turn chance ${turnChance}`,
);
console.log('| measure | median (ms) |');
console.log('|---|---|');
console.log(`| apply the steps alone | ${replay.ms.toFixed(1)} |`);
console.log(
  `| attributedChanges, replaying (${replaying.result.length} changes) | ${replaying.ms.toFixed(1)} |`,
);
console.log(`| attributedChanges, given the newest document | ${given.ms.toFixed(1)} |`);
for (const [range, result] of [
  ['1,000', revertLast],
  ['10,000', revertMore],
] as const) {
  console.log(
    `| revertUser, one writer's ${result.result} steps among the last ${range} | ${result.ms.toFixed(1)} |`,
  );
}
console.log(`| restoreSteps, newest document back to the first | ${restore.ms.toFixed(1)} |`);
