import { Node, type Schema } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import { segmentBytes } from '../stores/archive.js';
import { emptyDoc } from '../rooms/restore.js';
import type {
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  Snapshot,
  Store,
} from '../stores/store.js';

// Retention: how a document's archived history is thinned out with age and size. Steps older
// than the retention are coarsened to one checkpoint per coarse window of activity (a window
// records who wrote and when, the versions inside it are gone); named versions always end a
// window, so they stay rebuildable. A history still over its byte limit is coarsened from its
// oldest end whatever the age, then its oldest unnamed checkpoints are dropped. One rewrite
// per run, compare-and-set on the archive's generation.

/// What retention is told: the limits, the clock's now, and how checkpoints are made.
export interface RetentionOptions {
  retentionMs: number;
  coarseMs: number;
  maxBytes: number;
  now: number;
  schema: Schema;
  schemaVersion: number;
}

/// What one run did: segments coarsened (their steps dropped) and checkpoints dropped, and the
/// archive's estimated size before and after. Null when there was nothing to do.
export interface RetentionOutcome {
  coarsened: number;
  dropped: number;
  bytesBefore: number;
  bytesAfter: number;
}

/// A window being built, with its coarse index (`at / coarseMs`, rounded down).
interface OpenWindow extends CoarseWindow {
  index: number;
}

/// Applies retention to `docId`'s archive once. Resolves with what it did (null: nothing, or
/// another run got there first); rejects as the store does, and with a `TypeError` for a
/// stored step that does not apply (the history is damaged; nothing is written).
export async function retainHistory(
  store: Store,
  docId: string,
  options: RetentionOptions,
): Promise<RetentionOutcome | null> {
  const archive = store.archive;
  if (!archive) return null;
  const stored = await store.load(docId);
  if (!stored) return null;
  const [stats, bases, windows, names] = await Promise.all([
    archive.stats(docId),
    archive.bases(docId),
    archive.windows(docId),
    archive.names(docId),
  ]);
  const named = new Set(names.map((name) => name.version));
  const live = stored.snapshot ? stored.snapshot.version : 0;
  const cutoff = options.now - options.retentionMs;
  let bytes = stats.bytes;
  // The oldest run of segments that still hold steps, as far as age or size says to coarsen.
  const run: HistorySegment[] = [];
  // Segments below the last window's end are checkpoints coarsening left (the segment at its
  // end still holds steps): known without reading them.
  const coarseEnd = windows.length > 0 ? windows[windows.length - 1]!.toVersion : 0;
  let i = 0;
  while (i < bases.length && bases[i]! < coarseEnd) i++;
  const coarse = bases.slice(0, i);
  for (; i < bases.length; i++) {
    const segment = await archive.segment(docId, bases[i]!);
    if (!segment) return null;
    if (segment.entries.length === 0) break;
    const old = segment.entries.every((entry) => (entry.at ?? 0) < cutoff);
    if (!old && bytes <= options.maxBytes) break;
    run.push(segment);
    bytes -= segmentBytes(segment);
  }
  const end = i < bases.length ? bases[i]! : live;
  const rewrite = run.length > 0 ? coarsen(run, end, windows, named, stored.epoch, options) : null;
  const add = rewrite ? rewrite.add : [];
  for (const segment of add) bytes += segmentBytes(segment);
  // Still too large: the oldest checkpoints go, but a named version's.
  const remove = run.map((segment) => segment.baseVersion);
  let dropped = 0;
  for (let c = 0; c < coarse.length && bytes > options.maxBytes; c++) {
    if (named.has(coarse[c]!)) continue;
    const segment = await archive.segment(docId, coarse[c]!);
    if (!segment) continue;
    remove.push(coarse[c]!);
    bytes -= segmentBytes(segment);
    dropped++;
  }
  if (remove.length === 0) return null;
  const written = await write(archive, docId, stats.generation, {
    remove,
    add,
    windows: rewrite ? rewrite.windows : windows,
  });
  if (!written) return null;
  return { coarsened: run.length, dropped, bytesBefore: stats.bytes, bytesAfter: bytes };
}

