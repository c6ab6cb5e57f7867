import { Slice, type Node } from 'prosemirror-model';
import { DocAttrStep, ReplaceStep, Transform, type Step } from 'prosemirror-transform';

// Restoring a version is an edit like any other: the steps that turn the current document into
// the old one, appended to the history, so that every editor catches up by the usual path.

/// Returns the steps that turn `current` into `target` exactly (`doc.eq`): none when they are
/// equal, else one replacement of the range where they differ (between the first and the last
/// difference, as `Fragment.findDiffStart`/`findDiffEnd` find them). When that slice of
/// `target` does not fit `current` at those positions (the two disagree on the nesting around
/// the change), the whole content is replaced. Document attributes that differ get one
/// DocAttrStep each. Never throws for documents of the same schema.
export function restoreSteps(current: Node, target: Node): Step[] {
  const steps = contentSteps(current, target);
  for (const name of Object.keys(target.attrs)) {
    if (current.attrs[name] !== target.attrs[name]) {
      steps.push(new DocAttrStep(name, target.attrs[name]));
    }
  }
  return steps;
}

function contentSteps(current: Node, target: Node): Step[] {
  const start = current.content.findDiffStart(target.content);
  if (start === null) return [];
  let { a: endA, b: endB } = current.content.findDiffEnd(target.content)!;
  // When one side repeats what surrounds it ("aa" → "aaa"), the common prefix and suffix
  // overlap: move the end forward so that the range starts before it ends on both sides.
  const overlap = start - Math.min(endA, endB);
  if (overlap > 0) {
    endA += overlap;
    endB += overlap;
  }
  const slice = target.slice(start, endB);
  const single = new ReplaceStep(start, endA, slice);
  if (reaches(current, [single], target)) return [single];
  // The slice's open sides do not match the nesting at `start`/`endA` in `current`: let the
  // replace algorithm fit it, and check that it fitted it the way `target` has it.
  try {
    const fitted = new Transform(current).replace(start, endA, slice);
    if (fitted.doc.eq(target)) return fitted.steps.slice();
  } catch {
    // A slice the fitter cannot place: fall through to replacing everything.
  }
  return [new ReplaceStep(0, current.content.size, new Slice(target.content, 0, 0))];
}

/// True when `steps` apply to `doc` one after another and leave `target`.
function reaches(doc: Node, steps: readonly Step[], target: Node): boolean {
  for (const step of steps) {
    const result = step.apply(doc);
    if (!result.doc) return false;
    doc = result.doc;
  }
  return doc.eq(target);
}
