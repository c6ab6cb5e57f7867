import type { StepJSON } from '../../schema/events.js';

// What prosemirror-transform's `Step.fromJSON` checks is only that positions are numbers: it
// takes 2.5, -3 or a `replace` with `from` after `to` (which inserts the range's content a
// second time, doubling a document per step). These checks run on every step before it is
// applied, on the step's own JSON (`step.toJSON()`, so only fields the step type keeps).

/// Step types the server accepts: every step prosemirror-transform defines.
export const stepTypeNames = [
  'replace',
  'replaceAround',
  'addMark',
  'removeMark',
  'markSet',
  'addNodeMark',
  'removeNodeMark',
  'attr',
  'docAttr',
] as const;

const stepTypes = new Set<string>(stepTypeNames);

const positionFields = ['from', 'to', 'gapFrom', 'gapTo', 'insert', 'pos'] as const;

/// Checks a parsed step's JSON beyond what `Step.fromJSON` does: a known step type, positions
/// that are whole numbers ≥ 0, `from ≤ to`, a gap inside its range, and an attribute name that
/// is a string. Returns the reason it is refused, or null.
export function stepProblem(json: StepJSON): string | null {
  if (!stepTypes.has(json.stepType)) return `unknown step type ${json.stepType}`;
  for (let i = 0; i < positionFields.length; i++) {
    const field = positionFields[i]!;
    const value = json[field];
    if (value !== undefined && !(Number.isSafeInteger(value) && (value as number) >= 0)) {
      return `${field} must be a whole number ≥ 0`;
    }
  }
  const { from, to, gapFrom, gapTo } = json as Record<string, number | undefined>;
  if (from !== undefined && to !== undefined && from > to) return 'from must not be after to';
  if (gapFrom !== undefined && gapTo !== undefined) {
    if (gapFrom > gapTo || gapFrom < from! || gapTo > to!) return 'the gap must lie inside from–to';
  }
  // `Slice.toJSON()` is null for a slice with no content, even one that says it is open
  // (`{content: [], openStart: 1}`), and the step keeps that null.
  const slice = json['slice'] as { openStart?: unknown; openEnd?: unknown } | null | undefined;
  if (slice !== undefined && slice !== null) {
    for (const open of [slice.openStart, slice.openEnd]) {
      if (open !== undefined && !(Number.isSafeInteger(open) && (open as number) >= 0)) {
        return 'openStart and openEnd must be whole numbers ≥ 0';
      }
    }
  }
  if (
    (json.stepType === 'attr' || json.stepType === 'docAttr') &&
    typeof json['attr'] !== 'string'
  ) {
    return 'attr must be a string';
  }
  if (json.stepType === 'markSet') {
    const inner = json['steps'] as StepJSON[];
    // An empty one changes nothing yet would take a version (and count as -1 step).
    if (inner.length === 0) return 'a markSet needs at least one step';
    for (let i = 0; i < inner.length; i++) {
      const problem = stepProblem(inner[i]!);
      if (problem) return `markSet step ${i}: ${problem}`;
    }
  }
  return null;
}
