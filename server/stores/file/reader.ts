import { open, readFile } from 'node:fs/promises';
import { entriesAfter } from '../journal_entry.js';
import type { JournalEntry, StoredDocument } from '../store.js';
import type { DocFiles, LoggedEntry } from './doc_files.js';
import { errorCode } from './failures.js';
import { journalEnd, parseJournalText, parseStateText, type StateFile } from './format.js';

/// Reads the document's files into `doc` and returns what `Store.load` returns: null when it
/// has no state file. The entries `doc` holds in the write-ahead log only follow the journal
/// file's; those the file already holds leave `logged`. Throws a `TypeError` when the document
/// is damaged or has records set aside at open (`unreplayed` holds its `unreplayedPath`), and
/// the file system's error when a file cannot be read.
export async function readDocument(
  doc: DocFiles,
  unreplayed: ReadonlySet<string>,
): Promise<StoredDocument | null> {
  if (unreplayed.has(doc.unreplayedPath))
    throw new TypeError(
      `${doc.docId} has acknowledged steps set aside in ${doc.unreplayedPath}: repair it first`,
    );
  let state: StateFile;
  try {
    state = parseStateText(await readFile(doc.statePath, 'utf8'), doc.statePath);
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw error;
    doc.known = true;
    doc.exists = false;
    return null;
  }
  const journal = await readJournal(doc.journalPath(state.generation));
  const snapshotVersion = state.snapshot ? state.snapshot.version : -1;
  const version = followLogged(doc, state.epoch, journal, snapshotVersion);
  doc.known = true;
  doc.exists = true;
  doc.epoch = state.epoch;
  doc.version = version;
  doc.snapshotVersion = snapshotVersion;
  // Whether that file's directory entry is on disk is not known: a snapshot may have failed
  // between naming it and syncing the directory.
  if (doc.generation !== state.generation) doc.journalEntrySynced = false;
  doc.generation = state.generation;
  return {
    epoch: state.epoch,
    version,
    snapshot: state.snapshot,
    journal: state.snapshot ? entriesAfter(journal, state.snapshot.version) : journal,
  };
}

/// Appends to `journal` (the file's entries) those of `doc.logged` that follow it, keeps only
/// those in `logged`, and moves to `unsynced` the ones the log alone holds durably although
/// the file shows them. Returns the version the document ends at.
function followLogged(
  doc: DocFiles,
  epoch: string,
  journal: JournalEntry[],
  snapshotVersion: number,
): number {
  const fileVersion = journalEnd(doc.docId, snapshotVersion, journal);
  // Entries only in the log follow; any the journal already holds (a snapshot that failed
  // after its new generation was named) are dropped from memory.
  let version = fileVersion;
  const logged: LoggedEntry[] = [];
  const unsynced: LoggedEntry[] = [];
  for (const entry of doc.logged) {
    if (entry.epoch !== epoch) {
      // Appended before a reset whose state file landed but whose directory sync failed
      // (the document is suspect): the reset's snapshot holds them in the new epoch, and
      // the disk may still hold the old state file. They are not this history's, so they
      // are never part of its journal; the log keeps them, in their own epoch, until the
      // state file is written and synced again.
      unsynced.push(entry);
      continue;
    }
    if (entry.end <= fileVersion) {
      // After a failed write, the file may show what only the page cache holds.
      if (doc.suspect) unsynced.push(entry);
      continue;
    }
    if (entry.baseVersion !== version)
      throw new TypeError(`logged entries of ${doc.docId} do not follow its journal`);
    journal.push(...parseJournalText(entry.line, entry.line.length, 'the write-ahead log'));
    logged.push(entry);
    version = entry.end;
  }
  doc.logged = logged;
  for (const entry of unsynced) doc.unsynced.push(entry);
  return version;
}

/// Reads a journal file (a missing file is an empty journal). An incomplete last line is the
/// trace of a crash during an append that was never acknowledged: it is cut off the file, so
/// that the next append does not glue a line onto it.
export async function readJournal(path: string): Promise<JournalEntry[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  }
  const complete = text.lastIndexOf('\n') + 1;
  if (complete < text.length) {
    const handle = await open(path, 'r+');
    try {
      await handle.truncate(Buffer.byteLength(text.slice(0, complete)));
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
  return parseJournalText(text, complete, path);
}
