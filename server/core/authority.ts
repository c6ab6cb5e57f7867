import { Slice, type Node } from 'prosemirror-model';
import { AttrStep, DocAttrStep, Step, type StepMap } from 'prosemirror-transform';
import { measureJson, unlimitedJson } from '../../schema/json_limits.js';
import { nodeStats } from '../../schema/doc_size.js';
import { StepRebaser } from '../../schema/rebase.js';
import { type DocRoom, type StepJSON } from '../../schema/events.js';
import { checkChanged } from './doc_check.js';
import { stepProblem } from './step_check.js';

/// Limits an authority enforces on what it accepts.
export interface AuthorityLimits {
  /// How many recent steps are kept for catch-up; older ones are forgotten and a client that
  /// needs them gets the whole document instead.
  maxHistorySteps: number;
  /// The same in bytes of the steps' JSON: whichever limit is reached first cuts the history.
  maxHistoryBytes: number;
  /// The largest batch accepted (`too-large` beyond).
  maxStepsPerBatch: number;
  /// The largest document (in `Node.nodeSize`) a step may produce (`too-large` beyond).
  maxDocSize: number;
  /// The largest document in estimated bytes of its JSON (`too-large` beyond).
  maxDocBytes: number;
  /// The deepest nesting of nodes a step may produce, the top node being level 0 (`too-deep`).
  maxDocDepth: number;
  /// How far behind a batch may be and still be rebased by the server rather than refused as
  /// `stale`; 0 keeps prosemirror-collab's rule (accept only at the current version).
  maxRebaseSteps: number;
  /// A batch still being applied after this many milliseconds is refused (`too-large`).
  maxApplyMs: number;
}

/// The outcome of `Authority.receive`. `steps` are the accepted steps normalised through
/// `Step.toJSON()`: what is broadcast and journaled, never the raw input. `rebased` says the
/// batch was made at an older version and mapped over the steps since.
export type ReceiveOutcome =
  | { ok: true; version: number; doc: Node; steps: StepJSON[]; rebased: boolean }
  | { ok: false; code: 'stale' | 'history-gone'; version: number; message: string }
  | {
      ok: false;
      code: 'invalid-step' | 'too-large' | 'too-deep';
      version: number;
      message: string;
      /// With a step refused for the document's size: how much it may still grow.
      room?: DocRoom;
    };

type Refusal = Extract<ReceiveOutcome, { ok: false }>;

/// Steps since a version, for catch-up; `null` when they are not all held any more.
export interface StepsSince {
  steps: StepJSON[];
  clientIDs: string[];
}

/// The per-document authority: the current document, its version (the count of accepted
/// steps) and a bounded window of recent steps with the clientIDs that made them. It is pure:
/// no sockets, storage or timers (the clock it reads for `maxApplyMs` is injected). Transport
/// and persistence call into it.
///
/// A batch is applied all or nothing, each step checked as it is applied: the step's own
/// shape, the schema, and the document's size and depth after it, so that a batch which would
/// blow a limit is stopped at the step that does, not after it has built the whole result.
/// A batch made at an older version is rebased over the steps since (up to `maxRebaseSteps`
/// behind), exactly as the client would rebase it, instead of being refused: under contention
/// prosemirror-collab's rule (refuse, let the client rebase and resend) costs every editor but
/// one a round trip per broadcast. If any step of a rebased batch no longer applies, the whole
/// batch is refused as `stale` and the client rebases it itself. The client recognises its own
/// steps in the broadcast by its clientID whether the server rebased them or not.
export class Authority {
  doc: Node;
  version: number;
  /// The document's estimated JSON size in bytes.
  docBytes: number;
  /// Batches accepted by rebasing, since this authority was made.
  rebasedBatches = 0;
  /// The version before `history[0]`: `history[i]` took the document from
  /// `historyStart + i` to `historyStart + i + 1`.
  private historyStart: number;
  private history: StepJSON[];
  private historyClients: string[];
  private historyMaps: StepMap[];
  private historySizes: number[];
  private historyBytes: number;
  /// The version after each client's last accepted batch. A batch from that client made before
  /// it is a resend of something already applied (its acknowledgement was lost, or it is still
  /// being journaled): rebasing it would apply it twice, so it is answered `stale` instead.
  private lastEnd: Map<string, number>;
  private readonly limits: AuthorityLimits;
  private readonly now: () => number;

