import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { mkdir, open, rename, unlink } from 'node:fs/promises';
import type { Snapshot } from '../store.js';
import type { DocFiles } from './doc_files.js';
import { stateText, type StateFile } from './format.js';

/// Makes the entries of `dir` (files created, renamed or deleted in it) durable.
export async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/// `syncDirectory`, synchronously, for what a store does once, when it opens.
export function syncDirectorySync(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/// Writes (`w`) or appends (`a`) `text` to the file at `path` and fsyncs it, synchronously:
/// for what the store does once, at open. Throws the file system's error.
export function writeDurablySync(path: string, text: string, flag: 'w' | 'a'): void {
  const fd = openSync(path, flag);
  try {
    let buffer = Buffer.from(text);
    while (buffer.length > 0) buffer = buffer.subarray(writeSync(fd, buffer));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/// How a document's own files reach the disk: every write is fsync'd, and a file counts only
/// once its directory entry (and its shard directory's) is durable too. Each method rejects
/// with the file system's error. A write that fails once the file is open leaves in doubt what
/// the page cache shows of the document's files: the document is then marked `suspect` and
/// `onSuspect` is told, so that a checkpoint writes them again, whole.
export class DurableWriter {
  private readonly dataDir: string;
  private readonly onSuspect: (doc: DocFiles) => void;
  /// Shard directories created and synced by this process.
  private readonly syncedDirs = new Set<string>();

  constructor(dataDir: string, onSuspect: (doc: DocFiles) => void) {
    this.dataDir = dataDir;
    this.onSuspect = onSuspect;
  }

  /// Creates the shard directory `dir` if needed, durably.
  async ensureDir(dir: string): Promise<void> {
    if (this.syncedDirs.has(dir)) return;
    await mkdir(dir, { recursive: true });
    // The shard directory's own entry must reach the disk before files in it count.
    await syncDirectory(this.dataDir);
    this.syncedDirs.add(dir);
  }

  /// Replaces the state file atomically: temp file, fsync, rename, fsync of the directory.
  async writeState(doc: DocFiles, state: StateFile): Promise<void> {
    await this.ensureDir(doc.dir);
    const temp = doc.statePath + '.tmp';
    await this.writeDocFile(doc, temp, 'w', stateText(state));
    try {
      await rename(temp, doc.statePath);
      await syncDirectory(doc.dir);
    } catch (error) {
      this.markSuspect(doc);
      throw error;
    }
  }

  /// Makes `lines` the journal of a new generation after `snapshot`: written and fsync'd
  /// before the state file names it (with that snapshot, and `epoch`), so the switch is
  /// atomic. Every logged entry of that epoch must be in `lines` or under the snapshot. The
  /// file is written even when empty: a file of that generation left by a crash before the
  /// rename must not be picked up. Afterwards the files hold every entry durably: the
  /// document is no longer suspect and its log-only entries are cleared.
  async writeGeneration(
    doc: DocFiles,
    snapshot: Snapshot | null,
    lines: string,
    epoch = doc.epoch,
  ): Promise<void> {
    const generation = doc.generation + 1;
    await this.writeDocFile(doc, doc.journalPath(generation), 'w', lines);
    // writeState syncs the directory after its rename, which also makes the new journal's
    // directory entry durable.
    await this.writeState(doc, { docId: doc.docId, epoch, generation, snapshot });
    const previous = doc.generation;
    doc.generation = generation;
    doc.snapshotVersion = snapshot ? snapshot.version : -1;
    doc.journalEntrySynced = true;
    doc.logged = [];
    doc.suspect = false;
    doc.unsynced = [];
    // Garbage from now on; a leftover (after a crash) is never read, generations only grow.
    await unlink(doc.journalPath(previous)).catch(() => {});
  }

  /// Appends `lines` to the current journal generation, fsync'd.
  async appendLines(doc: DocFiles, lines: string): Promise<void> {
    await this.ensureDir(doc.dir);
    await this.writeDocFile(doc, doc.journalPath(doc.generation), 'a', lines);
    // A new file is only durable once its directory entry is: once per file and process.
    // Failing that, what the file shows is not known to be durable either (a read would take
    // its entries as the journal's and let the log that also holds them go): suspect, so that
    // the next checkpoint writes the journal again, whole, and syncs its directory.
    if (!doc.journalEntrySynced) {
      try {
        await syncDirectory(doc.dir);
      } catch (error) {
        this.markSuspect(doc);
        throw error;
      }
      doc.journalEntrySynced = true;
    }
  }

  /// Writes (`w`) or appends (`a`) `text` to one of the document's files and fsyncs it.
  private async writeDocFile(
    doc: DocFiles,
    path: string,
    flag: 'w' | 'a',
    text: string,
  ): Promise<void> {
    const handle = await open(path, flag);
    try {
      // `writeFile`, not `write`: one write call may stop short (a full disk, a file size
      // limit) without an error, and a journal cut short would pass for a crash's torn line.
      await handle.writeFile(text);
      await handle.sync();
    } catch (error) {
      this.markSuspect(doc);
      throw error;
    } finally {
      await handle.close();
    }
  }

  private markSuspect(doc: DocFiles): void {
    doc.suspect = true;
    this.onSuspect(doc);
  }
}
