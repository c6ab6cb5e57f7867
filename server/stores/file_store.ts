import { createHash } from 'node:crypto';
import { readdirSync, unlinkSync } from 'node:fs';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { docIdPattern } from '../../schema/index.js';
import { DirectoryLock } from './directory_lock.js';
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

/// The logger method the file store uses; a pino logger fits.
export interface FileStoreLogger {
  warn(obj: object, msg: string): void;
}

/// Where and how the file store keeps documents.
export interface FileStoreOptions {
  /// The directory holding every document (created when missing). One store per directory,
  /// enforced by a lock file: the compare-and-set lives in this process's memory.
  dataDir: string;
  /// How many documents' versions to keep in memory when idle. A document dropped from the
  /// cache is read again from disk on its next use. Default 10,000.
  maxCachedDocs?: number;
  /// A load, append or snapshot not finished this many milliseconds after the call rejects
  /// with `StoreUnavailableError`; so does `close` when operations are still running after
  /// it. Default 2000.
  timeoutMs?: number;
  /// Told about stale locks taken over and crash leftovers removed.
  logger?: FileStoreLogger;
}

/// The state file of a document, written atomically: which journal generation is current,
/// and the newest snapshot.
interface StateFile {
  docId: string;
  epoch: string;
  generation: number;
  snapshot: Snapshot | null;
}

/// One caller's wait for an operation: `queued` until the operation starts, `running` from
/// then on, `abandoned` when the caller's time ran out before it started.
interface Waiter {
  state: 'queued' | 'running' | 'abandoned';
}

interface PendingAppend extends Waiter {
  request: AppendRequest;
  resolve: (outcome: AppendOutcome) => void;
  reject: (error: unknown) => void;
}

/// One document's files and what this process knows of them. Operations on a document run one
/// at a time, in order, on `tail`; `known` is false until the files were read (and again after
/// a failed or timed-out operation, when the disk may hold more than memory says).
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
  /// The running operation's caller timed out: whatever it still does, memory may no longer
  /// match the files once it settles.
  stuck = false;
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
///
/// Every operation is bounded by `timeoutMs`, because a disk can hang (a dying drive, a network
/// mount gone away) rather than fail. A timed-out operation that had not started never runs.
/// One that had started may still finish, and an append may still reach the journal, after its
/// caller was told it failed. The room then rewinds and, later, appends again at the same base
/// version. Operations on a document run one at a time, so that next operation starts only once
/// the stuck one has settled, and it then reads the files again (`stuck`, then `known = false`)
/// instead of trusting memory. The compare-and-set against what is really on disk is then
/// right either way: if the late write landed the retry gets `conflict` and the room reloads;
/// if it failed the retry goes through. Either way the journal holds each version exactly once.
/// (Answering every retry with `conflict` would be right too, but would make every editor of
/// the document reload after each timeout, even when nothing was written.) While the stuck
/// operation never settles, every later operation on that document times out in turn;
/// other documents are unaffected, until the stuck writes fill libuv's thread pool.
export class FileStore implements Store {
  readonly kind = 'file';
  private readonly dataDir: string;
  private readonly maxCachedDocs: number;
  private readonly timeoutMs: number;
  private readonly logger: FileStoreLogger | null;
  private readonly lock: DirectoryLock;
  private readonly docs = new Map<string, DocFiles>();
  private readonly syncedDirs = new Set<string>();
  private closed = false;
  private closing: Promise<void> | null = null;
  private running = 0;

  /// Opens `options.dataDir`: creates it if needed, takes its lock and removes temporary files
  /// left by a crash. Synchronous, so that a store never exists without its lock and a server
  /// built on it fails before it listens. Throws `DirectoryLockedError` when another live
  /// process (or another store in this process) has the directory, and the file system's
  /// error when it cannot be created or read.
  constructor(options: FileStoreOptions) {
    this.dataDir = options.dataDir;
    this.maxCachedDocs = options.maxCachedDocs ?? 10_000;
    this.timeoutMs = options.timeoutMs ?? 2000;
    this.logger = options.logger ?? null;
    const logger = this.logger;
    this.lock = DirectoryLock.acquire(
      this.dataDir,
      logger ? (obj, msg) => logger.warn(obj, `file store: ${msg}`) : null,
    );
    try {
      this.removeTemporaryFiles();
    } catch (error) {
      this.lock.release();
      throw error;
    }
  }

  /// Operations running right now, timed out or not. Each may hold one of libuv's pool
  /// threads in a system call that a hung disk never returns from, and `process.exit` waits
  /// for those threads: see server/main.ts.
  get operationsInFlight(): number {
    return this.running;
  }

