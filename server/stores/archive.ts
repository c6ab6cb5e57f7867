import { entryEnd, parseJournalEntry, parseSnapshot } from './journal_entry.js';
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

/// A segment as the stores write it (Redis's snapshot script, the file store's segment files):
/// the checkpoint's JSON ('' for none), then each entry as Redis's journal holds it
/// (`<end>\n<entry JSON>`), one per line. The checkpoint first, on a line of its own, lets a
/// reader that wants only the steps skip parsing the whole document.
export function encodeSegment(segment: HistorySegment): string {
  let text = segment.checkpoint ? JSON.stringify(segment.checkpoint) : '';
  for (const entry of segment.entries) text += `\n${entryEnd(entry)}\n${JSON.stringify(entry)}`;
  return text;
}

/// Reads back a segment written by `encodeSegment` (or the snapshot script), its checkpoint
/// left null unless `withCheckpoint`. Throws a `TypeError` for text that is not one.
export function decodeSegment(
  baseVersion: number,
  text: string,
  withCheckpoint = true,
): HistorySegment {
  const lines = text.split('\n');
  if (lines.length % 2 !== 1) throw new TypeError('a history segment is cut short');
  const checkpoint =
    lines[0] === '' || !withCheckpoint ? null : parseSnapshot(JSON.parse(lines[0]!));
  const entries: JournalEntry[] = [];
  for (let i = 1; i < lines.length; i += 2)
    entries.push(parseJournalEntry(JSON.parse(lines[i + 1]!)));
  return { baseVersion, checkpoint, entries };
}
