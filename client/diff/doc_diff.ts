import { diffArrays, type ChangeObject } from 'diff';
import type { Node } from 'prosemirror-model';
import { StepMap } from 'prosemirror-transform';

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
//   the text on both sides of it keeps its place. Paired one to one, the half left unpaired
//   counted as deleted and an offline edit in it was dropped. Characters are compared across
//   blocks only inside such a group: across a whole stretch, the unit-cost diff would match
//   a deleted paragraph's letters with those of a new one.
// What comes out is one map whose ranges are the places that differ: a position between them
// keeps its place however much others changed elsewhere, and one inside them is taken as
// deleted.

/// The time one comparison may take, and past which detail is given up: a stretch is then
/// taken as one replacement. Myers's diff costs O(N·D), and a reload must stay quick in a
/// browser tab.
const budgetMs = 250;
/// The most inserted and deleted characters one textblock's comparison looks at in detail.
const maxCharEdits = 1000;
/// The most pairs of textblocks one stretch aligns by their likeness; past it, they are paired
/// in order.
const maxPairs = 40_000;
/// How many characters at each end `likeness` compares.
const likenessSpan = 256;
/// The most textblocks one group of split or joined blocks takes in on each side.
const maxGroup = 16;
/// The most positions a group compared as one stream may hold (both sides): the stream takes
/// a key per character.
const maxStreamItems = 200_000;

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

/// The indices of the pieces that are textblocks with content: the anchors. A leaf block (a
/// rule) is compared with the tokens between them: matched with a textblock's weight, a rule
/// moved past a paragraph could be kept in place of the paragraph, and the paragraph taken as
/// replaced. So is an empty textblock: all are alike, and one matched with another far from it
/// would cut the stretches around it in the wrong places (a paragraph split there taken for
/// deleted text and new text).
function textblockIndices(list: Piece[]): number[] {
  const indices: number[] = [];
  for (let i = 0; i < list.length; i++) {
    if (isTextblock(list[i]!) && list[i]!.node.content.size > 0) indices.push(i);
  }
  return indices;
}

function sameKeys(a: Piece[], b: Piece[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.key !== b[i]!.key) return false;
  return true;
}

/// A piece of a document read as a stream: a container's start or end token, or a textblock
/// or leaf block whole.
interface Piece {
  /// The block, or the container whose token this is (never a textblock).
  node: Node;
  /// Its position, and how many positions it takes (1 for a token).
  pos: number;
  size: number;
  /// Equal for pieces that are the same: the whole block's JSON, or a token's markup.
  key: string;
  /// A textblock's text, read when first compared.
  text: string | null;
}

