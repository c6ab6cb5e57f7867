import type { Schema } from 'prosemirror-model';
import type { Logger } from 'pino';
import type { Store } from '../stores/store.js';
import { retainHistory, type RetentionOutcome } from './retention.js';

/// The retention limits, as the settings name them.
export interface RetentionLimits {
  historyRetentionDays: number;
  historyCoarseMinutes: number;
  historyMaxBytes: number;
}

/// How long a `fresh` run on a document stands, and how many documents' runs are remembered.
const freshForMs = 60_000;
const freshKept = 10_000;

/// Runs retention for a document after its snapshots (which is when its archive grows), one
/// run per document at a time: a snapshot landing while one runs asks for one more run after
/// it. Failures are logged; the next snapshot tries again.
export class RetentionRunner {
  private readonly running = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  /// When `fresh` last ran retention on each document (clock ms), oldest first.
  private readonly checked = new Map<string, number>();

  constructor(
    private readonly deps: {
      store: Store;
      schema: Schema;
      schemaVersion: number;
      limits: RetentionLimits;
      clock: () => number;
      log: Logger;
    },
  ) {}

  /// Asks for a run on `docId` (now, or after the one in flight).
  schedule(docId: string): void {
    if (!this.deps.store.archive) return;
    if (this.running.has(docId)) {
      this.again.add(docId);
      return;
    }
    const run = this.runOnce(docId).finally(() => {
      this.running.delete(docId);
      if (this.again.delete(docId)) this.schedule(docId);
    });
    this.running.set(docId, run);
  }

  /// Runs retention on `docId` and waits for it, unless `fresh` did in the last minute: a
  /// history read calls it first, so that a document no snapshot has touched since its steps
  /// passed retention (nobody edits it) never answers from them. Never rejects: a failed run is
  /// logged and the read goes on with what is stored.
  async fresh(docId: string): Promise<void> {
    if (!this.deps.store.archive) return;
    const now = this.deps.clock();
    const last = this.checked.get(docId);
    if (last !== undefined && now - last >= 0 && now - last < freshForMs) return;
    this.checked.delete(docId);
    this.checked.set(docId, now);
    if (this.checked.size > freshKept) this.checked.delete(this.checked.keys().next().value!);
    this.schedule(docId);
    await this.running.get(docId);
  }

  /// Resolves once no run is in flight (for shutdown and tests).
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running.values());
  }

  /// One run on `docId` now; resolves with what it did. Rejects as `retainHistory` does.
  run(docId: string): Promise<RetentionOutcome | null> {
    const { store, schema, schemaVersion, limits, clock } = this.deps;
    return retainHistory(store, docId, {
      retentionMs: limits.historyRetentionDays * 86_400_000,
      coarseMs: limits.historyCoarseMinutes * 60_000,
      maxBytes: limits.historyMaxBytes,
      now: clock(),
      schema,
      schemaVersion,
    });
  }

  private async runOnce(docId: string): Promise<void> {
    try {
      const outcome = await this.run(docId);
      if (outcome) this.deps.log.debug({ doc: docId, ...outcome }, 'history thinned');
    } catch (err) {
      this.deps.log.warn(
        { doc: docId, err },
        'history retention failed; retried after the next snapshot',
      );
    }
  }
}
