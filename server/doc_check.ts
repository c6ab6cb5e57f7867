import type { Node } from 'prosemirror-model';

/// Checks that `next` is valid for the schema, given that `prev` was (the document before a
/// batch). Throws a RangeError, as `Node.check()` does, when it is not.
///
/// `Node.check()` walks the whole document, which costs about a millisecond per megabyte on
/// every batch. A step rebuilds only the nodes on the path to what it changed and shares every
/// other subtree with the previous document, so only nodes that are not identical (`===`) to
/// their counterpart need checking: a container whose attributes and marks are unchanged needs
/// its content expression matched and its changed children checked; anything else gets the
/// full `check()`, which is cheap for the small nodes it lands on (a paragraph, a list item).
export function checkChanged(next: Node, prev: Node | null): void {
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
    return;
  }
  if (!next.type.validContent(next.content)) {
    throw new RangeError(`Invalid content for node ${next.type.name}`);
  }
  const nextCount = next.childCount;
  const prevCount = prev.childCount;
  // Unchanged children are the same objects at the front and at the back: skip them with
  // pointer comparisons and check what lies between, each against the child it replaced.
  let start = 0;
  while (start < nextCount && start < prevCount && next.child(start) === prev.child(start)) start++;
  let endNext = nextCount;
  let endPrev = prevCount;
  while (
    endNext > start &&
    endPrev > start &&
    next.child(endNext - 1) === prev.child(endPrev - 1)
  ) {
    endNext--;
    endPrev--;
  }
  for (let i = start; i < endNext; i++) {
    const counterpart = start + (i - start) < endPrev ? prev.child(start + (i - start)) : null;
    checkChanged(next.child(i), counterpart);
  }
}
