import { blockText, type Piece } from './pieces.js';

// Pairing the textblocks of two stretches that differ: which old block became which new one,
// and which split or joined blocks go together as one group.

/// The most pairs of textblocks one stretch aligns by their likeness; past it, they are paired
/// in order.
const maxPairs = 40_000;

/// How many characters at each end `likeness` compares.
const likenessSpan = 256;

/// The most textblocks one group of split or joined blocks takes in on each side.
const maxGroup = 16;

/// Textblocks of the old document (`olds`) that became `news` in the new one: one pair, or
/// more blocks on a side where others split or joined them.
export interface Group {
  olds: Piece[];
  news: Piece[];
}

/// The pairs of `olds` and `news` (textblocks, each in document order) that keep their order
/// and are as alike as possible in total: a longest common subsequence weighted by
/// `similarity`, by dynamic programming. Paired in order when there are too many.
export function align(olds: Piece[], news: Piece[]): [Piece, Piece][] {
  const n = olds.length;
  const m = news.length;
  if (n === 0 || m === 0) return [];
  if (n * m > maxPairs) return inOrder(olds, news);
  const width = m + 1;
  // best[i * width + j]: the best total for olds from i and news from j.
  const best = new Float64Array((n + 1) * width);
  const score = new Float64Array(n * m);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      const like = similarity(olds[i]!, news[j]!);
      score[i * m + j] = like;
      best[i * width + j] = Math.max(
        best[(i + 1) * width + j]!,
        best[i * width + j + 1]!,
        like + best[(i + 1) * width + j + 1]!,
      );
    }
  }
  const pairs: [Piece, Piece][] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    const value = best[i * width + j]!;
    // The same sums as above, on the same values: equality is exact.
    if (value === score[i * m + j]! + best[(i + 1) * width + j + 1]!) {
      pairs.push([olds[i]!, news[j]!]);
      i++;
      j++;
    } else if (value === best[(i + 1) * width + j]!) {
      i++;
    } else {
      j++;
    }
  }
  return pairs;
}

/// The first textblocks of `olds` and `news` paired one to one, in order: for a stretch too
/// long to align (a replace-all over hundreds of paragraphs keeps their count and order).
export function inOrder(olds: Piece[], news: Piece[]): [Piece, Piece][] {
  const pairs: [Piece, Piece][] = [];
  for (let i = 0; i < Math.min(olds.length, news.length); i++) pairs.push([olds[i]!, news[i]!]);
  return pairs;
}

/// How alike two textblocks are, from 0.01 to 1.1: `likeness` of their text, a little more for
/// the same markup. Any two may pair (a paragraph rewritten where it stood is still that
/// paragraph); where there is a choice, the alignment takes the most alike.
function similarity(a: Piece, b: Piece): number {
  a.text ??= a.node.textContent;
  b.text ??= b.node.textContent;
  return Math.max(likeness(a.text, b.text), 0.01) + (a.node.sameMarkup(b.node) ? 0.1 : 0);
}

/// The share of the longer text that the two share at their start and at their end (each
/// looked at over `likenessSpan` characters at most); 1 for two empty texts, 0.5 when one is
/// empty (an empty block is weakly like any other).
export function likeness(a: string, b: string): number {
  const longest = Math.max(a.length, b.length);
  if (longest === 0) return 1;
  if (a.length === 0 || b.length === 0) return 0.5;
  const most = Math.min(a.length, b.length, likenessSpan);
  let start = 0;
  while (start < most && a.charCodeAt(start) === b.charCodeAt(start)) start++;
  let end = 0;
  const tail = Math.min(most, Math.min(a.length, b.length) - start);
  while (end < tail && a.charCodeAt(a.length - 1 - end) === b.charCodeAt(b.length - 1 - end)) end++;
  return (start + end) / Math.min(longest, 2 * likenessSpan);
}

