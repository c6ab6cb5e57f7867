import { diffArrays, type ChangeObject } from 'diff';
import type { Node } from 'prosemirror-model';
import { StepMap } from 'prosemirror-transform';

// When the server answers a catch-up with a whole document (the steps since our version are no
// longer held), the client still has to move its unconfirmed steps and its selection from the
// document it knew to the new one. Nothing says how one became the other, so the change is
// reconstructed by comparing the two, level by level, with jsdiff's Myers diff: blocks equal on
// both sides are matched first; among those that differ, the blocks most alike by their text
// are paired (also with nodes inside others, for a paragraph wrapped in a list or lifted out of
// one) and compared inside; a textblock's content is compared position by position
// (characters and inline nodes; marks, which move no position, left out). What comes out is
// one map whose ranges are the places that differ: a position between them keeps its place
// however much others added or removed elsewhere, and one inside them is taken as deleted.

/// Past this many inserted and deleted items at one level, or this many milliseconds, the
/// comparison gives up on detail for that level and takes the whole stretch from the first to
/// the last difference as one change: Myers's diff costs O(N·D), and a reload must stay quick
/// in a browser tab.
const limits = { maxEditLength: 1000, timeout: 50 };

/// The change from `a` to `b` as the map of the replacements that turn one into the other, or
/// null when the two are equal. Positions are those of `a`'s and `b`'s content (a document's).
export function differenceMap(a: Node, b: Node): StepMap | null {
  const ranges: number[] = [];
  compareContent(a, b, 0, ranges);
  return ranges.length === 0 ? null : new StepMap(ranges);
}

/// One item of a textblock's content: a character of a text node (`char`), or an inline node.
interface InlineItem {
  char: string | null;
  node: Node;
}

/// Appends to `ranges` the replacements that turn the content of `a` into that of `b` (nodes
/// with content, both textblocks or neither), `start` being the position of `a`'s content.
function compareContent(a: Node, b: Node, start: number, ranges: number[]): void {
  if (a.content.eq(b.content)) return;
  if (a.inlineContent) {
    const itemsA = inlineItems(a);
    const itemsB = inlineItems(b);
    const changes = diffArrays(itemsA, itemsB, { comparator: sameItem, ...limits });
    if (!changes) return wholeStretch(a, b, start, ranges);
    let pos = start;
    forEachRun(changes, (common, fromA, removed, fromB, added) => {
      const oldSize = sizeOf(itemsA, fromA, removed, itemSize);
      if (!common) ranges.push(pos, oldSize, sizeOf(itemsB, fromB, added, itemSize));
      pos += oldSize;
    });
    return;
  }
  // Blocks are compared by their JSON, made once each, rather than by `Node.eq` at every probe
  // of the diff.
  const changes = diffArrays(a.children.map(blockKey), b.children.map(blockKey), limits);
  if (!changes) return wholeStretch(a, b, start, ranges);
  let pos = start;
  forEachRun(changes, (common, fromA, removed, fromB, added) => {
    if (common) {
      pos += sizeOf(a.children, fromA, removed, nodeSize);
    } else {
      const gone = a.children.slice(fromA, fromA + removed);
      pos = pairUp(gone, b.children.slice(fromB, fromB + added), pos, ranges);
    }
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

/// A block of a run of removed or added blocks, or a node inside one: where a block may have
/// gone (a paragraph that others wrapped in a list is found inside it) or come from (one
/// lifted out of a list).
interface Candidate {
  node: Node;
  /// Where it starts and ends, relative to the start of the run.
  offset: number;
  end: number;
  /// Its text, read when first compared.
  text: string | null;
}

/// Past this many candidate pairs in one run, nodes inside the blocks are not looked at; past
/// it again with the blocks alone, the run is taken as one replacement.
const maxPairs = 250_000;

/// Blocks removed and added at `pos` (a run of jsdiff's block diff). They are aligned in
/// order, pairing blocks of the same kind (a textblock with a textblock) whose text is most
/// alike (`similarity`), first among the blocks themselves, then, within the stretches left
/// unpaired, with nodes inside them, so that a paragraph others wrapped in a list or lifted
/// out of one is followed. Paired nodes are the same block edited and are compared inside;
/// what lies between pairs was deleted or inserted. Returns the position after the removed
/// blocks.
function pairUp(removed: Node[], added: Node[], pos: number, ranges: number[]): number {
  const olds = topLevel(removed);
  const news = topLevel(added);
  const oldTotal = olds.length > 0 ? olds[olds.length - 1]!.end : 0;
  const newTotal = news.length > 0 ? news[news.length - 1]!.end : 0;
  const pairs: [Candidate, Candidate][] = [];
  let lastOld = 0;
  let lastNew = 0;
  // Nested candidates in the stretch before each pair of blocks, and after the last.
  const within = (oldEnd: number, newEnd: number) => {
    const inner = align(nestedIn(olds, lastOld, oldEnd), nestedIn(news, lastNew, newEnd));
    for (const pair of inner) pairs.push(pair);
  };
  for (const [old, added] of align(olds, news)) {
    within(old.offset, added.offset);
    pairs.push([old, added]);
    lastOld = old.end;
    lastNew = added.end;
  }
  within(oldTotal, newTotal);

  let fromOld = 0;
  let fromNew = 0;
  for (const [old, added] of pairs) {
    if (old.offset > fromOld || added.offset > fromNew)
      ranges.push(pos + fromOld, old.offset - fromOld, added.offset - fromNew);
    // Another type or attributes: its start and end tokens are replaced, as a change of block
    // type maps them in ProseMirror; what is inside keeps its positions.
    const retyped = !old.node.sameMarkup(added.node);
    if (retyped) ranges.push(pos + old.offset, 1, 1);
    compareContent(old.node, added.node, pos + old.offset + 1, ranges);
    if (retyped) ranges.push(pos + old.end - 1, 1, 1);
    fromOld = old.end;
    fromNew = added.end;
  }
  if (oldTotal > fromOld || newTotal > fromNew)
    ranges.push(pos + fromOld, oldTotal - fromOld, newTotal - fromNew);
  return pos + oldTotal;
}

function topLevel(blocks: Node[]): Candidate[] {
  const candidates: Candidate[] = [];
  let offset = 0;
  for (const node of blocks) {
    candidates.push({ node, offset, end: offset + node.nodeSize, text: null });
    offset += node.nodeSize;
  }
  return candidates;
}

/// The blocks of `blocks` between `from` and `to` (offsets of the run) and every node with
/// content inside them, in document order.
function nestedIn(blocks: Candidate[], from: number, to: number): Candidate[] {
  const candidates: Candidate[] = [];
  for (const block of blocks) {
    if (block.offset < from || block.end > to) continue;
    candidates.push(block);
    if (block.node.isTextblock || block.node.isLeaf) continue;
    block.node.descendants((node, at) => {
      if (node.isLeaf || node.isInline) return false;
      const offset = block.offset + 1 + at;
      candidates.push({ node, offset, end: offset + node.nodeSize, text: null });
      return !node.isTextblock;
    });
  }
  return candidates;
}

/// The pairs of `olds` and `news` (each in document order, nodes inside others after them)
/// that keep their order, do not nest, and are as alike as possible in total: a longest common
/// subsequence weighted by `similarity`, by dynamic programming.
function align(olds: Candidate[], news: Candidate[]): [Candidate, Candidate][] {
  const n = olds.length;
  const m = news.length;
  if (n === 0 || m === 0 || (n + 1) * (m + 1) > maxPairs) return [];
  // The first candidate after each one and everything inside it.
  const skipOld = after(olds);
  const skipNew = after(news);
  const width = m + 1;
  // best[i * width + j]: the best total for olds from i and news from j.
  const best = new Float64Array((n + 1) * width);
  const score = new Float64Array(n * m);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      let value = Math.max(best[(i + 1) * width + j]!, best[i * width + j + 1]!);
      const like = similarity(olds[i]!, news[j]!);
      score[i * m + j] = like;
      if (like > 0) value = Math.max(value, like + best[skipOld[i]! * width + skipNew[j]!]!);
      best[i * width + j] = value;
    }
  }
  const pairs: [Candidate, Candidate][] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    const value = best[i * width + j]!;
    const like = score[i * m + j]!;
    if (like > 0 && value === like + best[skipOld[i]! * width + skipNew[j]!]!) {
      pairs.push([olds[i]!, news[j]!]);
      i = skipOld[i]!;
      j = skipNew[j]!;
    } else if (value === best[(i + 1) * width + j]!) {
      i++;
    } else {
      j++;
    }
  }
  return pairs;
}

