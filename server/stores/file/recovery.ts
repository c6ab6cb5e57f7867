import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { entryEnd } from '../journal_entry.js';
import type { JournalEntry } from '../store.js';
import { DocFiles } from './doc_files.js';
import { syncDirectorySync, writeDurablySync } from './durable_write.js';
import { errorCode } from './failures.js';
import {
  journalEnd,
  journalLine,
  parseJournalText,
  parseStateText,
  stateText,
  type StateFile,
} from './format.js';
import type { LogRecord } from './log_format.js';
import type { FileStoreLogger } from './settings.js';
import { WriteAheadLog } from './write_ahead_log.js';

/// What opening a data directory found: the `unreplayedPath` of every document with log
/// records set aside, and the generation the write-ahead log goes on with.
export interface RecoveredDirectory {
  unreplayed: Set<string>;
  nextGeneration: number;
}

/// Brings a locked data directory back to a state where every acknowledged step is in a
/// document's journal (docs/file-store.md, "Recovery"): removes the temporary files a crash
/// left, replays the write-ahead log into the journals, fsync'd, and deletes the log.
/// Synchronous: it runs once, at open, before anything else may touch the files. A document
/// whose files do not take its records (an unreadable state file, a journal with a gap,
/// records past its end) has them set aside in a file of its own and fails to load as damaged
/// until someone repairs it: the rest of the directory opens, and nothing acknowledged is
/// deleted with the log. Throws the file system's error, and a `TypeError` when the log itself
/// is damaged.
export function recoverDirectory(
  dataDir: string,
  logger: FileStoreLogger | null,
): RecoveredDirectory {
  const unreplayed = removeTemporaryFiles(dataDir, logger);
  const recovered = WriteAheadLog.recover(dataDir);
  replay(dataDir, recovered.records, unreplayed, logger);
  WriteAheadLog.removeSync(dataDir, recovered.files);
  return { unreplayed, nextGeneration: recovered.nextGeneration };
}

/// Deletes `*.tmp` files in the shard directories: state files whose atomic write a crash
/// cut between write and rename. Nothing reads them and a later write replaces them, but
/// they would pile up. Only safe under the lock, when nobody else is writing. One listing
/// per shard (at most 256). Returns the `unreplayedPath` of the documents with log records
/// set aside by an earlier open, which the same listing finds.
function removeTemporaryFiles(dataDir: string, logger: FileStoreLogger | null): Set<string> {
  const unreplayed = new Set<string>();
  let removed = 0;
  for (const shard of readdirSync(dataDir, { withFileTypes: true })) {
    if (!shard.isDirectory() || !/^[0-9a-f]{2}$/.test(shard.name)) continue;
    const dir = join(dataDir, shard.name);
    for (const name of readdirSync(dir)) {
      if (name.endsWith('.unreplayed.wal')) unreplayed.add(join(dir, name));
      if (!name.endsWith('.tmp')) continue;
      unlinkSync(join(dir, name));
      removed++;
    }
  }
  if (removed > 0)
    logger?.warn({ dir: dataDir, removed }, 'file store: removed temporary files left by a crash');
  return unreplayed;
}

/// Replays `records` into their documents' journals, setting aside those of damaged documents
/// (adding them to `unreplayed`).
function replay(
  dataDir: string,
  records: LogRecord[],
  unreplayed: Set<string>,
  logger: FileStoreLogger | null,
): void {
  const byDoc = new Map<string, LogRecord[]>();
  for (const record of records) {
    const list = byDoc.get(record.docId);
    if (list) list.push(record);
    else byDoc.set(record.docId, [record]);
  }
  let replayed = 0;
  const damaged: string[] = [];
  for (const [docId, list] of byDoc) {
    const doc = new DocFiles(dataDir, docId);
    try {
      replayed += replayDocument(doc, list);
    } catch (error) {
      if (!(error instanceof TypeError || error instanceof SyntaxError)) throw error;
      setAside(doc, list);
      unreplayed.add(doc.unreplayedPath);
      damaged.push(`${docId}: ${error.message}`);
    }
  }
  // The shard directories' own entries (new ones, or ones a crash left unsynced).
  syncDirectorySync(dataDir);
  if (replayed > 0)
    logger?.warn(
      { dir: dataDir, entries: replayed, docs: byDoc.size },
      'file store: replayed the write-ahead log a crash left into the journals',
    );
  if (damaged.length > 0)
    logger?.warn(
      { dir: dataDir, damaged },
      'file store: write-ahead log records that do not fit their documents were set aside ' +
        '(*.unreplayed.wal); those documents fail to load until repaired',
    );
}

