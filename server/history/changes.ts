import type { Fragment, Mark, Node } from 'prosemirror-model';
import { ChangeSet, type Change, type TokenEncoder } from 'prosemirror-changeset';
import type { StepMap } from 'prosemirror-transform';
import type { AttributedChange, HistoryStep, Span } from './types.js';

// The attributed difference between two versions: prosemirror-changeset over the steps' maps
// for what was inserted and deleted, and a second pass for formatting (mark and attribute
// steps), whose maps are empty, so the change set cannot see them.

/// Who made a step, as each span of a change carries it.
interface Author {
  user: string | null;
  clientID: string;
  at: number;
}

/// A formatting step's reach: the range it changed, in the coordinates of the document after
/// the step until `toB` is mapped forward to the newest document, and its author.
interface Formatting {
  fromB: number;
  toB: number;
  author: Author;
}

/// Returns the changes that turn `base` (the document at the older version) into the document
/// after `steps`, in document order, every inserted and deleted span attributed to the step
/// that made it: adjacent text by the same user and client is one span (its `at` the latest),
/// text by different authors stays apart. Formatting (marks, node attributes) shows as a
/// change whose deleted and inserted spans are the same length and name the step that last
/// formatted it; text typed in the range keeps its typist. The result is plain JSON.
/// Throws a RangeError when a step does not apply: the history handed in is corrupt.
export function attributedChanges(base: Node, steps: readonly HistoryStep[]): AttributedChange[] {
  const maps: StepMap[] = [];
  const authors: Author[] = [];
  const formatting: Formatting[] = [];
  let doc = base;
  for (let i = 0; i < steps.length; i++) {
    const entry = steps[i]!;
    const result = entry.step.apply(doc);
    if (!result.doc) throw new RangeError(`history step ${i} does not apply: ${result.failed}`);
    const map = entry.step.getMap();
    const author: Author = { user: entry.user, clientID: entry.clientID, at: entry.at };
    if (isEmpty(map)) {
      // A mark or attribute step: no position moves, so what it touched is found by comparing
      // the documents, which share every untouched node (findDiffStart skips them by identity).
      const start = doc.content.findDiffStart(result.doc.content);
      if (start !== null) {
        const end = doc.content.findDiffEnd(result.doc.content)!;
        formatting.push({ fromB: start, toB: Math.max(start, end.b), author });
      }
    } else {
      for (let f = 0; f < formatting.length; f++) {
        const range = formatting[f]!;
        range.fromB = map.map(range.fromB, 1);
        range.toB = Math.max(range.fromB, map.map(range.toB, -1));
      }
      maps.push(map);
      authors.push(author);
    }
    doc = result.doc;
  }
  const set = ChangeSet.create<Author | null>(base, combineAuthors, encoder).addSteps(
    doc,
    maps,
    authors,
  );
  const text = set.changes.map(toJSON);
  if (formatting.length === 0) return text;
  return withFormatting(text, formatting, base, doc);
}

function isEmpty(map: StepMap): boolean {
  let empty = true;
  map.forEach(() => (empty = false));
  return empty;
}

/// Spans join when the same user on the same client made them; the joined span keeps the
/// later time. Different authors never join (changeset's contract: null keeps them apart).
function combineAuthors(a: Author | null, b: Author | null): Author | null {
  if (!a || !b || a.user !== b.user || a.clientID !== b.clientID) return null;
  return a.at >= b.at ? a : b;
}

function toJSON(change: Change<Author | null>): AttributedChange {
  return {
    fromA: change.fromA,
    toA: change.toA,
    fromB: change.fromB,
    toB: change.toB,
    inserted: change.inserted.map((span) => spanJSON(span.length, span.data)),
    deleted: change.deleted.map((span) => spanJSON(span.length, span.data)),
  };
}

function spanJSON(length: number, author: Author | null): Span {
  return {
    length,
    user: author?.user ?? null,
    clientID: author?.clientID ?? '',
    at: author?.at ?? 0,
  };
}

// Tokens that tell apart everything a reader sees: changeset's default encoder compares text
// and node types only, so a retyped word in bold, or a heading whose level changed, would be
// minimized away as unchanged.
const encoder: TokenEncoder<number | string> = {
  encodeCharacter: (char, marks) => (marks.length === 0 ? char : `${char}${marksKey(marks)}`),
  encodeNodeStart: (node) => nodeKey(node),
  // A close token says nothing the open token did not: a join that moves text from a
  // paragraph into a heading changes the boundary it deletes, not the text's end.
  encodeNodeEnd: () => '/',
  compareTokens: (a, b) => a === b,
};

function marksKey(marks: readonly Mark[]): string {
  let key = '';
  for (let i = 0; i < marks.length; i++) {
    const mark = marks[i]!;
    key += `|${mark.type.name}`;
    if (Object.keys(mark.attrs).length > 0) key += JSON.stringify(mark.attrs);
  }
  return key;
}

function nodeKey(node: Node): string {
  let key = node.type.name;
  if (Object.keys(node.attrs).length > 0) key += JSON.stringify(node.attrs);
  if (node.marks.length > 0) key += marksKey(node.marks);
  return key;
}