  async load(docId: string): Promise<StoredDocument | null> {
    const doc = this.doc(docId);
    return this.bounded(doc, 'load', () => this.read(doc));
  }

  async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (this.closed) throw closedError();
    const doc = this.doc(docId);
    let pending!: PendingAppend;
    const outcome = new Promise<AppendOutcome>((resolve, reject) => {
      pending = { request, resolve, reject, state: 'queued' };
    });
    doc.pending.push(pending);
    if (!doc.flushQueued) {
      doc.flushQueued = true;
      // Errors reach the callers through their own promises.
      this.enqueue(doc, () => this.flush(doc)).catch(() => {});
    }
    return this.deadline(doc, pending, outcome, 'append');
  }

  async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    const doc = this.doc(docId);
    return this.bounded(doc, 'snapshot', () => this.writeSnapshot(doc, snapshot));
  }

  /// Refuses new operations, waits (at most `timeoutMs`) for those already queued, then
  /// releases the directory's lock. There are no open handles between operations. Rejects with
  /// `StoreUnavailableError` when operations are still running after that time; the lock is
  /// then kept, since a stuck write may still land while this process lives, and the next
  /// process takes it over as stale.
  close(): Promise<void> {
    this.closing ??= this.drainAndUnlock();
    return this.closing;
  }

  private async drainAndUnlock(): Promise<void> {
    this.closed = true;
    const tails = [];
    for (const doc of this.docs.values()) tails.push(doc.tail);
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      Promise.all(tails).then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), this.timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!drained)
      throw new StoreUnavailableError(
        `file store: operations on ${this.dataDir} still running after ${this.timeoutMs} ms; ` +
          'its lock is kept until this process exits',
      );
    this.docs.clear();
    this.lock.release();
  }

  /// Deletes `*.tmp` files in the shard directories: state files whose atomic write a crash
  /// cut between write and rename. Nothing reads them and a later write replaces them, but
  /// they would pile up. Only safe under the lock, when nobody else is writing. One listing
  /// per shard (at most 256), once, at start-up.
  private removeTemporaryFiles(): void {
    let removed = 0;
    for (const shard of readdirSync(this.dataDir, { withFileTypes: true })) {
      if (!shard.isDirectory() || !/^[0-9a-f]{2}$/.test(shard.name)) continue;
      const dir = join(this.dataDir, shard.name);
      for (const name of readdirSync(dir)) {
        if (!name.endsWith('.tmp')) continue;
        unlinkSync(join(dir, name));
        removed++;
      }
    }
    if (removed > 0)
      this.logger?.warn(
        { dir: this.dataDir, removed },
        'file store: removed temporary files left by a crash',
      );
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

  /// Queues `operation` for the document and bounds the caller's wait (see `deadline`).
  private bounded<T>(doc: DocFiles, what: string, operation: () => Promise<T>): Promise<T> {
    const waiter: Waiter = { state: 'queued' };
    const result = this.enqueue(doc, () => {
      // Its caller was told it failed; nobody reads this value.
      if (waiter.state === 'abandoned') return Promise.resolve(undefined as never);
      waiter.state = 'running';
      return operation();
    });
    return this.deadline(doc, waiter, result, what);
  }

  /// Races `result` against `timeoutMs`, counted from the call, and rejects with
  /// `StoreUnavailableError` when time runs out first. A waiter still queued is abandoned (its
  /// operation will not run); if it is running, the document is marked stuck (see the class
  /// comment).
  private deadline<T>(doc: DocFiles, waiter: Waiter, result: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        if (waiter.state === 'queued') waiter.state = 'abandoned';
        else doc.stuck = true;
        reject(
          new StoreUnavailableError(
            `file store: ${what} of ${doc.docId} did not finish within ${this.timeoutMs} ms`,
          ),
        );
      }, this.timeoutMs);
    });
    return Promise.race([result, expired]).finally(() => clearTimeout(timer));
  }

  /// Runs `operation` after every operation already queued for the document.
  private enqueue<T>(doc: DocFiles, operation: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(closedError());
    doc.active++;
    const result = doc.tail
      .then(() => {
        this.running++;
        return operation();
      })
      .catch((error: unknown) => {
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
    this.running--;
    if (doc.stuck) {
      // Settled after its caller gave up: the next operation reads the files again.
      doc.stuck = false;
      doc.known = false;
    }
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
    const batch: PendingAppend[] = [];
    for (const pending of doc.pending) {
      // An append whose caller timed out while it waited must not be written now.
      if (pending.state !== 'queued') continue;
      pending.state = 'running';
      batch.push(pending);
    }
    doc.pending = [];
    if (batch.length === 0) return;
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
