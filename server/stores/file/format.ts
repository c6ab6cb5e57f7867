import { crc32 } from 'node:zlib';
import { entryEnd, parseJournalEntry, parseSnapshot } from '../journal_entry.js';
import type { JournalEntry, Snapshot } from '../store.js';

// The on-disk format of a document's own files (docs/file-store.md): journal lines and the
// state file, each JSON after its CRC-32.

/// The state file of a document, written atomically: which journal generation is current,
/// and the newest snapshot.
export interface StateFile {
  docId: string;
  epoch: string;
  generation: number;
  snapshot: Snapshot | null;
}

/// `json` after its CRC-32: how journal lines and state files are written, so that a change on
/// the disk that still parses (a flipped digit in a step or a snapshot) is found when the file
/// is read, rather than served as a step or a document nobody made.
function withChecksum(json: string): string {
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}`;
}

const checksum = /^[0-9a-f]{8} $/;

/// The JSON of `text` from `start` to `end` written by `withChecksum`, checked. Text without a
/// checksum (it starts with '{') is returned unchecked: directories written by earlier versions
/// hold such files. Throws a `TypeError` naming `what` when the checksum does not match.
export function checkedJSON(text: string, start: number, end: number, what: string): string {
  if (text.charCodeAt(start) === 0x7b) return text.slice(start, end);
  const json = text.slice(start + 9, end);
  const prefix = text.slice(start, start + 9);
  if (!checksum.test(prefix) || crc32(json) !== parseInt(prefix, 16))
    throw new TypeError(`corrupt ${what}: checksum mismatch`);
  return json;
}

/// One line of a document's journal file, newline included.
export function journalLine(json: string): string {
  return withChecksum(json) + '\n';
}

/// The entries of a journal file's text up to `complete` (the end of its last whole line).
/// Throws a `TypeError` naming `path` for a line that does not check or parse.
export function parseJournalText(text: string, complete: number, path: string): JournalEntry[] {
  const entries: JournalEntry[] = [];
  for (let start = 0; start < complete;) {
    const end = text.indexOf('\n', start);
    const json = checkedJSON(text, start, end, `journal line in ${path}`);
    try {
      entries.push(parseJournalEntry(JSON.parse(json)));
    } catch (error) {
      throw new TypeError(`corrupt journal line in ${path}`, { cause: error });
    }
    start = end + 1;
  }
  return entries;
}

/// The version a journal ends at, after a snapshot at `snapshotVersion` (-1: none). Entries
/// are contiguous; the first may start inside the snapshot (it was kept whole). A gap throws a
/// `TypeError`: it is damaged data, not an unreachable store, and retrying cannot help.
export function journalEnd(
  docId: string,
  snapshotVersion: number,
  journal: JournalEntry[],
): number {
  let version = Math.max(snapshotVersion, 0);
  for (let i = 0; i < journal.length; i++) {
    const entry = journal[i]!;
    if (i === 0 ? entry.baseVersion > version : entry.baseVersion !== version)
      throw new TypeError(`journal of ${docId} has a gap at ${entry.baseVersion}`);
    version = entryEnd(entry);
  }
  return version;
}

/// A state file's text: checksummed like a journal line (the snapshot in it is a whole document).
export function stateText(state: StateFile): string {
  return withChecksum(JSON.stringify(state));
}

/// Reads a state file's text. Throws a `TypeError` or `SyntaxError` naming `path` when it
/// does not check or parse.
export function parseStateText(text: string, path: string): StateFile {
  return parseState(JSON.parse(checkedJSON(text, 0, text.length, `state file ${path}`)));
}

function parseState(raw: unknown): StateFile {
  if (typeof raw !== 'object' || raw === null) throw new TypeError('state file: not an object');
  const { docId, epoch, generation, snapshot } = raw as Record<string, unknown>;
  if (typeof docId !== 'string' || typeof epoch !== 'string' || !Number.isSafeInteger(generation))
    throw new TypeError('state file: bad fields');
  return {
    docId,
    epoch,
    generation: generation as number,
    snapshot: snapshot === null ? null : parseSnapshot(snapshot),
  };
}
