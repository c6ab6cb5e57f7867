import { Slice, type Node } from 'prosemirror-model';
import {
  Mapping,
  ReplaceAroundStep,
  ReplaceStep,
  type Step,
  type StepMap,
} from 'prosemirror-transform';
import type { HistoryStep } from './types.js';

// Selective revert: undoing one user's steps while keeping everyone else's, as
// prosemirror-history undoes one editor's steps among collaborators' (Branch.popEvent). Each
// step is inverted against the document before it and mapped over every step after it; the
// inverses already applied are appended to the mapping as mirrors of the steps they undo, so
// that a position inside text a later step deleted and its revert restored comes back.
//
// One departure: the inverse of typing deletes a range, and others may since have typed inside
// it. prosemirror-history deletes their text with it; here the range is cut into the pieces
// that still hold the reverted step's own content (mapped piece by piece, mirrors included),
// and only those are deleted. A structural inverse (a wrap undone, a replace across blocks)
// cannot be cut so: when others wrote inside what it would delete, it is skipped.

/// What `revertUser` returns: the steps to apply, in order, to the newest document, and how many
/// of the user's steps they revert and how many no longer applied.
export interface Reverted {
  steps: Step[];
  reverted: number;
  skipped: number;
}

/// Inverts the steps by `select.user` among `steps[select.from .. select.to)` (half-open indexes
/// into `steps`, which run from `base` to the newest document), newest first, each mapped over
/// every later step and every inverse already made. A step whose inverse maps to nothing, no
/// longer applies, or would delete what others wrote inside it since is skipped and counted,
/// never forced. Returns steps that apply in order to the document after `steps`; `reverted`
/// and `skipped` count steps of `steps`.
///
/// `head`, the document after `steps`, spares replaying the steps after the range when the
/// caller has it; it is trusted. Throws a RangeError when a step it replays does not apply.
export function revertUser(
  base: Node,
  steps: readonly HistoryStep[],
  select: { user: string; from: number; to: number },
  head?: Node,
): Reverted {
  const replayTo = head ? Math.min(steps.length, Math.max(0, select.to)) : steps.length;
  const { units, doc: replayed } = unitsOf(base, steps, select, replayTo);
  const mapping = new Mapping();
  for (const unit of units) mapping.appendMap(unit.step.getMap());
  let doc = head ?? replayed;
  const mirrors = new Map<number, number>();
  const out: Step[] = [];
  let reverted = 0;
  let skipped = 0;
  for (let i = units.length - 1; i >= 0; i--) {
    const unit = units[i]!;
    if (!unit.selected) continue;
    const inverse = unit.step.invert(unit.before!);
    const planned = plan(inverse, unit.after!, mapping, mirrors, i + 1);
    const applied = planned && applyAll(doc, planned.steps);
    if (!planned || !applied) {
      skipped += unit.count;
      continue;
    }
    doc = applied;
    for (let s = 0; s < planned.steps.length; s++) {
      // A revert made of one step mirrors the step it undoes; one cut into pieces does not.
      const mirror = planned.mirrored ? i : undefined;
      if (mirror !== undefined) mirrors.set(i, mapping.maps.length);
      mapping.appendMap(planned.steps[s]!.getMap(), mirror);
      out.push(planned.steps[s]!);
    }
    reverted += unit.count;
  }
  return { steps: out, reverted, skipped };
}

/// Consecutive steps merged where prosemirror-transform can merge them (typing on, deleting
/// on), the selected ones only with each other: the same edits in a few units, so that the
/// mapping, which every inverse crosses to its end, is as short as the history's shape allows.
interface Unit {
  step: Step;
  /// How many of the history's steps it holds.
  count: number;
  selected: boolean;
  /// The documents around it; null past the replayed part (where only maps are needed).
  before: Node | null;
  after: Node | null;
}

