import { diffArrays, type ChangeObject } from 'diff';
import { Mark, type Node } from 'prosemirror-model';
import { StepMap } from 'prosemirror-transform';

// When the server answers a catch-up with a whole document (the steps since our version are no
// longer held), the client still has to move its unconfirmed steps and its selection from the
// document it knew to the new one. Nothing says how one became the other, so the change is
// reconstructed by comparing the two: blocks are matched by equality, a block edited in place
// (or wrapped in another) is found and compared inside, and a textblock's content is compared
// position by position (characters with their marks, inline nodes), each level with jsdiff's
// Myers diff. What comes out is one map
// whose ranges are the places that differ: a position between them keeps its place however
// much others added or removed before it, and one inside them is taken as deleted.

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

/// One item of a textblock's content: a character of a text node (`char`, with that node for
/// its marks), or an inline node.
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

/// A node among blocks that were added, where a removed block may have gone: one of them, or
/// a node inside one (a paragraph that others wrapped in a list is found there).
interface Candidate {
  node: Node;
  /// Its position relative to the start of the added blocks.
  offset: number;
  text: string | null;
}

/// At most this many candidates are scored for one removed block.
const maxCandidates = 200;

/// Blocks removed and added at `pos`. Each removed block is paired, in order, with an added
/// node after the last one paired: a block, or a node inside one (a paragraph wrapped in a list
/// or a quote), of the same markup, or failing that of the same kind (a heading made a
/// paragraph), the one whose text begins and ends most like its own. Paired nodes are the same
/// block edited in place and are compared inside; what lies between pairs was deleted or
/// inserted. Returns the position after the removed blocks.
function pairUp(removed: Node[], added: Node[], pos: number, ranges: number[]): number {
  const candidates = candidatesIn(added);
  let total = 0;
  for (const block of added) total += block.nodeSize;
  // The unpaired stretch since the last pair: `oldSize` from `from` in the old document,
  // replaced by what lies from `newFrom` up to the next pair in the new one.
  let from = pos;
  let oldSize = 0;
  let newFrom = 0;
  let next = 0;
  for (const block of removed) {
    const match = block.isLeaf ? -1 : bestMatch(block, candidates, next);
    if (match < 0) {
      oldSize += block.nodeSize;
      pos += block.nodeSize;
      continue;
    }
    const { node: other, offset } = candidates[match]!;
    if (oldSize > 0 || offset > newFrom) ranges.push(from, oldSize, offset - newFrom);
    // Another type or attributes: its start and end tokens are replaced, as a change of block
    // type maps them in ProseMirror; what is inside keeps its positions.
    const retyped = !block.sameMarkup(other);
    if (retyped) ranges.push(pos, 1, 1);
    compareContent(block, other, pos + 1, ranges);
    if (retyped) ranges.push(pos + block.nodeSize - 1, 1, 1);
    pos += block.nodeSize;
    from = pos;
    oldSize = 0;
    newFrom = offset + other.nodeSize;
    // Past the paired node, and past what is inside it.
    next = match + 1;
    while (next < candidates.length && candidates[next]!.offset < newFrom) next++;
  }
  if (oldSize > 0 || total > newFrom) ranges.push(from, oldSize, total - newFrom);
  return pos;
}

/// The added blocks and every node with content inside them, in document order.
function candidatesIn(added: Node[]): Candidate[] {
  const candidates: Candidate[] = [];
  let offset = 0;
  for (const block of added) {
    const start = offset;
    candidates.push({ node: block, offset: start, text: null });
    if (!block.isTextblock && !block.isLeaf) {
      block.descendants((node, at) => {
        if (node.isLeaf || node.isInline) return false;
        candidates.push({ node, offset: start + 1 + at, text: null });
        return !node.isTextblock;
      });
    }
    offset += block.nodeSize;
  }
  return candidates;
}

/// The index of the candidate from `from` that `block` is best paired with, or -1.
function bestMatch(block: Node, candidates: Candidate[], from: number): number {
  const end = Math.min(candidates.length, from + maxCandidates);
  const text = block.textContent;
  for (const accept of [
    (node: Node) => block.sameMarkup(node),
    (node: Node) => !node.isLeaf && node.isTextblock === block.isTextblock,
  ]) {
    let best = -1;
    let bestScore = -1;
    for (let i = from; i < end; i++) {
      const candidate = candidates[i]!;
      if (!accept(candidate.node)) continue;
      candidate.text ??= candidate.node.textContent;
      const score = likeness(text, candidate.text);
      if (score > bestScore) {
        best = i;
        bestScore = score;
        if (score === text.length && candidate.text.length === text.length) break;
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

/// How much of `a` `b` shares at its start and at its end.
function likeness(a: string, b: string): number {
  const most = Math.min(a.length, b.length);
  let start = 0;
  while (start < most && a.charCodeAt(start) === b.charCodeAt(start)) start++;
  let end = 0;
  while (
    end < most - start &&
    a.charCodeAt(a.length - 1 - end) === b.charCodeAt(b.length - 1 - end)
  )
    end++;
  return start + end;
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

function sameItem(x: InlineItem, y: InlineItem): boolean {
  if (x.char !== y.char) return false;
  return x.char === null ? x.node.eq(y.node) : Mark.sameSet(x.node.marks, y.node.marks);
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