/// Adds the formatting changes to the text changes: each formatting range, cut to the
/// stretches between text changes (where A and B hold the same tokens but for formatting),
/// narrowed to the tokens that differ, attributed to the latest step covering them.
function withFormatting(
  text: AttributedChange[],
  formatting: Formatting[],
  a: Node,
  b: Node,
): AttributedChange[] {
  const owners = latestOwners(formatting, b.content.size);
  const out: AttributedChange[] = [];
  let next = 0;
  for (let i = 0; i <= text.length; i++) {
    // The unchanged stretch before text change i (or after the last): B [startB, endB).
    const startB = i === 0 ? 0 : text[i - 1]!.toB;
    const shift = i === 0 ? 0 : text[i - 1]!.toA - text[i - 1]!.toB;
    const endB = i === text.length ? b.content.size : text[i]!.fromB;
    for (; next < owners.length && owners[next]!.from < endB; next++) {
      const owner = owners[next]!;
      const from = Math.max(owner.from, startB);
      const to = Math.min(owner.to, endB);
      if (from < to) differing(a, b, from + shift, from, to - from, owner.author, out);
      if (owner.to > endB) break;
    }
    if (i < text.length) out.push(text[i]!);
  }
  return out;
}

/// Splits the formatting ranges into disjoint pieces, each owned by the latest step covering
/// it, in document order.
function latestOwners(
  formatting: Formatting[],
  size: number,
): { from: number; to: number; author: Author }[] {
  const points = new Set<number>();
  for (const range of formatting) {
    if (range.fromB >= range.toB) continue;
    points.add(Math.min(range.fromB, size));
    points.add(Math.min(range.toB, size));
  }
  const sorted = [...points].sort((x, y) => x - y);
  const owners: { from: number; to: number; author: Author }[] = [];
  for (let p = 0; p + 1 < sorted.length; p++) {
    const from = sorted[p]!;
    const to = sorted[p + 1]!;
    let author: Author | null = null;
    for (let f = formatting.length - 1; f >= 0; f--) {
      const range = formatting[f]!;
      if (range.fromB <= from && range.toB >= to) {
        author = range.author;
        break;
      }
    }
    if (!author) continue;
    const last = owners[owners.length - 1];
    if (last && last.to === from && last.author === author) last.to = to;
    else owners.push({ from, to, author });
  }
  return owners;
}

/// Pushes onto `out` one change per run of tokens that differ between `a` at `fromA` and `b`
/// at `fromB` over `length` positions (a stretch both documents share but for formatting).
function differing(
  a: Node,
  b: Node,
  fromA: number,
  fromB: number,
  length: number,
  author: Author,
  out: AttributedChange[],
): void {
  const tokensA = tokens(a.content, fromA, fromA + length, []);
  const tokensB = tokens(b.content, fromB, fromB + length, []);
  const span = spanJSON(0, author);
  for (let i = 0; i < length; i++) {
    if (tokensA[i] === tokensB[i]) continue;
    let end = i + 1;
    while (end < length && tokensA[end] !== tokensB[end]) end++;
    const last = out[out.length - 1];
    if (last && last.toB === fromB + i && isFormatting(last, span)) {
      // The run continues one from the previous piece by the same author.
      last.toA += end - i;
      last.toB += end - i;
      last.inserted[0]!.length += end - i;
      last.deleted[0]!.length += end - i;
    } else {
      out.push({
        fromA: fromA + i,
        toA: fromA + end,
        fromB: fromB + i,
        toB: fromB + end,
        inserted: [{ ...span, length: end - i }],
        deleted: [{ ...span, length: end - i }],
      });
    }
    i = end;
  }
}

function isFormatting(change: AttributedChange, span: Span): boolean {
  const ins = change.inserted;
  const del = change.deleted;
  return (
    ins.length === 1 &&
    del.length === 1 &&
    ins[0]!.length === del[0]!.length &&
    ins[0]!.user === span.user &&
    ins[0]!.clientID === span.clientID &&
    ins[0]!.at === span.at &&
    del[0]!.at === span.at
  );
}

/// The tokens of `fragment` between `start` and `end`, encoded as the change set encodes them,
/// one per position.
function tokens(
  fragment: Fragment,
  start: number,
  end: number,
  target: (number | string)[],
): (number | string)[] {
  for (let i = 0, offset = 0; i < fragment.childCount && offset < end; i++) {
    const child = fragment.child(i);
    const endOffset = offset + child.nodeSize;
    const from = Math.max(offset, start);
    const to = Math.min(endOffset, end);
    if (from < to) {
      if (child.isText) {
        for (let j = from; j < to; j++) {
          target.push(encoder.encodeCharacter(child.text!.charCodeAt(j - offset), child.marks));
        }
      } else if (child.isLeaf) {
        target.push(encoder.encodeNodeStart(child));
      } else {
        if (from === offset) target.push(encoder.encodeNodeStart(child));
        tokens(
          child.content,
          Math.max(offset + 1, from) - offset - 1,
          Math.min(endOffset - 1, to) - offset - 1,
          target,
        );
        if (to === endOffset) target.push(encoder.encodeNodeEnd(child));
      }
    }
    offset = endOffset;
  }
  return target;
}
