import type { Fragment, Mark, Node } from 'prosemirror-model';
import { ChangeSet, type Change, type TokenEncoder } from 'prosemirror-changeset';
import {
  AddMarkStep,
  AddNodeMarkStep,
  AttrStep,
  DocAttrStep,
  RemoveMarkStep,
  RemoveNodeMarkStep,
  type Step,
} from 'prosemirror-transform';
import { MapRuns, type Author } from './map_runs.js';
import type { AttributedChange, HistoryStep, Span } from './types.js';

// The attributed difference between two versions: prosemirror-changeset over the steps' maps
// for what was inserted and deleted, and a second pass for formatting (mark and attribute
// steps), whose maps are empty, so the change set cannot see them.

/// A stretch of the newer document and the step that last formatted it.
interface Owner {
  from: number;
  to: number;
  author: Author;
}

/// Returns the changes that turn `base` (the document at the older version) into the document
/// after `steps`, in document order, every inserted and deleted span attributed to the step
/// that made it: adjacent text by the same user and client is one span (its `at` the latest),
/// text by different authors stays apart. Formatting (marks, node attributes) shows as a
/// change whose deleted and inserted spans are the same length and name the step that last
/// formatted it; text typed in the range keeps its typist. The result is plain JSON.
///
/// `head`, the document after `steps`, spares replaying them when the caller has it (a
/// checkpoint); it is trusted. Without it, throws a RangeError when a step does not apply: the
/// history handed in is corrupt.
export function attributedChanges(
  base: Node,
  steps: readonly HistoryStep[],
  head?: Node,
): AttributedChange[] {
  const runs = new MapRuns();
  let doc: Node | null = head ? null : base;
  for (let i = 0; i < steps.length; i++) {
    const entry = steps[i]!;
    let after: Node | null = null;
    if (doc) {
      const result = entry.step.apply(doc);
      if (!result.doc) throw new RangeError(`history step ${i} does not apply: ${result.failed}`);
      after = result.doc;
    }
    if (!runs.add(entry)) {
      let range = touched(entry.step);
      if (range === undefined) {
        // A step of a kind this does not know, which moves nothing: what it touched is found
        // by comparing the documents around it, so they are needed.
        if (!doc) return attributedChanges(base, steps);
        range = differingRange(doc, after!);
      }
      if (range) runs.format(range.from, range.to, entry);
    }
    if (doc) doc = after;
  }
  runs.flush();
  const last = head ?? doc!;
  const text = ChangeSet.create<Author | null>(base, combineAuthors, encoder)
    .addSteps(last, runs.maps, runs.authors)
    .changes.map(toJSON);
  if (!runs.formatMaps) return text;
  // Who formatted each stretch last: a change set over the same maps, each formatting step a
  // replacement of the range it touched by as much, merged as text changes are.
  const formatting = ChangeSet.create<Author | null>(base, combineAuthors, encoder).addSteps(
    last,
    runs.formatMaps,
    runs.formatters!,
  );
  return withFormatting(text, owners(formatting.changes), base, last);
}

/// The range a step that moves no position changed, for the kinds prosemirror-transform
/// defines: null for none (a document attribute), undefined for a kind it does not know.
function touched(step: Step): { from: number; to: number } | null | undefined {
  if (step instanceof AddMarkStep || step instanceof RemoveMarkStep) {
    return step.from < step.to ? { from: step.from, to: step.to } : null;
  }
  if (step instanceof AttrStep) return { from: step.pos, to: step.pos + 1 };
  if (step instanceof AddNodeMarkStep || step instanceof RemoveNodeMarkStep) {
    return { from: step.pos, to: step.pos + 1 };
  }
  if (step instanceof DocAttrStep) return null;
  return undefined;
}

/// The range where `before` and `after`, documents of the same size, differ; null if nowhere.
/// They share every untouched node, which findDiffStart skips by identity.
function differingRange(before: Node, after: Node): { from: number; to: number } | null {
  const start = before.content.findDiffStart(after.content);
  if (start === null) return null;
  const end = before.content.findDiffEnd(after.content)!;
  return { from: start, to: Math.max(start, end.b) };
}

/// The stretches of the newer document whose formatting a step owns (the last to format it
/// and not retyped since), in order: the inserted spans the formatting change set attributes.
function owners(changes: readonly Change<Author | null>[]): Owner[] {
  const out: Owner[] = [];
  for (const change of changes) {
    let pos = change.fromB;
    for (const span of change.inserted) {
      if (span.data) out.push({ from: pos, to: pos + span.length, author: span.data });
      pos += span.length;
    }
  }
  return out;
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
  owners: Owner[],
  a: Node,
  b: Node,
): AttributedChange[] {
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
