import { createHash } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { docIdPattern } from '../schema/index.js';
import { entriesAfter, entryEnd, parseJournalEntry, parseSnapshot } from './journal_entry.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type JournalEntry,
  type Snapshot,
  type SnapshotOutcome,
  type Store,
  type StoredDocument,
} from './store.js';

/// Where and how the file store keeps documents.
export interface FileStoreOptions {
  /// The directory holding every document (created when missing). One process per directory:
  /// the compare-and-set is enforced in memory.
  dataDir: string;
  /// How many documents' versions to keep in memory when idle. A document dropped from the
  /// cache is read again from disk on its next use. Default 10,000.
  maxCachedDocs?: number;
}

/// The state file of a document, written atomically: which journal generation is current,
/// and the newest snapshot.
interface StateFile {
  docId: string;
  epoch: string;
  generation: number;
  snapshot: Snapshot | null;
}

interface PendingAppend {
  request: AppendRequest;
  resolve: (outcome: AppendOutcome) => void;
  reject: (error: unknown) => void;
}

/// One document's files and what this process knows of them. Operations on a document run one
/// at a time, in order, on `tail`; `known` is false until the files were read (and again after
/// a failed write, when the disk may hold more than memory says).
class DocFiles {
  readonly docId: string;
  readonly dir: string;
  readonly base: string;
  tail: Promise<void> = Promise.resolve();
  /// Operations queued or running: a document with none may be evicted from the cache.
  active = 0;
  pending: PendingAppend[] = [];
  flushQueued = false;
  known = false;
  exists = false;
  epoch = '';
  version = 0;
  snapshotVersion = -1;
  generation = 0;
  /// Whether the directory entry of the current journal file is known to be on disk.
  journalEntrySynced = false;

  constructor(dataDir: string, docId: string) {
    this.docId = docId;
    const hash = createHash('sha256').update(docId).digest('hex');
    // A readable part for people listing the directory, and a hash that makes the name unique:
    // lower-cased because some file systems ignore case, cut because a name may not exceed 255
    // bytes, and free of '.' and ':' (a leading dot hides a file, a colon names an NTFS stream).
    const readable = docId
      .toLowerCase()
      .replace(/[^a-z0-9_-]/g, '_')
      .slice(0, 64);
    this.dir = join(dataDir, hash.slice(0, 2));
    this.base = `${readable}.${hash.slice(0, 32)}`;
  }

  get statePath(): string {
    return join(this.dir, `${this.base}.state.json`);
  }

  journalPath(generation: number): string {
    return join(this.dir, `${this.base}.${generation}.journal`);
  }
}

/// A store on the local file system, one process per directory. Each document has a journal
/// file, appended to one JSON line per entry and fsync'd before an append resolves, and a state
/// file (snapshot, current journal generation) replaced atomically. A snapshot starts a new
/// journal generation holding the entries it does not cover, written and fsync'd before the
/// state file points at it, so that at every instant the state file's snapshot and journal
/// reconstruct every acknowledged step. Appends to one document that queue up while a write is
/// in flight (or within one turn) share one write and one fsync.
///
/// I/O failures reject with `StoreUnavailableError`. Files that do not parse, and a journal
/// that is corrupt other than in its last line or has a gap, reject with a `TypeError` or
/// `SyntaxError` (the document is damaged; the server quarantines it). A torn last line, from
/// a crash mid-write, is dropped and truncated.
export class FileStore implements Store {
  readonly kind = 'file';
  private readonly dataDir: string;
  private readonly maxCachedDocs: number;
  private readonly docs = new Map<string, DocFiles>();
  private readonly syncedDirs = new Set<string>();
  private closed = false;

  constructor(options: FileStoreOptions) {
    this.dataDir = options.dataDir;
    this.maxCachedDocs = options.maxCachedDocs ?? 10_000;
  }

  async load(docId: string): Promise<StoredDocument | null> {
    const doc = this.doc(docId);
    return this.enqueue(doc, () => this.read(doc));
  }

