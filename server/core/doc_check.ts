import type { Attrs, Mark, Node } from 'prosemirror-model';

/// The size and height of a subtree: `bytes` estimates the length of its JSON
/// (`JSON.stringify(node.toJSON())`), `height` is how many levels of nodes lie below it (0 for
/// a leaf).
export interface NodeStats {
  bytes: number;
  height: number;
}

/// What a change did to a document, as found by `checkChanged`.
export interface DocChange {
  /// The document's estimated JSON size after the change minus before it.
  bytesDelta: number;
  /// The deepest level any node the change made reaches (the top node is level 0); nodes it
  /// did not touch are not counted, they were within limits before.
  depth: number;
}

// Nodes are immutable and a step shares every untouched subtree with the document before it,
// so the stats of a container, once computed, hold for as long as the node lives. Text nodes
// and small textblocks are cheap to measure again and are not cached, to keep the maps small.
const statsCache = new WeakMap<Node, NodeStats>();
const attrsCache = new WeakMap<Attrs, number>();
const markCache = new WeakMap<Mark, number>();

/// The stats of `node`, cached for containers. Recurses into children it has not measured
/// before: callers only pass nodes whose depth is already bounded (parsed from JSON whose
/// depth was checked, or built by steps from such nodes).
export function nodeStats(node: Node): NodeStats {
  if (node.isText) {
    return { bytes: 26 + jsonStringLength(node.text!) + marksBytes(node.marks), height: 0 };
  }
  const cached = statsCache.get(node);
  if (cached) return cached;
  // {"type":"…"} plus attrs and marks, then ,"content":[…] with a comma per child.
  let bytes = 11 + node.type.name.length + attrsBytes(node.attrs) + marksBytes(node.marks);
  let height = 0;
  const count = node.childCount;
  if (count > 0) {
    bytes += 12;
    for (let i = 0; i < count; i++) {
      const child = nodeStats(node.child(i));
      bytes += child.bytes + 1;
      if (child.height + 1 > height) height = child.height + 1;
    }
  }
  const stats = { bytes, height };
  if (count > 8 || !node.isTextblock) statsCache.set(node, stats);
  return stats;
}

// Characters JSON escapes: control characters take six bytes (`\u0001`), quotes and
// backslashes two. Text made of them would otherwise serialise to six times its estimate.
const escaped = /[\u0000-\u001f"\\]/g;
const anyEscaped = /[\u0000-\u001f"\\]/;

/// The length of `text` inside a JSON string, escapes included (close enough: a control
/// character is counted as six bytes, though \n and \t take two).
function jsonStringLength(text: string): number {
  if (!anyEscaped.test(text)) return text.length;
  let extra = 0;
  escaped.lastIndex = 0;
  let match: RegExpExecArray | null;
  while ((match = escaped.exec(text)) !== null)
    extra += match[0] === '"' || match[0] === '\\' ? 1 : 5;
  return text.length + extra;
}

function attrsBytes(attrs: Attrs): number {
  let bytes = attrsCache.get(attrs);
  if (bytes === undefined) {
    // Attribute objects are shared by every node with the defaults, and values are bounded
    // by the attribute limit: stringifying each distinct object once is cheap.
    let empty = true;
    for (const _ in attrs) {
      empty = false;
      break;
    }
    bytes = empty ? 0 : 9 + JSON.stringify(attrs).length;
    attrsCache.set(attrs, bytes);
  }
  return bytes;
}

function marksBytes(marks: readonly Mark[]): number {
  if (marks.length === 0) return 0;
  let bytes = 10;
  for (let i = 0; i < marks.length; i++) {
    const mark = marks[i]!;
    let size = markCache.get(mark);
    if (size === undefined) {
      size = 12 + mark.type.name.length + attrsBytes(mark.attrs);
      markCache.set(mark, size);
    }
    bytes += size;
  }
  return bytes;
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