function write(
  archive: HistoryArchive,
  docId: string,
  generation: number,
  change: { remove: number[]; add: HistorySegment[]; windows: CoarseWindow[] },
): Promise<boolean> {
  return archive.rewrite(docId, generation, change);
}

/// Replays `run` (contiguous segments ending at `end`) into coarse windows: returns the
/// checkpoint segments to add and the complete window list. Continues the last stored window
/// when it ends where the run starts, in the same coarse window, at an unnamed version.
function coarsen(
  run: readonly HistorySegment[],
  end: number,
  stored: readonly CoarseWindow[],
  named: ReadonlySet<number>,
  epoch: string,
  options: RetentionOptions,
): { add: HistorySegment[]; windows: CoarseWindow[] } {
  const { schema, coarseMs } = options;
  const first = run[0]!;
  let doc = first.checkpoint ? Node.fromJSON(schema, first.checkpoint.doc) : emptyDoc(schema);
  let version = first.baseVersion;
  const windows = stored.slice();
  const add: HistorySegment[] = [];
  const last = windows[windows.length - 1];
  let open: OpenWindow | null = null;
  const checkpoint = (at: number): HistorySegment => ({
    baseVersion: version,
    checkpoint: snapshotAt(doc, version, epoch, at, options.schemaVersion),
    entries: [],
  });
  for (const segment of run) {
    for (const entry of segment.entries) {
      const entryEnd = entry.baseVersion + entry.steps.length;
      if (entryEnd <= version) continue;
      if (entry.baseVersion > version) throw new TypeError(`history gap at ${version}`);
      const at = entry.at ?? 0;
      const index = Math.floor(at / coarseMs);
      for (let s = version - entry.baseVersion; s < entry.steps.length && version < end; s++) {
        if (!open) {
          if (
            last &&
            last.toVersion === version &&
            !named.has(version) &&
            sameWindow(last, index, coarseMs)
          ) {
            windows.pop();
            open = { ...last, users: last.users.slice(), index };
          } else {
            // The run's first version keeps its checkpoint: an older window may end there.
            add.push(checkpoint(at));
            open = newWindow(version, at, index);
          }
        } else if (open.index !== index || named.has(version)) {
          windows.push(closed(open, version));
          add.push(checkpoint(at));
          open = newWindow(version, at, index);
        }
        const user = entry.users ? entry.users[s]! : null;
        if (user !== null && !open.users.includes(user)) open.users.push(user);
        open.startedAt = Math.min(open.startedAt, at);
        open.endedAt = Math.max(open.endedAt, at);
        const result = Step.fromJSON(schema, entry.steps[s]).apply(doc);
        if (!result.doc) throw new TypeError(`history step ${version} does not apply`);
        doc = result.doc;
        version++;
      }
    }
  }
  if (version < end) throw new TypeError(`history gap at ${version}`);
  if (open) windows.push(closed(open, version));
  return { add, windows };
}

function sameWindow(window: CoarseWindow, index: number, coarseMs: number): boolean {
  return Math.floor(window.endedAt / coarseMs) === index;
}

function newWindow(version: number, at: number, index: number): OpenWindow {
  return { fromVersion: version, toVersion: version, startedAt: at, endedAt: at, users: [], index };
}

function closed(open: OpenWindow, toVersion: number): CoarseWindow {
  const { fromVersion, startedAt, endedAt, users } = open;
  return { fromVersion, toVersion, startedAt, endedAt, users };
}

function snapshotAt(
  doc: Node,
  version: number,
  epoch: string,
  savedAt: number,
  schemaVersion: number,
): Snapshot {
  return { doc: doc.toJSON() as Snapshot['doc'], version, epoch, schemaVersion, savedAt };
}
