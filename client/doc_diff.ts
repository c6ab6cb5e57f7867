import { diffArrays, type ChangeObject } from 'diff';
import { Mark, type Node } from 'prosemirror-model';
import { StepMap } from 'prosemirror-transform';

// When the server answers a catch-up with a whole document (the steps since our version are no
// longer held), the client still has to move its unconfirmed steps and its selection from the
// document it knew to the new one. Nothing says how one became the other, so the change is
// reconstructed by comparing the two: blocks are matched by equality, a block edited in place is
// compared inside, and a textblock's content is compared position by position (characters with
// their marks, inline nodes), each level with jsdiff's Myers diff. What comes out is one map
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

/// Blocks removed and added at `pos`. Each removed block is paired, in order, with the next
/// added one of the same markup, or failing that the next of the same kind (a textblock for a
/// textblock: a heading made a paragraph), as the same block edited in place, and compared
/// inside (a paragraph typed into, a list item changed, with new blocks around it); the others
/// are taken as deleted or inserted. Returns the position after the removed blocks.
function pairUp(removed: Node[], added: Node[], pos: number, ranges: number[]): number {
  // The unpaired blocks since the last pair: one replacement from `from`.
  let from = pos;
  let oldSize = 0;
  let newSize = 0;
  let next = 0;
  for (const block of removed) {
    let match = -1;
    if (!block.isLeaf) {
      match = indexFrom(added, next, (other) => block.sameMarkup(other));
      if (match < 0) match = indexFrom(added, next, (other) => pairable(block, other));
    }
    if (match < 0) {
      oldSize += block.nodeSize;
      pos += block.nodeSize;
      continue;
    }
    for (let i = next; i < match; i++) newSize += added[i]!.nodeSize;
    if (oldSize > 0 || newSize > 0) ranges.push(from, oldSize, newSize);
    const other = added[match]!;
    // Another type or attributes: its start and end tokens are replaced, as a change of block
    // type maps them in ProseMirror; what is inside keeps its positions.
    const retyped = !block.sameMarkup(other);
    if (retyped) ranges.push(pos, 1, 1);
    compareContent(block, other, pos + 1, ranges);
    if (retyped) ranges.push(pos + block.nodeSize - 1, 1, 1);
    pos += block.nodeSize;
    next = match + 1;
    from = pos;
    oldSize = 0;
    newSize = 0;
  }
  for (let i = next; i < added.length; i++) newSize += added[i]!.nodeSize;
  if (oldSize > 0 || newSize > 0) ranges.push(from, oldSize, newSize);
  return pos;
}

/// The index of the first node of `list` from `from` that `test` accepts, or -1.
function indexFrom(list: readonly Node[], from: number, test: (node: Node) => boolean): number {
  for (let i = from; i < list.length; i++) if (test(list[i]!)) return i;
  return -1;
}

/// True when `b` may be `a` edited inside, perhaps with another type: nodes with content,
/// both textblocks or neither.
function pairable(a: Node, b: Node): boolean {
  return !a.isLeaf && !b.isLeaf && a.isTextblock === b.isTextblock;
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
