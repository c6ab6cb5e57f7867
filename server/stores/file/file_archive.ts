import { mkdir, open, readdir, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSegment, encodeSegment, segmentOf } from '../archive.js';
import { entriesAfter } from '../journal_entry.js';
import type {
  ArchiveRewrite,
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  JournalEntry,
  StoredName,
} from '../store.js';
import type { DocFiles } from './doc_files.js';
import { syncDirectory } from './durable_write.js';
import { errorCode } from './failures.js';
import { parseJournalText, parseStateText } from './format.js';
import { readJournal } from './reader.js';

// `FileStore`'s history archive: one directory per document next to its own files
// (`<base>.history/`), holding a file per segment (`<baseVersion>.seg`, as `encodeSegment`), the coarse
// windows (`windows.json`) and the named versions (`names.json`). Every file is written to a
// temporary name, fsync'd and renamed, then the directory fsync'd: a crash leaves the old file
// or the new one. One process per data directory, so the rewrite's generation is kept here.

/// The archive of a `FileStore`, over its documents' files (`docFiles` names them).
export class FileArchive implements HistoryArchive {
  private readonly generations = new Map<string, number>();
  private readonly madeDirs = new Set<string>();

  constructor(private readonly docFiles: (docId: string) => DocFiles) {}

  /// Archives, before a snapshot at `version` replaces the current one, that snapshot and the
  /// entries the new one trims (the journal file's and those still only in the log). Runs in
  /// the document's queue, as the snapshot does; rejects with the file system's error, and the
  /// snapshot is then not written either.
  async keepBeforeSnapshot(doc: DocFiles, version: number): Promise<void> {
    let previous = null;
    try {
      previous = parseStateText(await readFile(doc.statePath, 'utf8'), doc.statePath).snapshot;
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') throw error;
    }
    const journal: JournalEntry[] = await readJournal(doc.journalPath(doc.generation));
    const logged = doc.logged.map((entry) => entry.line).join('');
    for (const entry of parseJournalText(logged, logged.length, 'the write-ahead log'))
      if (journal.length === 0 || entry.baseVersion >= lastEnd(journal)) journal.push(entry);
    const from = previous ? previous.version : 0;
    const segment = segmentOf(previous, entriesAfter(journal, from), version);
    if (segment) await this.write(doc, `${segment.baseVersion}.seg`, encodeSegment(segment));
  }

  async bases(docId: string): Promise<number[]> {
    let names: string[];
    try {
      names = await readdir(this.dir(this.docFiles(docId)));
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return [];
      throw error;
    }
    const bases: number[] = [];
    for (const name of names) {
      const match = /^(\d+)\.seg$/.exec(name);
      if (match) bases.push(Number(match[1]));
    }
    return bases.sort((a, b) => a - b);
  }

  async segment(
    docId: string,
    baseVersion: number,
    withCheckpoint = true,
  ): Promise<HistorySegment | null> {
    const text = await this.read(this.docFiles(docId), `${baseVersion}.seg`);
    return text === null ? null : decodeSegment(baseVersion, text, withCheckpoint);
  }

  async windows(docId: string): Promise<CoarseWindow[]> {
    const text = await this.read(this.docFiles(docId), 'windows.json');
    return text === null ? [] : (JSON.parse(text) as CoarseWindow[]);
  }

  async names(docId: string): Promise<StoredName[]> {
    const text = await this.read(this.docFiles(docId), 'names.json');
    return text === null ? [] : (JSON.parse(text) as StoredName[]);
  }

  async addName(docId: string, name: StoredName): Promise<void> {
    const names = (await this.names(docId)).filter((named) => named.version !== name.version);
    names.push(name);
    await this.write(this.docFiles(docId), 'names.json', JSON.stringify(names));
  }

  async stats(docId: string): Promise<{ bytes: number; generation: number }> {
    const dir = this.dir(this.docFiles(docId));
    let bytes = 0;
    try {
      for (const name of await readdir(dir)) bytes += (await stat(join(dir, name))).size;
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') throw error;
    }
    return { bytes, generation: this.generations.get(docId) ?? 0 };
  }

  async rewrite(docId: string, generation: number, change: ArchiveRewrite): Promise<boolean> {
    if ((this.generations.get(docId) ?? 0) !== generation) return false;
    this.generations.set(docId, generation + 1);
    const doc = this.docFiles(docId);
    // Added first, removed last: a crash between leaves more history than meant, never less.
    for (const segment of change.add)
      await this.write(doc, `${segment.baseVersion}.seg`, encodeSegment(segment));
    await this.write(doc, 'windows.json', JSON.stringify(change.windows));
    const added = new Set(change.add.map((segment) => segment.baseVersion));
    for (const base of change.remove) {
      if (added.has(base)) continue;
      await unlink(join(this.dir(doc), `${base}.seg`)).catch((error: unknown) => {
        if (errorCode(error) !== 'ENOENT') throw error;
      });
    }
    await syncDirectory(this.dir(doc));
    return true;
  }

  private dir(doc: DocFiles): string {
    return join(doc.dir, `${doc.base}.history`);
  }

  private async read(doc: DocFiles, name: string): Promise<string | null> {
    try {
      return await readFile(join(this.dir(doc), name), 'utf8');
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return null;
      throw error;
    }
  }

  /// Replaces the archive file `name` of `doc` durably.
  private async write(doc: DocFiles, name: string, text: string): Promise<void> {
    const dir = this.dir(doc);
    if (!this.madeDirs.has(dir)) {
      await mkdir(dir, { recursive: true });
      await syncDirectory(doc.dir);
      this.madeDirs.add(dir);
    }
    const path = join(dir, name);
    const handle = await open(`${path}.tmp`, 'w');
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(`${path}.tmp`, path);
    await syncDirectory(dir);
  }
}

function lastEnd(journal: readonly JournalEntry[]): number {
  const last = journal[journal.length - 1]!;
  return last.baseVersion + last.steps.length;
}