  /// `doc` must already be known to be within the depth limit (a document made by steps, or
  /// parsed from JSON whose depth was checked): it is measured recursively.
  constructor(
    doc: Node,
    version: number,
    limits: AuthorityLimits,
    now: () => number = performance.now.bind(performance),
  ) {
    this.doc = doc;
    this.version = version;
    this.docBytes = nodeStats(doc).bytes;
    this.historyStart = version;
    this.history = [];
    this.historyClients = [];
    this.historyMaps = [];
    this.historySizes = [];
    this.historyBytes = 0;
    this.lastEnd = new Map();
    this.limits = limits;
    this.now = now;
  }

  /// Tries to apply `stepsJSON` (raw JSON from a client, whose nesting depth and size the
  /// caller has already bounded) made at `version` by `clientID`. Never throws for bad input:
  /// every refusal is an outcome with a code, and a refused batch changes nothing.
  receive(version: number, stepsJSON: readonly unknown[], clientID: string): ReceiveOutcome {
    const started = this.now();
    if (version > this.version) {
      // The client has seen versions this authority never made: its document comes from
      // another history (a lost in-memory store, a restore). Only a reload can fix that.
      return {
        ok: false,
        code: 'history-gone',
        version: this.version,
        message: `Version ${version} is ahead of the server's ${this.version}: reload the document`,
      };
    }
    if (version < this.version && !this.canRebase(version, clientID)) {
      return this.stale(version);
    }
    if (stepsJSON.length > this.limits.maxStepsPerBatch) {
      return this.refusal(
        'too-large',
        `A batch may hold at most ${this.limits.maxStepsPerBatch} steps`,
      );
    }

    const parsed = this.parseBatch(stepsJSON);
    if ('ok' in parsed) return parsed;
    const { steps, normalized } = parsed;

    const rebased = version < this.version;
    const rebaser = rebased
      ? new StepRebaser(steps, this.historyMaps.slice(version - this.historyStart))
      : null;
    const accepted: Step[] = new Array(steps.length);
    let doc = this.doc;
    let bytes = this.docBytes;
    for (let i = 0; i < steps.length; i++) {
      let step = steps[i]!;
      if (rebaser) {
        const mapped = rebaser.map(step);
        // What the step changed is gone: the client's own rebase would drop the step. The
        // batch is refused whole rather than partly applied; the client rebases and resends.
        if (!mapped) return this.stale(version);
        step = mapped;
      }
      const next = this.applyStep(step, i, doc, started);
      if (next === null) {
        return rebaser ? this.stale(version) : this.invalid(i, 'the step does not apply');
      }
      if ('ok' in next) return next;
      const grown = this.checkResult(next, doc, i, bytes);
      if (typeof grown !== 'number') return grown;
      bytes = grown;
      // Checked between steps, to stop a batch before it does more: refusing after its last
      // step saves no time, and would refuse a single step (whose cost the size limits bound)
      // whenever a GC pause pushed it over, with a code that tells the client not to retry.
      if (i < steps.length - 1 && this.now() - started > this.limits.maxApplyMs) {
        return this.overBudget();
      }
      rebaser?.applied(step);
      accepted[i] = step;
      doc = next;
    }

    // The steps as applied, returned from here rather than read back from the history: a
    // batch longer than what the history keeps is cut by the trim below, and the caller
    // journals and broadcasts every one of them.
    const applied: StepJSON[] = rebased ? new Array(accepted.length) : normalized;
    for (let i = 0; i < accepted.length; i++) {
      const step = accepted[i]!;
      if (rebased) applied[i] = step.toJSON() as StepJSON;
      this.pushHistory(applied[i]!, clientID, step.getMap());
    }
    this.doc = doc;
    this.docBytes = bytes;
    this.version += accepted.length;
    this.lastEnd.set(clientID, this.version);
    if (rebased) this.rebasedBatches++;
    this.trimHistory();
    return { ok: true, version: this.version, doc, steps: applied, rebased };
  }

