import { diffArrays } from 'diff';
import type { Node } from 'prosemirror-model';
import { StepMap } from 'prosemirror-transform';
import { align, grouped, inOrder, type Group } from './alignment.js';
import {
  isTextblock,
  pieces,
  pieceSize,
  sameKeys,
  sizeOf,
  textblockIndices,
  type Piece,
} from './pieces.js';
import { compareStream, compareText, forEachRun, wholeStretch } from './text_diff.js';

// When the server answers a catch-up with a whole document (the steps since our version are no
// longer held), the client still has to move its unconfirmed steps and its selection from the
// document it knew to the new one. Nothing says how one became the other, so the change is
// reconstructed by comparing the two, with jsdiff's Myers diff:
// - each document is read as a stream of pieces in document order: the start and the end token
//   of every container (a list, a list item, a quote) and every textblock or leaf block whole,
//   so that a paragraph others wrapped in a list, lifted out of one, indented or joined into the
//   item before it is the same piece in both, only with other tokens around it;
// - the streams' textblocks are matched first, the rest only between them; in each stretch
//   that differs, textblocks are paired by how alike their text is (a paragraph edited, or
//   made a heading) and compared character by character (marks left out: they move no
//   position); the rest of the stretch was deleted or inserted;
// - a pair takes in the unpaired textblocks next to it when their texts read together are
//   more alike: a paragraph others split in two (or two they joined) is one group, compared as
//   one stream of characters and block tokens, so the split is an inserted pair of tokens and
//   the text on both sides of it keeps its place (paired one to one, the half left unpaired
//   would count as deleted, and an offline edit in it be dropped). Characters are compared across
//   blocks only inside such a group: across a whole stretch, the unit-cost diff would match
//   a deleted paragraph's letters with those of a new one.
// What comes out is one map whose ranges are the places that differ: a position between them
// keeps its place however much others changed elsewhere, and one inside them is taken as
// deleted.

/// The time one comparison may take, and past which detail is given up: a stretch is then
/// taken as one replacement. Myers's diff costs O(N·D), and a reload must stay quick in a
/// browser tab.
const budgetMs = 250;

/// The change from `a` to `b` as the map of the replacements that turn one into the other, or
/// null when no position moves (the two are equal, or differ only in marks). Positions are
/// those of the documents' content.
export function differenceMap(a: Node, b: Node): StepMap | null {
  if (a.content.eq(b.content)) return null;
  const deadline = performance.now() + budgetMs;
  const ranges: number[] = [];
  const piecesA = pieces(a);
  const piecesB = pieces(b);
  // Textblocks first: matched ones anchor the comparison, and the container tokens (and leaf
  // blocks) around them are compared only in the stretches between anchors. Compared together,
  // tokens and textblocks count alike, and a list lifted by one item could match the list's
  // tokens instead of the item's paragraph.
  const blocksA = textblockIndices(piecesA);
  const blocksB = textblockIndices(piecesB);
  const changes = diffArrays(
    blocksA.map((i) => piecesA[i]!.key),
    blocksB.map((i) => piecesB[i]!.key),
    { maxEditLength: blocksA.length + blocksB.length, timeout: budgetMs },
  );
  if (!changes) {
    wholeStretch(a, b, 0, ranges);
    return ranges.length === 0 ? null : new StepMap(ranges);
  }
  // The pieces after the last anchor, up to the next.
  let afterA = 0;
  let afterB = 0;
  const gap = (toA: number, toB: number) => {
    const stretchA = piecesA.slice(afterA, toA);
    const stretchB = piecesB.slice(afterB, toB);
    if (!sameKeys(stretchA, stretchB)) {
      const posA = afterA < piecesA.length ? piecesA[afterA]!.pos : a.content.size;
      const posB = afterB < piecesB.length ? piecesB[afterB]!.pos : b.content.size;
      compareStretch(stretchA, posA, stretchB, posB, deadline, ranges);
    }
  };
  forEachRun(changes, (common, fromA, countA, fromB) => {
    if (!common) return;
    for (let k = 0; k < countA; k++) {
      const anchorA = blocksA[fromA + k]!;
      const anchorB = blocksB[fromB + k]!;
      gap(anchorA, anchorB);
      afterA = anchorA + 1;
      afterB = anchorB + 1;
    }
  });
  gap(piecesA.length, piecesB.length);
  return ranges.length === 0 ? null : new StepMap(ranges);
}