  async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (this.closed) throw closedError();
    const doc = this.doc(docId);
    const outcome = new Promise<AppendOutcome>((resolve, reject) => {
      doc.pending.push({ request, resolve, reject });
    });
    if (!doc.flushQueued) {
      doc.flushQueued = true;
      // Errors reach the callers through their own promises.
      this.enqueue(doc, () => this.flush(doc)).catch(() => {});
    }
    return outcome;
  }

  async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    const doc = this.doc(docId);
    return this.enqueue(doc, () => this.writeSnapshot(doc, snapshot));
  }

  /// Waits for every queued operation, then refuses new ones. There are no open handles
  /// between operations, so nothing else needs releasing.
  async close(): Promise<void> {
    this.closed = true;
    const tails = [];
    for (const doc of this.docs.values()) tails.push(doc.tail);
    await Promise.all(tails);
    this.docs.clear();
  }

  private doc(docId: string): DocFiles {
    if (!docIdPattern.test(docId)) throw new TypeError(`invalid document id: ${docId}`);
    let doc = this.docs.get(docId);
    if (doc) {
      // Re-inserted so that the map's order is least recently used first.
      this.docs.delete(docId);
    } else {
      doc = new DocFiles(this.dataDir, docId);
    }
    this.docs.set(docId, doc);
    return doc;
  }

  /// Runs `operation` after every operation already queued for the document.
  private enqueue<T>(doc: DocFiles, operation: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(closedError());
    doc.active++;
    const result = doc.tail.then(operation).catch((error: unknown) => {
      // The files may hold more (or less) than memory says: read them again next time.
      doc.known = false;
      throw toUnavailable(error);
    });
    doc.tail = result.then(
      () => this.settled(doc),
      () => this.settled(doc),
    );
    return result;
  }

  private settled(doc: DocFiles): void {
    doc.active--;
    if (this.docs.size <= this.maxCachedDocs) return;
    for (const [docId, cached] of this.docs) {
      if (this.docs.size <= this.maxCachedDocs) break;
      if (cached.active === 0) this.docs.delete(docId);
    }
  }

  /// Reads the document's files into `doc`; returns what `load` returns.
  private async read(doc: DocFiles): Promise<StoredDocument | null> {
    let state: StateFile;
    try {
      state = parseState(JSON.parse(await readFile(doc.statePath, 'utf8')));
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') throw error;
      doc.known = true;
      doc.exists = false;
      return null;
    }
    const journal = await this.readJournal(doc.journalPath(state.generation));
    const snapshotVersion = state.snapshot ? state.snapshot.version : -1;
    let version = Math.max(snapshotVersion, 0);
    for (let i = 0; i < journal.length; i++) {
      const entry = journal[i]!;
      // Entries are contiguous; the first may start inside the snapshot (it was kept whole).
      // Damaged data, not an unreachable store: retrying cannot help (see `toUnavailable`).
      if (i === 0 ? entry.baseVersion > version : entry.baseVersion !== version)
        throw new TypeError(`journal of ${doc.docId} has a gap at ${entry.baseVersion}`);
      version = entryEnd(entry);
    }
    doc.known = true;
    doc.exists = true;
    doc.epoch = state.epoch;
    doc.version = version;
    doc.snapshotVersion = snapshotVersion;
    doc.generation = state.generation;
    return {
      epoch: state.epoch,
      version,
      snapshot: state.snapshot,
      journal: state.snapshot ? entriesAfter(journal, state.snapshot.version) : journal,
    };
  }

  /// Reads a journal file (a missing file is an empty journal). An incomplete last line is the
  /// trace of a crash during an append that was never acknowledged: it is cut off the file, so
  /// that the next append does not glue a line onto it.
  private async readJournal(path: string): Promise<JournalEntry[]> {
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
    const entries: JournalEntry[] = [];
    let start = 0;
    while (start < complete) {
      const end = text.indexOf('\n', start);
      try {
        entries.push(parseJournalEntry(JSON.parse(text.slice(start, end))));
      } catch (error) {
        throw new TypeError(`corrupt journal line in ${path}`, { cause: error });
      }
      start = end + 1;
    }
    return entries;
  }

  /// Applies every pending append in order against the version in memory, writes the accepted
  /// ones with one write and one fsync, then settles them all.
  private async flush(doc: DocFiles): Promise<void> {
    doc.flushQueued = false;
    const batch = doc.pending;
    doc.pending = [];
    try {
      if (!doc.known) await this.read(doc);
    } catch (error) {
      for (const pending of batch) pending.reject(toUnavailable(error));
      throw error;
    }
    let exists = doc.exists;
    let epoch = doc.epoch;
    let version = doc.version;
    let create = false;
    const accepted: { pending: PendingAppend; version: number }[] = [];
    const outcomes: (AppendOutcome | null)[] = [];
    let lines = '';
    for (const pending of batch) {
      const request = pending.request;
      if (!exists) {
        if (request.baseVersion !== 0) {
          outcomes.push({ ok: false, reason: 'conflict', version: 0, epoch: null });
          continue;
        }
        exists = true;
        create = true;
        epoch = request.epoch;
      } else if (request.epoch !== epoch || request.baseVersion !== version) {
        outcomes.push({ ok: false, reason: 'conflict', version, epoch });
        continue;
      }
      const entry: JournalEntry = {
        baseVersion: request.baseVersion,
        steps: request.steps,
        clientIDs: request.clientIDs,
      };
      version = entryEnd(entry);
      lines += JSON.stringify(entry) + '\n';
      accepted.push({ pending, version });
      outcomes.push(null);
    }
    try {
      // The state file first: a journal without one would be invisible to `read`.
      if (create) {
        await this.writeState(doc, { docId: doc.docId, epoch, generation: 0, snapshot: null });
        doc.generation = 0;
        doc.snapshotVersion = -1;
        doc.journalEntrySynced = false;
      }
      if (lines !== '') await this.appendLines(doc, lines);
    } catch (error) {
      const unavailable = toUnavailable(error);
      for (const { pending } of accepted) pending.reject(unavailable);
      for (let i = 0; i < batch.length; i++) if (outcomes[i]) batch[i]!.resolve(outcomes[i]!);
      throw error;
    }
    doc.exists = exists;
    doc.epoch = epoch;
    doc.version = version;
    for (let i = 0; i < batch.length; i++) if (outcomes[i]) batch[i]!.resolve(outcomes[i]!);
    for (const { pending, version } of accepted) pending.resolve({ ok: true, version });
  }

  private async appendLines(doc: DocFiles, lines: string): Promise<void> {
    await this.ensureDir(doc.dir);
    const handle = await open(doc.journalPath(doc.generation), 'a');
    try {
      await handle.write(lines);
      await handle.sync();
    } finally {
      await handle.close();
    }
    // A new file is only durable once its directory entry is: once per file and process.
    if (!doc.journalEntrySynced) {
      await syncDir(doc.dir);
      doc.journalEntrySynced = true;
    }
  }

  private async writeSnapshot(doc: DocFiles, snapshot: Snapshot): Promise<SnapshotOutcome> {
    if (!doc.known) await this.read(doc);
    if (!doc.exists) {
      // As in the memory store: only a document's first version may be stored this way.
      if (snapshot.version !== 0) return { ok: false, reason: 'conflict' };
      await this.writeState(doc, {
        docId: doc.docId,
        epoch: snapshot.epoch,
        generation: 0,
        snapshot,
      });
      doc.exists = true;
      doc.epoch = snapshot.epoch;
      doc.version = 0;
      doc.snapshotVersion = 0;
      doc.generation = 0;
      doc.journalEntrySynced = false;
      return { ok: true };
    }
    if (doc.epoch !== snapshot.epoch || doc.version < snapshot.version)
      return { ok: false, reason: 'conflict' };
    if (doc.snapshotVersion >= snapshot.version) return { ok: false, reason: 'outdated' };
    // The entries the snapshot does not cover move to a new generation, which is complete and
    // fsync'd before the state file names it. The file is written even when empty: a file of
    // that generation left by a crash before the rename must not be picked up.
    const generation = doc.generation + 1;
    let lines = '';
    if (doc.version > snapshot.version) {
      const journal = await this.readJournal(doc.journalPath(doc.generation));
      for (const entry of journal)
        if (entryEnd(entry) > snapshot.version) lines += JSON.stringify(entry) + '\n';
    }
    const handle = await open(doc.journalPath(generation), 'w');
    try {
      await handle.write(lines);
      await handle.sync();
    } finally {
      await handle.close();
    }
    // writeState syncs the directory after its rename, which also makes the new journal's
    // directory entry durable.
    await this.writeState(doc, { docId: doc.docId, epoch: doc.epoch, generation, snapshot });
    const previous = doc.generation;
    doc.generation = generation;
    doc.snapshotVersion = snapshot.version;
    doc.journalEntrySynced = true;
    // Garbage from now on; a leftover (after a crash) is never read, generations only grow.
    await unlink(doc.journalPath(previous)).catch(() => {});
    return { ok: true };
  }

  /// Replaces the state file atomically: temp file, fsync, rename, fsync of the directory.
  private async writeState(doc: DocFiles, state: StateFile): Promise<void> {
    await this.ensureDir(doc.dir);
    const temp = doc.statePath + '.tmp';
    const handle = await open(temp, 'w');
    try {
      await handle.write(JSON.stringify(state));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, doc.statePath);
    await syncDir(doc.dir);
  }

  private async ensureDir(dir: string): Promise<void> {
    if (this.syncedDirs.has(dir)) return;
    await mkdir(dir, { recursive: true });
    // The shard directory's own entry must reach the disk before files in it count.
    await syncDir(this.dataDir);
    this.syncedDirs.add(dir);
  }
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

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

function closedError(): StoreUnavailableError {
  return new StoreUnavailableError('file store is closed');
}

/// File system errors (they carry an errno `code`) become `StoreUnavailableError`: retrying
/// later may work. Files that do not parse (`SyntaxError`, `TypeError` from the narrowing) are
/// rethrown as they are: the document is damaged, retrying will not help, and the server
/// quarantines it as `corrupt`.
function toUnavailable(error: unknown): unknown {
  if (error instanceof StoreUnavailableError) return error;
  if (errorCode(error) !== undefined)
    return new StoreUnavailableError(
      `file store: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  return error;
}
