import type { Node } from 'prosemirror-model';
import { Step, type StepMap } from 'prosemirror-transform';
import { rebaseSteps, schema, type StepJSON } from '../schema/index.js';
import { checkChanged } from './doc_check.js';

/// Limits an authority enforces on what it accepts.
export interface AuthorityLimits {
  /// How many recent steps are kept for catch-up; older ones are forgotten and a client that
  /// needs them gets the whole document instead.
  maxHistorySteps: number;
  /// The largest batch accepted (`too-large` beyond).
  maxStepsPerBatch: number;
  /// The largest document (in `Node.nodeSize`) a batch may produce (`too-large` beyond).
  maxDocSize: number;
  /// How far behind a batch may be and still be rebased by the server rather than refused as
  /// `stale`; 0 keeps prosemirror-collab's rule (accept only at the current version).
  maxRebaseSteps: number;
}

/// The outcome of `Authority.receive`. `steps` are the accepted steps normalised through
/// `Step.toJSON()`: what is broadcast and journaled, never the raw input. `rebased` says the
/// batch was made at an older version and mapped over the steps since.
export type ReceiveOutcome =
  | { ok: true; version: number; doc: Node; steps: StepJSON[]; rebased: boolean }
  | { ok: false; code: 'stale' | 'history-gone'; version: number; message: string }
  | { ok: false; code: 'invalid-step' | 'too-large'; version: number; message: string };

/// Steps since a version, for catch-up; `null` when they are not all held any more.
export interface StepsSince {
  steps: StepJSON[];
  clientIDs: string[];
}

/// The per-document authority: the current document, its version (the count of accepted
/// steps) and a bounded window of recent steps with the clientIDs that made them. It is pure:
/// no sockets, storage or timers. Transport and persistence call into it.
///
/// A batch is applied all or nothing. A batch made at an older version is rebased over the
/// steps since (up to `maxRebaseSteps` behind), exactly as the client would rebase it, instead
/// of being refused: under contention prosemirror-collab's rule (refuse, let the client rebase
/// and resend) costs every editor but one a round trip per broadcast. The client recognises
/// its own steps in the broadcast by its clientID whether the server rebased them or not.
export class Authority {
  doc: Node;
  version: number;
  /// Batches accepted by rebasing, since this authority was made.
  rebasedBatches = 0;
  /// The version before `history[0]`: `history[i]` took the document from
  /// `historyStart + i` to `historyStart + i + 1`.
  private historyStart: number;
  private history: StepJSON[];
  private historyClients: string[];
  private historyMaps: StepMap[];
  /// The version after each client's last accepted batch. A batch from that client made before
  /// it is a resend of something already applied (its acknowledgement was lost, or it is still
  /// being journaled): rebasing it would apply it twice, so it is answered `stale` instead.
  private lastEnd: Map<string, number>;
  private readonly limits: AuthorityLimits;

  constructor(doc: Node, version: number, limits: AuthorityLimits) {
    this.doc = doc;
    this.version = version;
    this.historyStart = version;
    this.history = [];
    this.historyClients = [];
    this.historyMaps = [];
    this.lastEnd = new Map();
    this.limits = limits;
  }

  /// Tries to apply `stepsJSON` (raw JSON from a client) made at `version` by `clientID`.
  /// Never throws for bad input: every refusal is an outcome with a code, and a refused batch
  /// changes nothing.
  receive(version: number, stepsJSON: readonly unknown[], clientID: string): ReceiveOutcome {
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
      return {
        ok: false,
        code: 'too-large',
        version: this.version,
        message: `A batch may hold at most ${this.limits.maxStepsPerBatch} steps`,
      };
    }

    const steps: Step[] = new Array(stepsJSON.length);
    for (let i = 0; i < stepsJSON.length; i++) {
      try {
        steps[i] = Step.fromJSON(schema, stepsJSON[i]);
      } catch (err) {
        return this.invalid(i, (err as Error).message);
      }
    }