/// `a` and `b` as one step when both type (insert inline content, nothing deleted) or both
/// delete (nothing inserted), and prosemirror-transform can merge them; else null. Typing
/// merged with a deletion would make an inverse that deletes and restores at once, which
/// cannot be cut around what others typed inside it.
function merge(a: Step, b: Step): Step | null {
  if (!(a instanceof ReplaceStep) || !(b instanceof ReplaceStep)) return null;
  const typing = (step: ReplaceStep): boolean =>
    step.from === step.to && step.slice.openStart === 0 && step.slice.openEnd === 0;
  const deleting = (step: ReplaceStep): boolean => step.slice.size === 0;
  if ((typing(a) && typing(b)) || (deleting(a) && deleting(b))) return a.merge(b);
  return null;
}

/// Groups `steps` into units, replaying them from `base` up to `replayTo` (the steps after it
/// need only their maps). Returns them and the document the replay reached. Throws a
/// RangeError when a replayed step does not apply.
function unitsOf(
  base: Node,
  steps: readonly HistoryStep[],
  select: { user: string; from: number; to: number },
  replayTo: number,
): { units: Unit[]; doc: Node } {
  const units: Unit[] = [];
  let doc = base;
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i]!.step;
    let after: Node | null = null;
    if (i < replayTo) {
      const result = step.apply(doc);
      if (!result.doc) throw new RangeError(`history step ${i} does not apply: ${result.failed}`);
      after = result.doc;
    }
    const selected = i >= select.from && i < select.to && steps[i]!.user === select.user;
    const last = units[units.length - 1];
    const merged = last && last.selected === selected ? merge(last.step, step) : null;
    if (last && merged) {
      last.step = merged;
      last.count++;
      last.after = after;
    } else {
      units.push({ step, count: 1, selected, before: after ? doc : null, after });
    }
    if (after) doc = after;
  }
  return { units, doc };
}

/// Applies `steps` in order; null when one of them does not apply.
function applyAll(doc: Node, steps: readonly Step[]): Node | null {
  for (const step of steps) {
    let result;
    try {
      result = step.apply(doc);
    } catch {
      return null;
    }
    if (!result.doc) return null;
    doc = result.doc;
  }
  return doc;
}

/// The steps that make `inverse` (which applies to `after`, the document after the step it
/// undoes) at the newest document: the inverse mapped over `mapping` from `start`, or, when it
/// deletes inline content others have since typed into, the deletion cut to the pieces that
/// are the undone step's own. Null when nothing of it is left to apply.
function plan(
  inverse: Step,
  after: Node,
  mapping: Mapping,
  mirrors: Map<number, number>,
  start: number,
): { steps: Step[]; mirrored: boolean } | null {
  let mapped = inverse.map(mapping.slice(start));
  // A replacement whose range and content both mapped away would change nothing: there is
  // nothing of the undone step left to revert.
  if (mapped instanceof ReplaceStep && mapped.from === mapped.to && mapped.slice.size === 0) {
    mapped = null;
  }
  if (
    !(inverse instanceof ReplaceStep) ||
    inverse.from === inverse.to ||
    !isInline(inverse, after)
  ) {
    if (!mapped) return null;
    // A structural inverse cannot be cut into pieces: if what it would delete now holds more
    // than what is left of the undone step's own content, others wrote inside it since, and
    // reverting it would take their work with it. Skipped, never forced.
    const own = deleted(inverse).reduce(
      (sum, [from, to]) => sum + size(mapPieces(mapping, mirrors, start, from, to)),
      0,
    );
    return own === size(deleted(mapped)) ? { steps: [mapped], mirrored: true } : null;
  }
  const pieces = mapPieces(mapping, mirrors, start, inverse.from, inverse.to);
  const whole = mapped as ReplaceStep | null;
  if (whole && pieces.length === 1 && pieces[0]![0] === whole.from && pieces[0]![1] === whole.to) {
    return { steps: [whole], mirrored: true };
  }
  if (pieces.length === 0 && !whole) return null;
  const steps: Step[] = [];
  for (let p = pieces.length - 1; p >= 0; p--) {
    steps.push(new ReplaceStep(pieces[p]![0], pieces[p]![1], Slice.empty));
  }
  if (inverse.slice.size > 0) {
    // What the undone step deleted goes back where its range now starts.
    const at = whole ? whole.from : pieces[0]![0];
    steps.push(new ReplaceStep(at, at, inverse.slice));
  }
  return steps.length > 0 ? { steps, mirrored: false } : null;
}