/// The groups of `pairs` (textblocks of `blocksA` and `blocksB` paired in order):
/// - each pair whose texts have something in common at an end grows by the unpaired
///   textblocks on either side while their texts read together are more alike (`likeness`)
///   than without them: "ab|cd" split into "ab" and "cd" pairs with one half, and the other
///   half, read after or before it, makes the pair's text whole again;
/// - a pair with nothing in common (or an empty block with text) was paired only because
///   blocks were left over: its blocks are free for the others to take in first, and it stays
///   (and grows in turn) only if neither was taken;
/// - two groups next to each other are one when their texts read together are more alike than
///   either's: a paragraph joined with the next and split again elsewhere ("ab|cd" into
///   "abc|d") keeps its count of blocks, so each pair holds part of the other's text.
/// A group takes blocks only up to its neighbours', so groups keep the documents' order.
export function grouped(pairs: [Piece, Piece][], blocksA: Piece[], blocksB: Piece[]): Group[] {
  const indexA = new Map(blocksA.map((piece, i) => [piece, i]));
  const indexB = new Map(blocksB.map((piece, i) => [piece, i]));
  // Each group as blocksA[a0..a1] and blocksB[b0..b1], and how alike their texts are.
  const spans = pairs.map(([old, added]) => {
    const [a, b] = [blockText(old), blockText(added)];
    const i = indexA.get(old)!;
    const j = indexB.get(added)!;
    return { a0: i, a1: i, b0: j, b1: j, score: (a === '') !== (b === '') ? 0 : likeness(a, b) };
  });
  const strong = spans.filter((span) => span.score > 0);
  const takenA = new Uint8Array(blocksA.length);
  const takenB = new Uint8Array(blocksB.length);
  // The first blocks on each side that no group before has taken.
  let freeA = 0;
  let freeB = 0;
  for (let k = 0; k < strong.length; k++) {
    const span = strong[k]!;
    const limitA = k + 1 < strong.length ? strong[k + 1]!.a0 : blocksA.length;
    const limitB = k + 1 < strong.length ? strong[k + 1]!.b0 : blocksB.length;
    grow(span, blocksA, blocksB, freeA, limitA, freeB, limitB);
    takenA.fill(1, span.a0, span.a1 + 1);
    takenB.fill(1, span.b0, span.b1 + 1);
    freeA = span.a1 + 1;
    freeB = span.b1 + 1;
  }
  const kept = spans.filter((span) => span.score > 0 || !(takenA[span.a0] || takenB[span.b0]));
  // The pairs left of those: grown in turn, between the groups around them.
  for (let k = 0; k < kept.length; k++) {
    const span = kept[k]!;
    if (span.score > 0) continue;
    const before = kept[k - 1];
    const after = kept[k + 1];
    grow(
      span,
      blocksA,
      blocksB,
      before ? before.a1 + 1 : 0,
      after ? after.a0 : blocksA.length,
      before ? before.b1 + 1 : 0,
      after ? after.b0 : blocksB.length,
    );
  }
  const merged: typeof spans = [];
  for (const span of kept) {
    merged.push(span);
    while (merged.length > 1) {
      const next = merged[merged.length - 1]!;
      const last = merged[merged.length - 2]!;
      if (next.a1 - last.a0 >= maxGroup || next.b1 - last.b0 >= maxGroup) break;
      const like = likeness(
        joinedText(blocksA, last.a0, next.a1),
        joinedText(blocksB, last.b0, next.b1),
      );
      if (like <= Math.max(last.score, next.score)) break;
      merged.pop();
      last.a1 = next.a1;
      last.b1 = next.b1;
      last.score = like;
    }
  }
  return merged.map(({ a0, a1, b0, b1 }) => ({
    olds: blocksA.slice(a0, a1 + 1),
    news: blocksB.slice(b0, b1 + 1),
  }));
}

/// Grows `span` by blocks from `freeA` up to before `limitA` and from `freeB` up to before
/// `limitB` (see `grouped`), at most `maxGroup` on each side, while that makes its texts more
/// alike. Every reach is tried, one end and one side at a time: middle blocks (and empty ones)
/// add nothing to how alike the ends are on their own.
function grow(
  span: { a0: number; a1: number; b0: number; b1: number; score: number },
  blocksA: Piece[],
  blocksB: Piece[],
  freeA: number,
  limitA: number,
  freeB: number,
  limitB: number,
): void {
  while (span.score < 1) {
    const { a0, a1, b0, b1 } = span;
    const textA = joinedText(blocksA, a0, a1);
    const textB = joinedText(blocksB, b0, b1);
    // The best reach so far: its span and how alike its texts are.
    const found = { like: span.score, at: null as [number, number, number, number] | null };
    const consider = (c0: number, c1: number, d0: number, d1: number) => {
      const like = likeness(
        c0 === a0 && c1 === a1 ? textA : joinedText(blocksA, c0, c1),
        d0 === b0 && d1 === b1 ? textB : joinedText(blocksB, d0, d1),
      );
      if (like > found.like) [found.like, found.at] = [like, [c0, c1, d0, d1]];
    };
    for (let at = a0 - 1; at >= freeA && a1 - at < maxGroup; at--) consider(at, a1, b0, b1);
    for (let at = a1 + 1; at < limitA && at - a0 < maxGroup; at++) consider(a0, at, b0, b1);
    for (let at = b0 - 1; at >= freeB && b1 - at < maxGroup; at--) consider(a0, a1, at, b1);
    for (let at = b1 + 1; at < limitB && at - b0 < maxGroup; at++) consider(a0, a1, b0, at);
    if (!found.at) return;
    [span.a0, span.a1, span.b0, span.b1] = found.at;
    span.score = found.like;
  }
}

/// The text of `blocks` from `from` to `to` read together, as far as `likeness` reads it:
/// whole up to `2 × likenessSpan` characters, and past that its first and last `likenessSpan`
/// (which give the same likeness against any text): groups of long paragraphs are compared
/// without building their whole text again for every block tried.
function joinedText(blocks: Piece[], from: number, to: number): string {
  let length = 0;
  for (let i = from; i <= to; i++) length += blockText(blocks[i]!).length;
  if (length <= 2 * likenessSpan) {
    let text = '';
    for (let i = from; i <= to; i++) text += blockText(blocks[i]!);
    return text;
  }
  let head = '';
  for (let i = from; i <= to && head.length < likenessSpan; i++) {
    head += blockText(blocks[i]!).slice(0, likenessSpan);
  }
  let tail = '';
  for (let i = to; i >= from && tail.length < likenessSpan; i--) {
    tail = blockText(blocks[i]!).slice(-likenessSpan) + tail;
  }
  return head.slice(0, likenessSpan) + tail.slice(-likenessSpan);
}