  /// Parses a batch's steps against the document's schema and checks each (`stepProblem`,
  /// the batch's step count with a markSet's steps counted): the steps and their normalised
  /// JSON, or the refusal of the whole batch.
  private parseBatch(
    stepsJSON: readonly unknown[],
  ): { steps: Step[]; normalized: StepJSON[] } | Refusal {
    const steps: Step[] = new Array(stepsJSON.length);
    // The parsed steps' own JSON: checked here, and what is journaled and broadcast when the
    // batch is not rebased (a rebased step has new positions and is serialised again).
    const normalized: StepJSON[] = new Array(stepsJSON.length);
    // A markSet's mark steps count as steps: one message could otherwise carry thousands.
    let count = stepsJSON.length;
    for (let i = 0; i < stepsJSON.length; i++) {
      let step: Step;
      try {
        // Steps are read against the document's own schema: the host's, not necessarily ours.
        step = Step.fromJSON(this.doc.type.schema, stepsJSON[i]);
      } catch (err) {
        return this.invalid(i, (err as Error).message);
      }
      const json = step.toJSON() as StepJSON;
      const lost = lostSlice(step);
      if (lost === 'malformed') return this.invalid(i, 'its slice is open but holds nothing');
      if (lost === 'empty') {
        // The JSON journaled and broadcast is what every other editor (and a replay) applies:
        // read back from it, the step applied and mapped here is that one.
        try {
          step = Step.fromJSON(this.doc.type.schema, json);
        } catch (err) {
          return this.invalid(i, (err as Error).message);
        }
      }
      const problem = stepProblem(json);
      if (problem) return this.invalid(i, problem);
      if (json.stepType === 'markSet') count += (json['steps'] as unknown[]).length - 1;
      if (count > this.limits.maxStepsPerBatch) {
        return this.refusal(
          'too-large',
          `A batch may hold at most ${this.limits.maxStepsPerBatch} steps`,
        );
      }
      steps[i] = step;
      normalized[i] = json;
    }
    return { steps, normalized };
  }

  /// Checks `next`, what step `i` made of `doc` when the document was `bytes` bytes of JSON:
  /// valid for the schema, within the depth and size limits. The document's bytes after it,
  /// or the refusal of the batch.
  private checkResult(next: Node, doc: Node, i: number, bytes: number): number | Refusal {
    let change;
    try {
      // Steps check the content they rebuild, but not everything (attributes set by an
      // AttrStep, marks that a schema forbids in a place): what the step made must be valid.
      change = checkChanged(next, doc);
    } catch (err) {
      return this.refusal(
        'invalid-step',
        `Step ${i} would break the schema: ${(err as Error).message}`,
      );
    }
    if (change.depth > this.limits.maxDocDepth) {
      return this.refusal(
        'too-deep',
        `Step ${i} would nest the document deeper than ${this.limits.maxDocDepth} levels`,
      );
    }
    bytes += change.bytesDelta;
    if (
      (bytes > this.limits.maxDocBytes && change.bytesDelta > 0) ||
      (next.nodeSize > this.limits.maxDocSize && next.nodeSize > doc.nodeSize)
    ) {
      return {
        ok: false,
        code: 'too-large',
        version: this.version,
        message: `Step ${i} would make the document larger than ${this.limits.maxDocBytes} bytes or ${this.limits.maxDocSize} positions`,
        // At `version`, before the batch: a client drops, without sending them, the other
        // steps that would not fit either, instead of learning of each from its refusal.
        room: {
          bytes: this.limits.maxDocBytes - this.docBytes,
          positions: this.limits.maxDocSize - this.doc.nodeSize,
        },
      };
    }
    return bytes;
  }