/// The ranges `step` deletes (a ReplaceAroundStep keeps its gap), in the document before it.
function deleted(step: Step): [number, number][] {
  const ranges: [number, number][] = [];
  if (step instanceof ReplaceStep) {
    ranges.push([step.from, step.to]);
  } else if (step instanceof ReplaceAroundStep) {
    ranges.push([step.from, step.gapFrom], [step.gapTo, step.to]);
  }
  return ranges.filter(([from, to]) => from < to);
}

function size(ranges: readonly [number, number][]): number {
  let sum = 0;
  for (const [from, to] of ranges) sum += to - from;
  return sum;
}

/// True when `inverse` replaces inline content inside one textblock of `doc` with inline
/// content (or nothing): typing, deleting or retyping within a paragraph.
function isInline(inverse: ReplaceStep, doc: Node): boolean {
  const $from = doc.resolve(inverse.from);
  if (!$from.parent.inlineContent || !$from.sameParent(doc.resolve(inverse.to))) return false;
  const slice = inverse.slice;
  return (
    slice.openStart === 0 && slice.openEnd === 0 && slice.content.firstChild?.isInline !== false
  );
}

/// Maps the range [from, to) of the document before `mapping.maps[start]` to the newest
/// document, as the pieces of it that survive: content inserted inside the range by later steps
/// is left out, content deleted is dropped unless a later map mirrors the deleting one (an
/// applied revert), where it is recovered. Returns the pieces in order, adjacent ones joined.
function mapPieces(
  mapping: Mapping,
  mirrors: Map<number, number>,
  start: number,
  from: number,
  to: number,
): [number, number][] {
  const done: [number, number][] = [];
  const work: { from: number; to: number; index: number }[] = [{ from, to, index: start }];
  while (work.length > 0) {
    const item = work.pop()!;
    let pieces: [number, number][] = [[item.from, item.to]];
    for (let i = item.index; i < mapping.maps.length && pieces.length > 0; i++) {
      const mirror = mirrors.get(i);
      const next: [number, number][] = [];
      for (const piece of pieces) {
        throughMap(mapping.maps[i]!, piece, next, (range, offFrom, offTo) => {
          if (mirror === undefined) return;
          const at = rangeStart(mapping.maps[mirror]!, range);
          work.push({ from: at + offFrom, to: at + offTo, index: mirror + 1 });
        });
      }
      pieces = next;
    }
    done.push(...pieces);
  }
  done.sort((a, b) => a[0] - b[0]);
  const joined: [number, number][] = [];
  for (const piece of done) {
    const last = joined[joined.length - 1];
    if (last && last[1] >= piece[0]) last[1] = Math.max(last[1], piece[1]);
    else joined.push([piece[0], piece[1]]);
  }
  return joined;
}

/// Maps the piece [from, to) through one step map into `out`, cut where the map inserted
/// content inside it; the parts the map replaced are handed to `lost` (the index of the range
/// that replaced them and their offsets in it).
function throughMap(
  map: StepMap,
  [from, to]: [number, number],
  out: [number, number][],
  lost: (range: number, offFrom: number, offTo: number) => void,
): void {
  let pos = from;
  let shift = 0;
  let range = 0;
  map.forEach((oldStart, oldEnd, newStart, newEnd) => {
    if (pos < to && pos < oldStart) {
      const end = Math.min(to, oldStart);
      out.push([pos + newStart - oldStart, end + newStart - oldStart]);
      pos = end;
    }
    if (pos < to && pos >= oldStart && pos < oldEnd) {
      const end = Math.min(to, oldEnd);
      lost(range, pos - oldStart, end - oldStart);
      pos = end;
    }
    shift = newEnd - oldEnd;
    range++;
  });
  if (pos < to) out.push([pos + shift, to + shift]);
}

/// Where the `index`th range of `map` starts in the document after it.
function rangeStart(map: StepMap, index: number): number {
  let found = 0;
  let range = 0;
  map.forEach((_oldStart, _oldEnd, newStart) => {
    if (range++ === index) found = newStart;
  });
  return found;
}