/// Replays one document's records; returns how many went into its journal. Throws a
/// `TypeError` when they do not fit it.
function replayDocument(doc: DocFiles, list: LogRecord[]): number {
  const state = readStateSync(doc);
  const kept = supersede(list, state.epoch);
  const path = doc.journalPath(state.generation);
  const snapshotVersion = state.snapshot ? state.snapshot.version : -1;
  const journal = readJournalSync(path);
  let version = journalEnd(doc.docId, snapshotVersion, journal);
  let lines = '';
  for (const entry of journal) lines += journalLine(JSON.stringify(entry));
  let count = 0;
  for (const entry of kept) {
    // Already in the journal: a checkpoint wrote it before the crash.
    if (entryEnd(entry) <= version) continue;
    if (entry.baseVersion !== version)
      throw new TypeError(
        `the write-ahead log of ${doc.docId} holds steps at ${entry.baseVersion}, ` +
          `but its journal ends at ${version}`,
      );
    lines += journalLine(JSON.stringify(entry));
    version = entryEnd(entry);
    count++;
  }
  // The journal is written again, whole, to a new generation, even when it already held
  // every record: what reading it shows may be in the page cache only (a process killed
  // before a checkpoint's fsync, or one whose fsync failed, which marks the pages clean), and
  // the log is about to be deleted. Written and fsync'd before the state file names it.
  const generation = state.generation + 1;
  // Whatever a crash left at that generation's path is garbage (a snapshot's file the state
  // never named): removed rather than opened, in case it is not a regular file.
  rmSync(doc.journalPath(generation), { force: true });
  writeDurablySync(doc.journalPath(generation), lines, 'w');
  const temp = doc.statePath + '.tmp';
  writeDurablySync(temp, stateText({ ...state, generation }), 'w');
  renameSync(temp, doc.statePath);
  syncDirectorySync(doc.dir);
  rmSync(path, { force: true });
  return count;
}

/// The state file of a document the log names. Its absence is damage (`TypeError`): the state
/// file is durable before the first record of a document is written. An I/O error is thrown
/// as it is: the open fails, and a later one may succeed.
function readStateSync(doc: DocFiles): StateFile {
  try {
    return parseStateText(readFileSync(doc.statePath, 'utf8'), doc.statePath);
  } catch (error) {
    const code = errorCode(error);
    if (code !== undefined && code !== 'ENOENT') throw error;
    throw new TypeError(`the write-ahead log names ${doc.docId}, whose state file is unreadable`, {
      cause: error,
    });
  }
}

/// The entries of `list` (one document's records, in log order) that stand, in `epoch`. A
/// record at base b supersedes every earlier one at b or later: those were written by rounds
/// that failed (their callers were told so) but reached the disk anyway, and whatever was made
/// after them was made on top of them. Records of one document only ever grow in base
/// otherwise, so this is a stack.
function supersede(list: LogRecord[], epoch: string): JournalEntry[] {
  const kept: JournalEntry[] = [];
  for (const record of list) {
    if (record.epoch !== epoch) continue;
    const base = record.entry.baseVersion;
    while (kept.length > 0 && kept[kept.length - 1]!.baseVersion >= base) kept.pop();
    kept.push(record.entry);
  }
  return kept;
}

/// A journal's whole lines, read synchronously. A torn last line is left in the file: replay
/// writes the entries to a new generation and deletes this one.
function readJournalSync(path: string): JournalEntry[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  }
  return parseJournalText(text, text.lastIndexOf('\n') + 1, path);
}

/// Writes a damaged document's log records to `<doc>.unreplayed.wal` beside its files,
/// durably, before the log that held them is deleted.
function setAside(doc: DocFiles, list: LogRecord[]): void {
  mkdirSync(doc.dir, { recursive: true });
  let text = '';
  for (const { docId, epoch, entry } of list)
    text += WriteAheadLog.line(docId, epoch, JSON.stringify(entry));
  writeDurablySync(doc.unreplayedPath, text, 'a');
  syncDirectorySync(doc.dir);
}