function after(candidates: Candidate[]): Uint32Array {
  const next = new Uint32Array(candidates.length);
  for (let i = 0; i < candidates.length; i++) {
    let k = i + 1;
    while (k < candidates.length && candidates[k]!.offset < candidates[i]!.end) k++;
    next[i] = k;
  }
  return next;
}

/// How alike two nodes are, from 0 (not to be paired) to 1.1: nodes of the same kind (both
/// textblocks or neither), by `likeness` of their text, a little more for the same markup.
/// Any two of the same kind may pair (a paragraph rewritten where it stood is still that
/// paragraph); where there is a choice, the alignment takes the most alike.
function similarity(a: Candidate, b: Candidate): number {
  const x = a.node;
  const y = b.node;
  if (x.isLeaf || y.isLeaf || x.isTextblock !== y.isTextblock) return 0;
  a.text ??= x.textContent;
  b.text ??= y.textContent;
  return Math.max(likeness(a.text, b.text), 0.01) + (x.sameMarkup(y) ? 0.1 : 0);
}

/// The share of the longer text that the two share at their start and at their end; 1 for
/// two empty texts, 0.5 when one is empty (an empty block is weakly like any other).
function likeness(a: string, b: string): number {
  const longest = Math.max(a.length, b.length);
  if (longest === 0) return 1;
  if (a.length === 0 || b.length === 0) return 0.5;
  const most = Math.min(a.length, b.length);
  let start = 0;
  while (start < most && a.charCodeAt(start) === b.charCodeAt(start)) start++;
  let end = 0;
  while (
    end < most - start &&
    a.charCodeAt(a.length - 1 - end) === b.charCodeAt(b.length - 1 - end)
  )
    end++;
  return (start + end) / longest;
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

function blockKey(node: Node): string {
  return JSON.stringify(node.toJSON());
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

function nodeSize(node: Node): number {
  return node.nodeSize;
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
