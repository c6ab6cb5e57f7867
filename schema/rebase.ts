import type { Node } from 'prosemirror-model';
import { Mapping, type Step, type StepMap } from 'prosemirror-transform';

/// The result of `rebaseSteps`: the steps that still applied, mapped, the document after
/// them, and the rebaser that mapped them (`mapAfter` moves a position, a selection's, of the
/// document after the original steps to the document after these).
export interface Rebased {
  steps: Step[];
  doc: Node;
  rebaser: StepRebaser;
}

/// Rebases `steps`, made one after another on some document D, over the changes `over` (the
/// maps of steps that were applied to D first), and applies what survives to `doc`, which is D
/// after `over`. Steps that no longer apply are dropped, as prosemirror-collab drops them.
///
/// This is prosemirror-collab's own rebasing: each step is mapped back through the inverses of
/// the batch's earlier steps, forward through `over`, and forward through the earlier steps as
/// rebased, with mirror links so that positions inside content the batch itself inserted are
/// recovered. The server uses it to accept a batch made at an older version; the client uses it
/// to move its own pending steps when the server rebased a batch differently. Both ends must
/// compute the same thing, so it lives here, beside the schema they share.
export function rebaseSteps(steps: readonly Step[], over: readonly StepMap[], doc: Node): Rebased {
  const rebaser = new StepRebaser(steps, over);
  const result: Step[] = [];
  for (let i = 0; i < steps.length; i++) {
    const mapped = rebaser.map(steps[i]!);
    if (!mapped) continue;
    let applied: Node | null;
    try {
      applied = mapped.apply(doc).doc;
    } catch {
      // A position out of range after mapping: the step no longer applies.
      applied = null;
    }
    if (!applied) continue;
    doc = applied;
    rebaser.applied(mapped);
    result.push(mapped);
  }
  return { steps: result, doc, rebaser };
}

/// The mapping half of `rebaseSteps`, one step at a time, for callers that apply and check
/// each mapped step themselves (the server, which refuses a rebased batch whole rather than
/// dropping steps). Call `map` for each step of the batch in order, and `applied` for each
/// mapped step that was applied.
export class StepRebaser {
  private readonly mapping: Mapping;
  private mapFrom: number;

  /// `steps` is the whole batch, `over` the maps of the steps it is rebased over.
  constructor(steps: readonly Step[], over: readonly StepMap[]) {
    this.mapping = new Mapping();
    for (let i = steps.length - 1; i >= 0; i--) this.mapping.appendMap(steps[i]!.getMap().invert());
    for (let i = 0; i < over.length; i++) this.mapping.appendMap(over[i]!);
    this.mapFrom = steps.length;
  }

  /// Maps the batch's next step; null when what it changed was deleted by the steps it is
  /// rebased over.
  map(step: Step): Step | null {
    const mapped = step.map(this.mapping.slice(this.mapFrom));
    this.mapFrom--;
    return mapped;
  }

  /// Maps a position of the document after the whole batch to where it is now: through the
  /// batch undone, the steps it is rebased over, and the steps recorded with `applied`, with
  /// the same mirror links (a selection inside what the batch inserted keeps its place there).
  mapAfter(pos: number, assoc = 1): number {
    return this.mapping.map(pos, assoc);
  }

  /// Records that `mapped` (the last result of `map`) was applied.
  applied(mapped: Step): void {
    // Mirror the rebased step with the inverse of its original, so that later steps of the
    // batch map through the pair without losing positions in what this step inserted.
    this.mapping.appendMap(mapped.getMap(), this.mapFrom);
  }
}