function pieces(doc: Node): Piece[] {
  const list: Piece[] = [];
  const walk = (parent: Node, start: number) => {
    parent.forEach((node, offset) => {
      const pos = start + offset;
      if (node.isTextblock || node.isLeaf) {
        list.push({
          node,
          pos,
          size: node.nodeSize,
          key: JSON.stringify(node.toJSON()),
          text: null,
        });
        return;
      }
      const markup = { type: node.type.name, attrs: node.attrs, marks: node.marks };
      list.push({
        node,
        pos,
        size: 1,
        key: `<${JSON.stringify(markup)}`,
        text: null,
      });
      walk(node, pos + 1);
      const end = pos + node.nodeSize - 1;
      list.push({ node, pos: end, size: 1, key: `>${node.type.name}`, text: null });
    });
  };
  walk(doc, 0);
  return list;
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
      // compared in pairs, in order, as before groups; the first pair takes this turn.
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

/// Textblocks of the old document (`olds`) that became `news` in the new one: one pair, or
/// more blocks on a side where others split or joined them.
interface Group {
  olds: Piece[];
  news: Piece[];
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
function grouped(pairs: [Piece, Piece][], blocksA: Piece[], blocksB: Piece[]): Group[] {
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

function blockText(piece: Piece): string {
  return (piece.text ??= piece.node.textContent);
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

/// The ranges that turn the pieces `stretchA` (from `posA`) into `stretchB`, read as one
/// stream: each textblock as its start token, its characters and inline nodes,
/// and its end token; each other piece whole. For a group of split or joined blocks, where
/// characters may match across block boundaries. Null past the time, past `maxStreamItems`
/// positions, or past the edit limit: the caller compares otherwise.
function compareStream(
  stretchA: Piece[],
  posA: number,
  stretchB: Piece[],
  deadline: number,
): number[] | null {
  // Checked before the streams are built: they take a key per character.
  const items =
    sizeOf(stretchA, 0, stretchA.length, pieceSize) +
    sizeOf(stretchB, 0, stretchB.length, pieceSize);
  const left = deadline - performance.now();
  if (items > maxStreamItems || left <= 0) return null;
  const a = stream(stretchA);
  const b = stream(stretchB);
  const changes = diffArrays(a.keys, b.keys, { maxEditLength: maxCharEdits, timeout: left });
  if (!changes) return null;
  const ranges: number[] = [];
  let pos = posA;
  forEachRun(changes, (common, fromA, removed, fromB, added) => {
    const oldSize = sizeOf(a.sizes, fromA, removed, itself);
    if (!common) ranges.push(pos, oldSize, sizeOf(b.sizes, fromB, added, itself));
    pos += oldSize;
  });
  return ranges;
}

/// A stretch of pieces as `compareStream` reads it: a key per item (equal for items that are
/// the same, marks left out of inline content) and the positions it takes.
function stream(stretch: Piece[]): { keys: string[]; sizes: number[] } {
  const keys: string[] = [];
  const sizes: number[] = [];
  for (const piece of stretch) {
    const node = piece.node;
    if (!node.isTextblock) {
      keys.push(piece.key);
      sizes.push(piece.size);
      continue;
    }
    // Keys of one character are characters; every other key is longer.
    keys.push(`<${JSON.stringify({ type: node.type.name, attrs: node.attrs, marks: node.marks })}`);
    sizes.push(1);
    node.forEach((child) => {
      if (child.isText) {
        const text = child.text!;
        for (let i = 0; i < text.length; i++) {
          keys.push(text[i]!);
          sizes.push(1);
        }
      } else {
        keys.push(`@${JSON.stringify({ type: child.type.name, attrs: child.attrs })}`);
        sizes.push(child.nodeSize);
      }
    });
    keys.push(`>${node.type.name}`);
    sizes.push(1);
  }
  return { keys, sizes };
}

function isTextblock(piece: Piece): boolean {
  return piece.node.isTextblock;
}

/// The pairs of `olds` and `news` (textblocks, each in document order) that keep their order
/// and are as alike as possible in total: a longest common subsequence weighted by
/// `similarity`, by dynamic programming. Paired in order when there are too many.
function align(olds: Piece[], news: Piece[]): [Piece, Piece][] {
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
function inOrder(olds: Piece[], news: Piece[]): [Piece, Piece][] {
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
function likeness(a: string, b: string): number {
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

/// One item of a textblock's content: a character of a text node (`char`), or an inline node.
interface InlineItem {
  char: string | null;
  node: Node;
}

/// Appends to `ranges` the replacements that turn the content of textblock `a` into that of
/// `b`, `start` being the position of `a`'s content.
function compareText(a: Node, b: Node, start: number, deadline: number, ranges: number[]): void {
  if (a.content.eq(b.content)) return;
  const left = deadline - performance.now();
  if (left <= 0) return wholeStretch(a, b, start, ranges);
  const itemsA = inlineItems(a);
  const itemsB = inlineItems(b);
  const changes = diffArrays(itemsA, itemsB, {
    comparator: sameItem,
    maxEditLength: maxCharEdits,
    timeout: left,
  });
  if (!changes) return wholeStretch(a, b, start, ranges);
  let pos = start;
  forEachRun(changes, (common, fromA, removed, fromB, added) => {
    const oldSize = sizeOf(itemsA, fromA, removed, itemSize);
    if (!common) ranges.push(pos, oldSize, sizeOf(itemsB, fromB, added, itemSize));
    pos += oldSize;
  });
}

/// Calls `visit` for each run of jsdiff's changes, with where it starts in the old and the new
/// list and how many items it takes from each: a run of common items (`common`, as many on
/// both sides), or a removal and an addition next to each other, as one run.
function forEachRun<T>(
  changes: ChangeObject<T[]>[],
  visit: (common: boolean, fromA: number, removed: number, fromB: number, added: number) => void,
): void {
  let fromA = 0;
  let fromB = 0;
  for (let k = 0; k < changes.length; k++) {
    const change = changes[k]!;
    const count = change.value.length;
    if (!change.added && !change.removed) {
      visit(true, fromA, count, fromB, count);
      fromA += count;
      fromB += count;
      continue;
    }
    let removed = change.removed ? count : 0;
    let added = change.added ? count : 0;
    const next = changes[k + 1];
    if (next && (next.added || next.removed) && next.added !== change.added) {
      if (next.removed) removed = next.value.length;
      else added = next.value.length;
      k++;
    }
    visit(false, fromA, removed, fromB, added);
    fromA += removed;
    fromB += added;
  }
}

/// The stretch from the first to the last position where the contents of `a` and `b` differ,
/// as one replacement.
function wholeStretch(a: Node, b: Node, start: number, ranges: number[]): void {
  const from = a.content.findDiffStart(b.content);
  if (from === null) return;
  let { a: endA, b: endB } = a.content.findDiffEnd(b.content)!;
  // Searching from both ends can overlap inside a repeated run ("ab" → "abab" matches "ab" at
  // both ends): the ends then lie before the start, and the change is the difference in length
  // right after it.
  const overlap = from - Math.min(endA, endB);
  if (overlap > 0) {
    endA += overlap;
    endB += overlap;
  }
  ranges.push(start + from, endA - from, endB - from);
}

function inlineItems(node: Node): InlineItem[] {
  const items: InlineItem[] = [];
  node.forEach((child) => {
    if (child.isText) {
      const text = child.text!;
      for (let i = 0; i < text.length; i++) items.push({ char: text[i]!, node: child });
    } else {
      items.push({ char: null, node: child });
    }
  });
  return items;
}

/// Marks are left out: adding or removing one moves no position (its step's map is empty), so
/// text typed inside a word others made bold keeps its place, as a rebase over their step would
/// keep it.
function sameItem(x: InlineItem, y: InlineItem): boolean {
  if (x.char !== y.char) return false;
  if (x.char !== null) return true;
  return x.node.type === y.node.type && x.node.sameMarkup(y.node.mark(x.node.marks));
}

function itemSize(item: InlineItem): number {
  return item.char === null ? item.node.nodeSize : 1;
}

function itself(size: number): number {
  return size;
}

function pieceSize(piece: Piece): number {
  return piece.size;
}

/// The size of `count` items of `list` from `from`.
function sizeOf<T>(
  list: readonly T[],
  from: number,
  count: number,
  size: (item: T) => number,
): number {
  let total = 0;
  for (let i = from; i < from + count; i++) total += size(list[i]!);
  return total;
}
