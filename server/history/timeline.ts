import { Node, type Schema } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import type { HistoryArchive, JournalEntry, Snapshot, Store } from '../stores/store.js';
import { CodedError } from '../rooms/coded_error.js';
import { emptyDoc } from '../rooms/restore.js';
import type { HistoryStep } from './types.js';

// Reading a stretch of a document's history from its store: the document at one version,
// rebuilt from the nearest checkpoint at or before it, and the attributed steps after it.
// Reads go to the store only (no room), so any node can serve them; they see what is
// durable, which is what editors were shown.

/// A document's history from `fromVersion` on: the document there and the steps up to
/// `toVersion`, each with its author and time.
export interface Stretch {
  /// The document's newest durable version.
  head: number;
  fromVersion: number;
  toVersion: number;
  doc: Node;
  steps: HistoryStep[];
}

/// Reads the document at `fromVersion` and the steps from there to `toVersion` (null: to the
/// head). Rejects with a `CodedError`: `not-found` for a document the store does not know,
/// `bad-request` for versions outside 0..head or out of order, `history-gone` when the store no
/// longer holds what rebuilding them needs (coarsened, beyond retention, or written before
/// history was kept). Store failures reject as the store does.
export async function readStretch(
  store: Store,
  schema: Schema,
  docId: string,
  fromVersion: number,
  toVersion: number | null,
): Promise<Stretch> {
  const stored = await store.load(docId);
  if (!stored) throw new CodedError('not-found');
  const head = stored.version;
  const to = toVersion ?? head;
  checkVersion(fromVersion, head);
  checkVersion(to, head);
  if (to < fromVersion)
    throw new CodedError('bad-request', `version ${to} is before ${fromVersion}`);
  const live = stored.snapshot ? stored.snapshot.version : 0;
  let checkpoint: Snapshot | null = stored.snapshot;
  let base = live;
  // Entry lists to take steps from, in version order.
  const sources: (readonly JournalEntry[])[] = [];
  if (fromVersion < live || (!stored.snapshot && firstBase(stored.journal) > 0)) {
    const archived = await fromArchive(store.archive, docId, fromVersion, to, live);
    checkpoint = archived.checkpoint;
    base = archived.base;
    sources.push(...archived.sources);
  }
  sources.push(stored.journal);
  if (!checkpoint && base !== 0) throw gone(fromVersion);
  let doc = checkpoint ? Node.fromJSON(schema, checkpoint.doc) : emptyDoc(schema);
  const steps: HistoryStep[] = [];
  let version = base;
  for (const entries of sources) {
    for (const entry of entries) {
      const end = entry.baseVersion + entry.steps.length;
      if (end <= version) continue;
      if (entry.baseVersion > version) throw gone(version < fromVersion ? fromVersion : version);
      for (let i = version - entry.baseVersion; i < entry.steps.length && version < to; i++) {
        const step = Step.fromJSON(schema, entry.steps[i]);
        if (version < fromVersion) {
          const result = step.apply(doc);
          if (!result.doc) throw new TypeError(`history step ${version} does not apply`);
          doc = result.doc;
        } else {
          steps.push({
            step,
            clientID: entry.clientIDs[i]!,
            user: entry.users ? entry.users[i]! : null,
            at: entry.at ?? 0,
          });
        }
        version++;
      }
      if (version >= to) break;
    }
    if (version >= to) break;
  }
  if (version < to) throw gone(version);
  return { head, fromVersion, toVersion: to, doc, steps };
}

/// Throws `bad-request` unless `version` is a whole number from 0 to `head`.
export function checkVersion(version: number, head: number): void {
  if (!Number.isSafeInteger(version) || version < 0 || version > head) {
    throw new CodedError('bad-request', `version must be a whole number from 0 to ${head}`);
  }
}

/// `history-gone` for `version`.
export function gone(version: number): CodedError {
  return new CodedError(
    'history-gone',
    `version ${version} is no longer kept: its history was coarsened or is past retention`,
  );
}

function firstBase(journal: readonly JournalEntry[]): number {
  return journal.length > 0 ? journal[0]!.baseVersion : 0;
}

/// The checkpoint at or before `from` and the archived entries from there up to the live
/// snapshot (or `to`, when it comes first).
async function fromArchive(
  archive: HistoryArchive | undefined,
  docId: string,
  from: number,
  to: number,
  live: number,
): Promise<{ checkpoint: Snapshot | null; base: number; sources: JournalEntry[][] }> {
  if (!archive) throw gone(from);
  const bases = await archive.bases(docId);
  let at = -1;
  for (let i = 0; i < bases.length && bases[i]! <= from; i++) at = i;
  if (at < 0) throw gone(from);
  const first = await archive.segment(docId, bases[at]!);
  // Coarsened away between the two reads: what it held is gone.
  if (!first) throw gone(from);
  const sources: JournalEntry[][] = [first.entries];
  let reach = reachOf(first.entries, first.baseVersion);
  // Later segments only while the steps needed are not all in hand yet.
  for (let i = at + 1; i < bases.length && reach < Math.min(to, live); i++) {
    const next = await archive.segment(docId, bases[i]!, false);
    // A checkpoint left by coarsening: the steps before it are gone.
    if (!next || next.entries.length === 0) break;
    sources.push(next.entries);
    reach = Math.max(reach, reachOf(next.entries, next.baseVersion));
  }
  return { checkpoint: first.checkpoint, base: first.baseVersion, sources };
}

/// The version the steps of `entries` reach (`base` when there are none).
function reachOf(entries: readonly JournalEntry[], base: number): number {
  const last = entries[entries.length - 1];
  return last ? Math.max(base, last.baseVersion + last.steps.length) : base;
}
