import type { Attrs, Mark, Node } from 'prosemirror-model';

// How large a document is, as the server measures it against MAX_DOC_BYTES: shared with the
// client, which drops the steps a full document would refuse without sending each one
// (`ErrorAnswer.room` is in these bytes, and means nothing under another measure).

/// The size and height of a subtree: `bytes` estimates the length of its JSON
/// (`JSON.stringify(node.toJSON())`), `height` is how many levels of nodes lie below it (0 for
/// a leaf).
export interface NodeStats {
  bytes: number;
  height: number;
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

/// Where the children of `next` and `prev` differ, for `next` made from `prev` by a step: the
/// children the step did not touch are the same objects at the front and at the back.
export interface ChangedChildren {
  /// The first child that differs (in both).
  start: number;
  /// The end of the differing children of `next`, and of `prev`.
  endNext: number;
  endPrev: number;
}

/// Fills `range` with where `next`'s children differ from `prev`'s, by pointer comparisons
/// from both ends. Filled in place rather than returned: it runs at every level a step
/// rebuilt, for every step, and callers read it into locals before recursing.
export function changedChildren(next: Node, prev: Node, range: ChangedChildren): void {
  const nextCount = next.childCount;
  const prevCount = prev.childCount;
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
  range.start = start;
  range.endNext = endNext;
  range.endPrev = endPrev;
}

const scratch: ChangedChildren = { start: 0, endNext: 0, endPrev: 0 };

/// How many bytes `next`'s estimated JSON (`nodeStats`) is larger than `prev`'s, for `next` made
/// from `prev` by a step: only the nodes the step rebuilt are measured (a step shares every
/// untouched subtree with the document before it), so typing into a long document costs a walk
/// down one path, not a pass over every block.
export function bytesDelta(next: Node, prev: Node): number {
  if (next === prev) return 0;
  if (
    next.type !== prev.type ||
    next.attrs !== prev.attrs ||
    next.marks !== prev.marks ||
    next.isTextblock ||
    next.isLeaf
  ) {
    return nodeStats(next).bytes - nodeStats(prev).bytes;
  }
  const nextCount = next.childCount;
  const prevCount = prev.childCount;
  changedChildren(next, prev, scratch);
  const { start, endNext, endPrev } = scratch;
  // The wrapper's own bytes change only by the commas between children and by `content`
  // appearing or going (as `nodeStats` counts them).
  let delta = nextCount - prevCount + (nextCount > 0 ? 12 : 0) - (prevCount > 0 ? 12 : 0);
  for (let i = start; i < endNext; i++) {
    delta +=
      i < endPrev ? bytesDelta(next.child(i), prev.child(i)) : nodeStats(next.child(i)).bytes;
  }
  for (let i = endNext; i < endPrev; i++) delta -= nodeStats(prev.child(i)).bytes;
  return delta;
}
