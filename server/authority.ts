import type { Node } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import { schema, type StepJSON } from '../schema/index.js';
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
}

/// The outcome of `Authority.receive`. `steps` are the accepted steps normalised through
/// `Step.toJSON()`: what is broadcast and journaled, never the raw input.
export type ReceiveOutcome =
  | { ok: true; version: number; doc: Node; steps: StepJSON[] }
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
/// A batch is applied all or nothing, only at the current version (prosemirror-collab's rule).
/// Server-side rebasing of a stale batch would slot in where `receive` answers `stale`: map the
/// batch through `stepsSince(version)` and apply what survives.
export class Authority {
  doc: Node;
  version: number;
  /// The version before `history[0]`: `history[i]` took the document from
  /// `historyStart + i` to `historyStart + i + 1`.
  private historyStart: number;
  private history: StepJSON[];
  private historyClients: string[];
  private readonly limits: AuthorityLimits;

  constructor(doc: Node, version: number, limits: AuthorityLimits) {
    this.doc = doc;
    this.version = version;
    this.historyStart = version;
    this.history = [];
    this.historyClients = [];
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
    if (version < this.version) {
      return {
        ok: false,
        code: 'stale',
        version: this.version,
        message: `Batch made at version ${version}; the document is at ${this.version}`,
      };
    }
    if (stepsJSON.length > this.limits.maxStepsPerBatch) {
      return {
        ok: false,
        code: 'too-large',
        version: this.version,
        message: `A batch may hold at most ${this.limits.maxStepsPerBatch} steps`,
      };
    }

    let doc = this.doc;
    const normalized: StepJSON[] = new Array(stepsJSON.length);
    for (let i = 0; i < stepsJSON.length; i++) {
      let step: Step;
      try {
        step = Step.fromJSON(schema, stepsJSON[i]);
      } catch (err) {
        return this.invalid(i, (err as Error).message);
      }
      let result;
      try {
        result = step.apply(doc);
      } catch (err) {
        // Positions out of range make `resolve` throw rather than fail softly.
        return this.invalid(i, (err as Error).message);
      }
      if (result.failed !== null || !result.doc) {
        return this.invalid(i, result.failed ?? 'the step produced no document');
      }
      doc = result.doc;
      normalized[i] = step.toJSON() as StepJSON;
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

    this.doc = doc;
    this.version += normalized.length;
    for (let i = 0; i < normalized.length; i++) {
      this.history.push(normalized[i]!);
      this.historyClients.push(clientID);
    }
    this.trimHistory();
    return { ok: true, version: this.version, doc, steps: normalized };
  }

  /// Appends steps that are already known to be valid and applied to `doc` (replayed from the
  /// journal on load), so that they serve catch-up.
  remember(steps: readonly StepJSON[], clientIDs: readonly string[], doc: Node): void {
    for (let i = 0; i < steps.length; i++) {
      this.history.push(steps[i]!);
      this.historyClients.push(clientIDs[i]!);
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
    this.version = version;
    this.doc = doc;
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
      this.historyStart += excess;
    }
  }
}
