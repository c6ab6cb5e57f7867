import type { HistorySegment, JournalEntry, Snapshot } from './store.js';

// How a snapshot's segment is made (the types are in store.ts, with the `HistoryArchive`
// interface; docs/history.md describes the layout on each store).

/// The segment a snapshot archives: the `previous` snapshot (null when none was written) and
/// the entries of `journal` that start before `version`, the new snapshot's (those it trims,
/// and the one it ends inside). Null when there is nothing to keep.
export function segmentOf(
  previous: Snapshot | null,
  journal: readonly JournalEntry[],
  version: number,
): HistorySegment | null {
  const entries = journal.filter((entry) => entry.baseVersion < version);
  if (!previous && entries.length === 0) return null;
  return { baseVersion: previous ? previous.version : 0, checkpoint: previous, entries };
}

/// The stored size of a segment: its JSON's length, as the file store writes it.
export function segmentBytes(segment: HistorySegment): number {
  return JSON.stringify(segment).length;
}