/// Appends the ranges for a stretch where the streams differ: pieces `stretchA` from `posA`
/// in the old document stand where `stretchB` from `posB` stand in the new one. Textblocks on
/// both sides are aligned in order by `similarity` (`align`) and grouped with the unpaired
/// ones a split or a join left next to them (`grouped`); each group is compared inside, and
/// what lies between groups is one replacement.
function compareStretch(
  stretchA: Piece[],
  posA: number,
  stretchB: Piece[],
  posB: number,
  deadline: number,
  ranges: number[],
): void {
  const blocksA = stretchA.filter(isTextblock);
  const blocksB = stretchB.filter(isTextblock);
  const inTime = performance.now() < deadline;
  const pairs = inTime ? align(blocksA, blocksB) : inOrder(blocksA, blocksB);
  const groups = inTime
    ? grouped(pairs, blocksA, blocksB)
    : pairs.map(([old, added]): Group => ({ olds: [old], news: [added] }));
  let fromA = posA;
  let fromB = posB;
  // The pieces between groups: one replacement, unless they are the same on both sides (the
  // tokens of a list between its items' paragraphs), which keep their positions; replaced,
  // they would drop a local step made at them (a list item lifted or sunk).
  let nextA = 0;
  let nextB = 0;
  for (let k = 0; k < groups.length; k++) {
    const { olds, news } = groups[k]!;
    const firstA = stretchA.indexOf(olds[0]!, nextA);
    const firstB = stretchB.indexOf(news[0]!, nextB);
    const lastA = stretchA.indexOf(olds[olds.length - 1]!, firstA);
    const lastB = stretchB.indexOf(news[news.length - 1]!, firstB);
    const old = olds[0]!;
    const added = news[0]!;
    const grouping = olds.length > 1 || news.length > 1;
    const streamed = grouping
      ? compareStream(
          stretchA.slice(firstA, lastA + 1),
          old.pos,
          stretchB.slice(firstB, lastB + 1),
          deadline,
        )
      : null;
    if (grouping && !streamed && olds.length === news.length) {
      // Too long or too different to compare as one stream: as many blocks on both sides (a
      // join and a split elsewhere, or long paragraphs whose ends alone looked alike), so
      // compared in pairs, in order, as ungrouped blocks are; the first pair takes this turn.
      groups.splice(k, 1, ...olds.map((piece, i): Group => ({ olds: [piece], news: [news[i]!] })));
      k--;
      continue;
    }
    const between = !sameKeys(stretchA.slice(nextA, firstA), stretchB.slice(nextB, firstB));
    if (between && (old.pos > fromA || added.pos > fromB))
      ranges.push(fromA, old.pos - fromA, added.pos - fromB);
    nextA = lastA + 1;
    nextB = lastB + 1;
    const endA = stretchA[lastA]!.pos + stretchA[lastA]!.size;
    const endB = stretchB[lastB]!.pos + stretchB[lastB]!.size;
    if (grouping) {
      // Past the stream's limits with blocks split or joined: the group is one replacement.
      if (streamed) ranges.push(...streamed);
      else ranges.push(old.pos, endA - old.pos, endB - added.pos);
    } else {
      // Another type or attributes: its start and end tokens are replaced, as a change of
      // block type maps them in ProseMirror; what is inside keeps its positions.
      const retyped = !old.node.sameMarkup(added.node);
      if (retyped) ranges.push(old.pos, 1, 1);
      compareText(old.node, added.node, old.pos + 1, deadline, ranges);
      if (retyped) ranges.push(endA - 1, 1, 1);
    }
    fromA = endA;
    fromB = endB;
  }
  const endA = posA + sizeOf(stretchA, 0, stretchA.length, pieceSize);
  const endB = posB + sizeOf(stretchB, 0, stretchB.length, pieceSize);
  const between = !sameKeys(stretchA.slice(nextA), stretchB.slice(nextB));
  if (between && (endA > fromA || endB > fromB)) ranges.push(fromA, endA - fromA, endB - fromB);
}