  /// Applies one step to `doc`: the new document, null when the step does not apply, or a
  /// refusal. An attribute step must name an attribute the node's type defines: prosemirror-
  /// model would silently drop an unknown one, and the step would be stored and broadcast
  /// carrying whatever value the client put in it.
  private applyStep(step: Step, index: number, doc: Node, started: number): Node | null | Refusal {
    if (step instanceof AttrStep) {
      // `nodeAt` throws for a position past the document, outside the `try` below (a throw
      // here would fail the room); such a step fails to apply there instead.
      const node = step.pos <= doc.content.size ? doc.nodeAt(step.pos) : null;
      if (node && !Object.prototype.hasOwnProperty.call(node.type.spec.attrs ?? {}, step.attr)) {
        return this.invalid(index, `${node.type.name} has no attribute ${step.attr}`);
      }
    } else if (step instanceof DocAttrStep) {
      if (!Object.prototype.hasOwnProperty.call(doc.type.spec.attrs ?? {}, step.attr)) {
        return this.invalid(index, `the document has no attribute ${step.attr}`);
      }
    }
    try {
      // A markSet (what undoing a mark change sends) applies all its mark steps in one
      // `apply`: they are applied here one by one, as it would, so that the time budget is
      // checked between them too. Only a markSet has `steps`.
      const inner = (step as unknown as { steps?: unknown }).steps;
      if (Array.isArray(inner)) {
        let current = doc;
        for (let j = 0; j < inner.length; j++) {
          if (j > 0 && this.now() - started > this.limits.maxApplyMs) return this.overBudget();
          const result = (inner[j] as Step).apply(current);
          if (result.failed !== null || !result.doc) return null;
          current = result.doc;
        }
        return current;
      }
      const result = step.apply(doc);
      return result.failed === null && result.doc ? result.doc : null;
    } catch (err) {
      // Positions out of range make `resolve` throw rather than fail softly, and an attribute
      // value its validator refuses throws from `create`.
      return this.invalid(index, (err as Error).message);
    }
  }

