import { entryEnd, entryOf } from '../journal_entry.js';
import type { AppendOutcome } from '../store.js';
import type { DocFiles, LoggedEntry, PendingAppend } from './doc_files.js';
import { journalLine } from './format.js';
import { logLine } from './log_format.js';

/// What one group commit of a document's pending appends decided, before anything is written.
export interface AppendBatch {
  /// The document's position once the accepted appends are durable.
  exists: boolean;
  epoch: string;
  version: number;
  /// The first accepted append creates the document: its state file is written first.
  create: boolean;
  /// The appends accepted, each with the version it brings the document to.
  accepted: { pending: PendingAppend; version: number }[];
  /// For each append of the batch, in order, its refusal, or null when it was accepted.
  outcomes: (AppendOutcome | null)[];
  /// The accepted entries, as `doc.logged` will hold them.
  logged: LoggedEntry[];
  /// The accepted entries' log lines, for one commit.
  records: string;
}

/// The appends pending on `doc`, marked running; those whose callers gave up while
/// they waited are left out. Empties `doc.pending`.
export function takePending(doc: DocFiles): PendingAppend[] {
  const batch: PendingAppend[] = [];
  for (const pending of doc.pending) {
    // An append whose caller timed out while it waited must not be written now.
    if (pending.state !== 'queued') continue;
    pending.state = 'running';
    batch.push(pending);
  }
  doc.pending = [];
  return batch;
}

/// Applies `batch` in order against the version `doc` holds in memory (a compare-and-set on
/// epoch and base version, each accepted append moving the version on) and returns what to
/// write and answer. Touches neither `doc` nor the disk.
export function planAppends(doc: DocFiles, batch: PendingAppend[]): AppendBatch {
  const plan: AppendBatch = {
    exists: doc.exists,
    epoch: doc.epoch,
    version: doc.version,
    create: false,
    accepted: [],
    outcomes: [],
    logged: [],
    records: '',
  };
  for (const pending of batch) {
    const request = pending.request;
    if (!plan.exists) {
      if (request.baseVersion !== 0) {
        plan.outcomes.push({ ok: false, reason: 'conflict', version: 0, epoch: null });
        continue;
      }
      plan.exists = true;
      plan.create = true;
      plan.epoch = request.epoch;
    } else if (request.epoch !== plan.epoch || request.baseVersion !== plan.version) {
      plan.outcomes.push({
        ok: false,
        reason: 'conflict',
        version: plan.version,
        epoch: plan.epoch,
      });
      continue;
    }
    const entry = entryOf(request);
    const json = JSON.stringify(entry);
    plan.logged.push({
      epoch: plan.epoch,
      baseVersion: request.baseVersion,
      end: entryEnd(entry),
      line: journalLine(json),
    });
    plan.records += logLine(doc.docId, plan.epoch, json);
    plan.version = entryEnd(entry);
    plan.accepted.push({ pending, version: plan.version });
    plan.outcomes.push(null);
  }
  return plan;
}

/// Settles the refused appends of `batch` with their outcomes (see `AppendBatch.outcomes`).
export function answerRefused(batch: PendingAppend[], outcomes: (AppendOutcome | null)[]): void {
  for (let i = 0; i < batch.length; i++) if (outcomes[i]) batch[i]!.resolve(outcomes[i]!);
}
