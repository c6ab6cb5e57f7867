import { diffArrays, type ChangeObject } from 'diff';
import type { Node } from 'prosemirror-model';
import { pieceSize, sizeOf, type Piece } from './pieces.js';

// Comparing content item by item with jsdiff's Myers diff: one textblock's characters and
// inline nodes, or a group of split or joined blocks read as one stream.

/// The most inserted and deleted characters one textblock's comparison looks at in detail.
const maxCharEdits = 1000;

/// The most positions a group compared as one stream may hold (both sides): the stream takes
/// a key per character.
const maxStreamItems = 200_000;

/// Appends to `ranges` the replacements that turn the content of textblock `a` into that of
/// `b`, `start` being the position of `a`'s content.
export function compareText(
  a: Node,
  b: Node,
  start: number,
  deadline: number,
  ranges: number[],
): void {
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

/// The ranges that turn the pieces `stretchA` (from `posA`) into `stretchB`, read as one
/// stream: each textblock as its start token, its characters and inline nodes,
/// and its end token; each other piece whole. For a group of split or joined blocks, where
/// characters may match across block boundaries. Null past the time, past `maxStreamItems`
/// positions, or past the edit limit: the caller compares otherwise.
export function compareStream(
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

/// Calls `visit` for each run of jsdiff's changes, with where it starts in the old and the new
/// list and how many items it takes from each: a run of common items (`common`, as many on
/// both sides), or a removal and an addition next to each other, as one run.
export function forEachRun<T>(
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
export function wholeStretch(a: Node, b: Node, start: number, ranges: number[]): void {
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

/// One item of a textblock's content: a character of a text node (`char`), or an inline node.
interface InlineItem {
  char: string | null;
  node: Node;
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
