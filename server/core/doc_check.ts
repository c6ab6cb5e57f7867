import type { Node } from 'prosemirror-model';
import { changedChildren, nodeStats, type ChangedChildren } from '../../schema/doc_size.js';

// Read into locals at once by `walk`, before it recurses.
const scratch: ChangedChildren = { start: 0, endNext: 0, endPrev: 0 };

/// What a change did to a document, as found by `checkChanged`.
export interface DocChange {
  /// The document's estimated JSON size after the change minus before it.
  bytesDelta: number;
  /// The deepest level any node the change made reaches (the top node is level 0); nodes it
  /// did not touch are not counted, they were within limits before.
  depth: number;
}

/// Checks that `next` is valid for the schema, given that `prev` was (the document before a
/// step), and measures what changed. Throws a RangeError, as `Node.check()` does, when `next`
/// is not valid; returns the size delta and the deepest level of the nodes the step made.
///
/// `Node.check()` walks the whole document, which costs about a millisecond per megabyte on
/// every step. A step rebuilds only the nodes on the path to what it changed and shares every
/// other subtree with the previous document, so only nodes that are not identical (`===`) to
/// their counterpart need checking: a container whose attributes and marks are unchanged needs
/// its content expression matched and its changed children checked; anything else gets the
/// full `check()` and is measured whole, which is cheap for the small nodes it lands on (a
/// paragraph, a list item) and for containers whose children were measured before.
export function checkChanged(next: Node, prev: Node): DocChange {
  const change: DocChange = { bytesDelta: 0, depth: 0 };
  walk(next, prev, 0, change);
  return change;
}

function walk(next: Node, prev: Node | null, level: number, change: DocChange): void {
  if (next === prev) return;
  if (
    prev === null ||
    next.type !== prev.type ||
    next.attrs !== prev.attrs ||
    next.marks !== prev.marks ||
    next.isTextblock ||
    next.isLeaf
  ) {
    next.check();
    const stats = nodeStats(next);
    change.bytesDelta += stats.bytes - (prev === null ? 0 : nodeStats(prev).bytes);
    if (level + stats.height > change.depth) change.depth = level + stats.height;
    return;
  }
  if (level > change.depth) change.depth = level;
  const nextCount = next.childCount;
  const prevCount = prev.childCount;
  // Unchanged children are the same objects at the front and at the back: skip them and
  // check what lies between, each against the child it replaced.
  changedChildren(next, prev, scratch);
  const { start, endNext, endPrev } = scratch;
  if (!sameShape(next, prev, start, endNext, endPrev) && !next.type.validContent(next.content)) {
    throw new RangeError(`Invalid content for node ${next.type.name}`);
  }
  // The wrapper's own bytes change only by the commas between children and by `content`
  // appearing or going.
  change.bytesDelta += nextCount - prevCount + (nextCount > 0 ? 12 : 0) - (prevCount > 0 ? 12 : 0);
  for (let i = start; i < endNext; i++) {
    walk(next.child(i), i < endPrev ? prev.child(i) : null, level + 1, change);
  }
  // Children of `prev` with no counterpart were removed.
  for (let i = start + (endNext - start); i < endPrev; i++) {
    change.bytesDelta -= nodeStats(prev.child(i)).bytes;
  }
}

/// Whether `next`'s content is valid because `prev`'s was: the children that changed (`start`
/// to `endNext`, in place of `start` to `endPrev`) keep their count and types, so a content
/// expression, which sees only the sequence of types, matches as before, and each changed
/// child's marks are the ones it had or are allowed here. Typing into one paragraph of a long
/// document is that case at every level above the paragraph; matching the whole expression
/// instead costs a pass over all the document's blocks per step.
function sameShape(
  next: Node,
  prev: Node,
  start: number,
  endNext: number,
  endPrev: number,
): boolean {
  if (endNext !== endPrev) return false;
  for (let i = start; i < endNext; i++) {
    const child = next.child(i);
    const before = prev.child(i);
    if (child.type !== before.type) return false;
    if (child.marks !== before.marks && !next.type.allowsMarks(child.marks)) return false;
  }
  return true;
}