  /// Appends steps that are already known to be valid and applied to `doc` (replayed from the
  /// journal on load), so that they serve catch-up.
  remember(steps: readonly Step[], clientIDs: readonly string[], doc: Node): void {
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i]!;
      this.pushHistory(step.toJSON() as StepJSON, clientIDs[i]!, step.getMap());
      this.lastEnd.set(clientIDs[i]!, this.version + i + 1);
    }
    this.version += steps.length;
    this.doc = doc;
    this.docBytes = nodeStats(doc).bytes;
    this.trimHistory();
  }

  /// The steps after `version` up to `upTo` (default: the current version), or null when the
  /// history no longer holds all of them or `version` is out of range.
  stepsSince(version: number, upTo: number = this.version): StepsSince | null {
    if (version < this.historyStart || version > upTo || upTo > this.version) return null;
    const from = version - this.historyStart;
    const to = upTo - this.historyStart;
    return { steps: this.history.slice(from, to), clientIDs: this.historyClients.slice(from, to) };
  }

  /// Goes back to an earlier version, forgetting every step after it. Used when steps that
  /// were applied could not be made durable: they were never acknowledged, so dropping them
  /// loses nothing a client was promised. `doc` is the document at `version`. The history may
  /// already have cut steps before it (batches accepted since were longer than it keeps): it
  /// then starts afresh at `version`, and catch-up from before is by whole document.
  rewind(version: number, doc: Node): void {
    if (version > this.version) {
      throw new RangeError(`Cannot rewind to ${version}, after the version ${this.version}`);
    }
    if (version < this.historyStart) {
      this.historyBytes = 0;
      this.history.length = 0;
      this.historyClients.length = 0;
      this.historyMaps.length = 0;
      this.historySizes.length = 0;
      this.historyStart = version;
    }
    const keep = version - this.historyStart;
    for (let i = keep; i < this.historySizes.length; i++)
      this.historyBytes -= this.historySizes[i]!;
    this.history.length = keep;
    this.historyClients.length = keep;
    this.historyMaps.length = keep;
    this.historySizes.length = keep;
    this.version = version;
    this.doc = doc;
    this.docBytes = nodeStats(doc).bytes;
    // Forgotten batches no longer count as a client's last one; its batch before them, if
    // any, is still in the history, where `canRebase` finds it through the version.
    for (const [clientID, end] of this.lastEnd) {
      if (end > version) this.lastEnd.set(clientID, this.lastEndIn(clientID, version));
    }
  }

  /// True when a batch of `clientID` made at `version` (older than the current one) can be
  /// rebased: its steps since are all held, it is not too far behind, and the client had seen
  /// its own last batch when it made it.
  private canRebase(version: number, clientID: string): boolean {
    return (
      this.version - version <= this.limits.maxRebaseSteps &&
      version >= this.historyStart &&
      version >= (this.lastEnd.get(clientID) ?? 0)
    );
  }

  /// The version after the last step of `clientID` at or before `version`, from the history.
  private lastEndIn(clientID: string, version: number): number {
    for (let i = version - this.historyStart - 1; i >= 0; i--) {
      if (this.historyClients[i] === clientID) return this.historyStart + i + 1;
    }
    return 0;
  }

  private stale(version: number): Refusal {
    return {
      ok: false,
      code: 'stale',
      version: this.version,
      message: `Batch made at version ${version}; the document is at ${this.version}`,
    };
  }

  private overBudget(): Refusal {
    return this.refusal(
      'too-large',
      `The batch took longer than ${this.limits.maxApplyMs} ms to apply: send smaller batches`,
    );
  }

  private invalid(index: number, reason: string): Refusal {
    return this.refusal('invalid-step', `Step ${index}: ${reason}`);
  }

  private refusal(code: 'invalid-step' | 'too-large' | 'too-deep', message: string): Refusal {
    return { ok: false, code, version: this.version, message };
  }

  private pushHistory(json: StepJSON, clientID: string, map: StepMap): void {
    const size = measureJson(json, unlimitedJson);
    const bytes = size.ok ? size.bytes : 0;
    this.history.push(json);
    this.historyClients.push(clientID);
    this.historyMaps.push(map);
    this.historySizes.push(bytes);
    this.historyBytes += bytes;
  }

  private trimHistory(): void {
    // Cut in chunks so that the copy is amortised over many steps instead of paid per step:
    // past the step limit by an eighth (or 1024 steps), or past the byte limit, down to three
    // quarters of the byte limit.
    let excess = this.history.length - this.limits.maxHistorySteps;
    if (excess > 0 && !(excess >= 1024 || excess * 8 >= this.limits.maxHistorySteps)) excess = 0;
    if (this.historyBytes > this.limits.maxHistoryBytes) {
      let bytes = this.historyBytes;
      let cut = 0;
      const target = this.limits.maxHistoryBytes * 0.75;
      while (cut < this.history.length && bytes > target) bytes -= this.historySizes[cut++]!;
      if (cut > excess) excess = cut;
    }
    if (excess > 0) {
      for (let i = 0; i < excess; i++) this.historyBytes -= this.historySizes[i]!;
      this.history.splice(0, excess);
      this.historyClients.splice(0, excess);
      this.historyMaps.splice(0, excess);
      this.historySizes.splice(0, excess);
      this.historyStart += excess;
      // Clients whose last batch fell out of the history cannot be rebased from before it
      // anyway (`canRebase` needs the steps); forget them so the map does not grow forever.
      for (const [clientID, end] of this.lastEnd) {
        if (end <= this.historyStart) this.lastEnd.delete(clientID);
      }
    }
  }
}

/// Whether `step`'s slice is lost in its JSON: prosemirror-transform writes a replace step's
/// slice only when its size is above zero, and a slice without content as null. Applied as
/// sent, such a step would be journaled and broadcast as another one (with the empty slice):
/// every editor, and a replay of the journal, would apply something else than the server did,
/// and its map in the history (a size of -2 for `{content: [], openStart: 1, openEnd: 1}`)
/// would misplace others' rebased edits. `malformed`: a slice with no content that claims open
/// depths, which no editor makes (refused). `empty`: content of size zero once its open ends
/// are counted (an open paragraph in a ReplaceAroundStep), which prosemirror-transform itself
/// takes for the empty slice (read back from its JSON). null for every other step, whose JSON
/// reads back as the same step: the hot path parses it once.
function lostSlice(step: Step): 'malformed' | 'empty' | null {
  const slice = (step as { slice?: unknown }).slice;
  if (!(slice instanceof Slice) || slice.size > 0) return null;
  if (slice.content.size === 0) {
    return slice.openStart > 0 || slice.openEnd > 0 ? 'malformed' : null;
  }
  return 'empty';
}
