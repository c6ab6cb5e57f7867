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

/// Past this many inserted and deleted items at one level, the comparison gives up on detail
/// for that level and takes the whole stretch from the first to the last difference as one
/// change: Myers's diff costs O(N·D), and a reload must stay quick in a browser tab.
const maxEditLength = 2000;

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
/// of the same markup), `start` being the position of `a`'s content.
function compareContent(a: Node, b: Node, start: number, ranges: number[]): void {
  if (a.content.eq(b.content)) return;
  if (a.inlineContent) {
    const changes = diffArrays(inlineItems(a), inlineItems(b), {
      comparator: sameItem,
      maxEditLength,
    });
    if (changes) walk(changes, start, itemSize, null, ranges);
    else wholeStretch(a, b, start, ranges);
    return;
  }
  const changes = diffArrays(a.children.slice(), b.children.slice(), {
    comparator: (x: Node, y: Node) => x.eq(y),
    maxEditLength,
  });
  if (changes) walk(changes, start, nodeSize, compareContent, ranges);
  else wholeStretch(a, b, start, ranges);
}

/// Turns jsdiff's changes into ranges. With `inside` (blocks), removed blocks next to added
/// ones may be blocks edited in place (`pairUp`), which `inside` compares further.
function walk<T>(
  changes: ChangeObject<T[]>[],
  start: number,
  size: (item: T) => number,
  inside: ((a: Node, b: Node, start: number, ranges: number[]) => void) | null,
  ranges: number[],
): void {
  let pos = start;
  for (let k = 0; k < changes.length; k++) {
    const change = changes[k]!;
    if (!change.added && !change.removed) {
      pos += sum(change.value, size);
      continue;
    }
    let removed: T[] = [];
    let added: T[] = [];
    const next = changes[k + 1];
    if (next && (next.added || next.removed) && next.added !== change.added) {
      removed = change.removed ? change.value : next.value;
      added = change.added ? change.value : next.value;
      k++;
    } else if (change.removed) {
      removed = change.value;
    } else {
      added = change.value;
    }
    if (inside) {
      pairUp(removed as Node[], added as Node[], pos, inside, ranges);
    } else {
      ranges.push(pos, sum(removed, size), sum(added, size));
    }
    pos += sum(removed, size);
  }
}

/// Blocks removed and added at `pos`: those at the start and at the end of both runs that are
/// of the same markup are taken as edited in place and compared inside (a paragraph typed into,
/// a list item changed, with new blocks before or after it); the rest, between them, as
/// replaced.
function pairUp(
  removed: Node[],
  added: Node[],
  pos: number,
  inside: (a: Node, b: Node, start: number, ranges: number[]) => void,
  ranges: number[],
): void {
  const both = Math.min(removed.length, added.length);
  let lead = 0;
  while (lead < both && pairable(removed[lead]!, added[lead]!)) lead++;
  let trail = 0;
  while (
    trail < both - lead &&
    pairable(removed[removed.length - 1 - trail]!, added[added.length - 1 - trail]!)
  ) {
    trail++;
  }
  let at = pos;
  for (let i = 0; i < lead; i++) {
    inside(removed[i]!, added[i]!, at + 1, ranges);
    at += removed[i]!.nodeSize;
  }
  const oldSize = sum(removed.slice(lead, removed.length - trail), nodeSize);
  const newSize = sum(added.slice(lead, added.length - trail), nodeSize);
  if (oldSize > 0 || newSize > 0) ranges.push(at, oldSize, newSize);
  at += oldSize;
  for (let i = 0; i < trail; i++) {
    const j = removed.length - trail + i;
    inside(removed[j]!, added[added.length - trail + i]!, at + 1, ranges);
    at += removed[j]!.nodeSize;
  }
}

/// True when `b` may be `a` edited inside: nodes with content, of the same type, attributes
/// and marks.
function pairable(a: Node, b: Node): boolean {
  return !a.isLeaf && !a.isText && a.sameMarkup(b);
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

function sum<T>(items: readonly T[], size: (item: T) => number): number {
  let total = 0;
  for (let i = 0; i < items.length; i++) total += size(items[i]!);
  return total;
}