    let doc = this.doc;
    let accepted = steps;
    const rebased = version < this.version;
    if (rebased) {
      // Steps that no longer apply once mapped are dropped, as the client's own rebase would
      // drop them. If none is left, the client rebases and resends (or learns it is invalid).
      const result = rebaseSteps(steps, this.historyMaps.slice(version - this.historyStart), doc);
      if (result.steps.length === 0) return this.stale(version);
      accepted = result.steps;
      doc = result.doc;
    } else {
      for (let i = 0; i < steps.length; i++) {
        let result;
        try {
          result = steps[i]!.apply(doc);
        } catch (err) {
          // Positions out of range make `resolve` throw rather than fail softly.
          return this.invalid(i, (err as Error).message);
        }
        if (result.failed !== null || !result.doc) {
          return this.invalid(i, result.failed ?? 'the step produced no document');
        }
        doc = result.doc;
      }
    }
    try {
      // Steps check the content they rebuild, but not everything (attributes set by an
      // AttrStep, marks that a schema forbids in a place): the whole result must be valid.
      // The document before the batch was, so only what the batch rebuilt is checked.
      checkChanged(doc, this.doc);
    } catch (err) {
      return {
        ok: false,
        code: 'invalid-step',
        version: this.version,
        message: `The batch would break the schema: ${(err as Error).message}`,
      };
    }
    if (doc.nodeSize > this.limits.maxDocSize) {
      return {
        ok: false,
        code: 'too-large',
        version: this.version,
        message: `The document would exceed ${this.limits.maxDocSize} positions`,
      };
    }

    const normalized: StepJSON[] = new Array(accepted.length);
    for (let i = 0; i < accepted.length; i++) {
      const step = accepted[i]!;
      normalized[i] = step.toJSON() as StepJSON;
      this.history.push(normalized[i]!);
      this.historyClients.push(clientID);
      this.historyMaps.push(step.getMap());
    }
    this.doc = doc;
    this.version += accepted.length;
    this.lastEnd.set(clientID, this.version);
    if (rebased) this.rebasedBatches++;
    this.trimHistory();
    return { ok: true, version: this.version, doc, steps: normalized, rebased };
  }

  /// Appends steps that are already known to be valid and applied to `doc` (replayed from the
  /// journal on load), so that they serve catch-up.
  remember(steps: readonly Step[], clientIDs: readonly string[], doc: Node): void {
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i]!;
      this.history.push(step.toJSON() as StepJSON);
      this.historyClients.push(clientIDs[i]!);
      this.historyMaps.push(step.getMap());
      this.lastEnd.set(clientIDs[i]!, this.version + i + 1);
    }
    this.version += steps.length;
    this.doc = doc;
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
  /// loses nothing a client was promised. `doc` is the document at `version`.
  rewind(version: number, doc: Node): void {
    if (version > this.version || version < this.historyStart) {
      throw new RangeError(
        `Cannot rewind to ${version} (history ${this.historyStart}–${this.version})`,
      );
    }
    const keep = version - this.historyStart;
    this.history.length = keep;
    this.historyClients.length = keep;
    this.historyMaps.length = keep;
    this.version = version;
    this.doc = doc;
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

  private stale(version: number): ReceiveOutcome {
    return {
      ok: false,
      code: 'stale',
      version: this.version,
      message: `Batch made at version ${version}; the document is at ${this.version}`,
    };
  }

  private invalid(index: number, reason: string): ReceiveOutcome {
    return {
      ok: false,
      code: 'invalid-step',
      version: this.version,
      message: `Step ${index}: ${reason}`,
    };
  }

  private trimHistory(): void {
    // Cut in chunks so that the copy is amortised over many steps instead of paid per step.
    const excess = this.history.length - this.limits.maxHistorySteps;
    if (excess > 0 && (excess >= 1024 || excess * 8 >= this.limits.maxHistorySteps)) {
      this.history.splice(0, excess);
      this.historyClients.splice(0, excess);
      this.historyMaps.splice(0, excess);
      this.historyStart += excess;
      // Clients whose last batch fell out of the history cannot be rebased from before it
      // anyway (`canRebase` needs the steps); forget them so the map does not grow forever.
      for (const [clientID, end] of this.lastEnd) {
        if (end <= this.historyStart) this.lastEnd.delete(clientID);
      }
    }
  }
}
