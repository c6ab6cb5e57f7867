import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  fsyncSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  readdirSync,
  readFileSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { access, mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { docIdPattern } from '../../schema/events.js';
import { DirectoryLock, lockFileName } from './directory_lock.js';
import { entriesAfter, entryEnd, parseJournalEntry, parseSnapshot } from './journal_entry.js';
import {
  WriteAheadLog,
  defaultZeroAheadBytes,
  syncDirectory,
  syncDirectorySync,
  type LogRecord,
} from './write_ahead_log.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type JournalEntry,
  type ResetOutcome,
  type Snapshot,
  type SnapshotOutcome,
  type Store,
  type StoredDocument,
  type StoredPosition,
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
  /// The shared write-ahead log is checkpointed into the documents' own journals once it
  /// holds this many bytes, or `checkpointMs` after its first record, whichever comes
  /// first. What a crash leaves in it is replayed when the directory is opened next, so these
  /// also bound that replay and the memory holding records not yet checkpointed.
  /// Defaults 8 MiB and 30,000 ms.
  checkpointBytes?: number;
  checkpointMs?: number;
  /// After a checkpoint in which a document failed, the next one starts this many
  /// milliseconds later, twice that after the next failure, and so on up to `checkpointMs`
  /// (back to this after one in which none failed): a document whose journal was briefly
  /// unwritable has its appends taken again soon, one that stays broken is not retried in a
  /// loop (each try writes its waiting entries to the log again). Default 1000.
  checkpointRetryMs?: number;
  /// The log's files are filled with zeros this many bytes at a time ahead of its rounds, so
  /// that a round's sync writes its data only, not the file's new size (see `WriteAheadLog`).
  /// 0 to have every round extend the file. Default 2 MiB.
  logZeroAheadBytes?: number;
  /// Told about stale locks taken over, crash leftovers removed and log records replayed.
  logger?: FileStoreLogger;
}

/// The state file of a document, written atomically: which journal generation is current,
/// and the newest snapshot.
export interface StateFile {
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

/// An entry committed to the write-ahead log and not yet written to its document's journal.
interface LoggedEntry {
  /// The document's epoch it was appended in: a reset whose state file was renamed but not
  /// synced leaves entries of the old epoch in memory under a state file of the new one.
  epoch: string;
  baseVersion: number;
  end: number;
  /// The journal line, newline included.
  line: string;
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
  /// A write to the document's files failed. What the page cache shows of them may then not
  /// be on disk (Linux marks the pages of a failed writeback clean), so the next checkpoint
  /// writes the journal again, whole, to a new generation instead of trusting it.
  suspect = false;
  /// Entries durable in the write-ahead log only, in order: a checkpoint moves them to the
  /// journal file. Until then the document stays cached, since nothing else holds them.
  logged: LoggedEntry[] = [];
  /// Entries a read found in the journal file while the document was `suspect`, and so took
  /// out of `logged`: the file shows them, but possibly from the page cache only. Until the
  /// journal is written again, whole, they are durable in the log alone, and a failed
  /// checkpoint carries them forward with `logged` (they come before it, in order).
  unsynced: LoggedEntry[] = [];
  /// The last checkpoint of this document failed: until one succeeds, its entries wait in the
  /// log, in memory, and in every carried file, so their size is bounded (see `flush`).
  checkpointFailing = false;

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

  /// Log records set aside at open because they did not fit the document (see `replay`).
  get unreplayedPath(): string {
    return join(this.dir, `${this.base}.unreplayed.wal`);
  }
}

/// A store on the local file system, one process per directory. Each document has a journal
/// file, one JSON line per entry, and a state file (snapshot, current journal generation)
/// replaced atomically. A snapshot starts a new journal generation holding the entries it does
/// not cover, written and fsync'd before the state file points at it.
///
/// An append is durable once it is in the write-ahead log that all documents share (see
/// `WriteAheadLog`): appends of every document that queue up while a log write is in flight
/// share one write and one fdatasync, which is what lets many busy documents cost one disk
/// flush per round. A checkpoint later appends each document's logged entries to its journal,
/// fsyncs it, and deletes the log files it covered. At every instant the state file's
/// snapshot, the journal and the log reconstruct every acknowledged step: opening the
/// directory replays the log (whatever a crash left in it) into the journals before anything
/// else. Replay follows each document's versions from the end of its journal, and where two
/// records extend the same version the later one wins: a record is only written at a version
/// that memory says is free, so an earlier one there belonged to a write that failed (and
/// whose caller was told so) but reached the disk anyway.
///
/// A later record at base b supersedes every earlier one at b or after, not only the one at b:
/// a failed round may hold several appends of a document, each made on top of the one before.
/// Replay writes every journal the log names again, whole, to a new generation, even one that
/// already held the records: they may be in the page cache only (a process killed before a
/// checkpoint's fsync, or an fsync that failed). Records that do not fit their document are set
/// aside for it (`replay`) rather than stopping the whole directory from opening.
///
/// After a failed write or sync of a document's files (a journal append, a snapshot, a state
/// file), what reading them shows may not be on disk, so they are written again, whole, to a
/// new journal generation at the next checkpoint (`suspect`), and the log keeps their entries
/// until then. Checkpoints are bounded like every operation: a document that hangs in one
/// holds no later checkpoint of the others.
///
/// A document whose checkpoint fails (its journal cannot be written or read, it hangs, it is
/// damaged) does not keep the log files either: its entries not yet in its journal are
/// written again, durably, to a log file of their own that the checkpoint's rotation placed
/// before every later commit (`carryForward`), and only then are the files the checkpoint
/// covered deleted. The log thus holds the failing documents' pending entries and what came
/// since the last checkpoint, not every file since the first failure. A crash between the two
/// steps leaves the same entries twice, in log order: the carried copy supersedes the first
/// (see above), and replay writes each version once. Once a checkpoint's worth of a failing
/// document's entries (`checkpointBytes`) waits that way, its appends are refused, retryably,
/// until a checkpoint of it succeeds.
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
/// operation never settles, every later operation on that document times out in turn. Other
/// documents go on loading and snapshotting until the stuck calls fill libuv's thread pool,
/// but their appends share the write-ahead log: a log write that hangs holds every append
/// (they time out, unavailable) until it returns. They share the disk too, so a hang there is
/// rarely one document's alone.
export class FileStore implements Store {
  readonly kind = 'file';
  private readonly dataDir: string;
  private readonly maxCachedDocs: number;
  private readonly timeoutMs: number;
  private readonly logger: FileStoreLogger | null;
  private readonly lock: DirectoryLock;
  private readonly checkpointBytes: number;
  private readonly checkpointMs: number;
  private readonly checkpointRetryMs: number;
  /// The wait before the next retry of a failed checkpoint (see `checkpointRetryMs`).
  private retryDelay: number;
  private readonly docs = new Map<string, DocFiles>();
  private readonly syncedDirs = new Set<string>();
  /// The `unreplayedPath` of every document whose log records were set aside (see `replay`).
  private readonly unreplayed = new Set<string>();
  private readonly log: WriteAheadLog;
  /// Documents that committed to the log since the last checkpoint began.
  private dirty = new Set<DocFiles>();
  /// The oldest log generation whose file may still exist.
  private oldestLog: number;
  private checkpointing: Promise<void> | null = null;
  private checkpointTimer: NodeJS.Timeout | null = null;
  /// A log write failed while a checkpoint ran, which may have rotated before it: one more
  /// follows at once (see `logWriteFailed`).
  private checkpointAgain = false;
  /// When the last checkpoint that a failed log write brought forward started.
  private urgentCheckpointAt = 0;
  private urgentCheckpointArmed = false;
  private closed = false;
  private closing: Promise<void> | null = null;
  private running = 0;
  /// The check of the data directory in flight (see `ping`).
  private directoryCheck: Promise<void> | null = null;

  /// Opens `options.dataDir`: creates it if needed, takes its lock, removes temporary files
  /// left by a crash and replays the write-ahead log into the journals. Synchronous, so that a
  /// store never exists without its lock and a server built on it fails before it listens.
  /// Throws `DirectoryLockedError` when another live process (or another store in this
  /// process) has the directory, the file system's error when it cannot be created or read,
  /// and a `TypeError` when the log or a document it names is damaged (starting anyway could
  /// serve documents without steps that were acknowledged).
  constructor(options: FileStoreOptions) {
    this.dataDir = options.dataDir;
    this.maxCachedDocs = options.maxCachedDocs ?? 10_000;
    this.timeoutMs = options.timeoutMs ?? 2000;
    this.checkpointBytes = options.checkpointBytes ?? 8 * 1024 * 1024;
    this.checkpointMs = options.checkpointMs ?? 30_000;
    this.checkpointRetryMs = Math.min(options.checkpointRetryMs ?? 1000, this.checkpointMs);
    this.retryDelay = this.checkpointRetryMs;
    this.logger = options.logger ?? null;
    const logger = this.logger;
    this.lock = DirectoryLock.acquire(
      this.dataDir,
      logger ? (obj, msg) => logger.warn(obj, `file store: ${msg}`) : null,
    );
    try {
      this.removeTemporaryFiles();
      const recovered = WriteAheadLog.recover(this.dataDir);
      this.replay(recovered.records);
      WriteAheadLog.removeSync(this.dataDir, recovered.files);
      this.log = new WriteAheadLog(
        this.dataDir,
        recovered.nextGeneration,
        options.logZeroAheadBytes ?? defaultZeroAheadBytes,
        (error) => this.logWriteFailed(error),
      );
      this.oldestLog = recovered.nextGeneration;
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

  /// See `Store.reset`. The new epoch's state file names a new, empty journal generation, so
  /// the switch is one atomic rename. The log's records of the old epoch are skipped by any
  /// later replay (they name another epoch), and the entries memory holds for it go with them.
  /// One process per directory, so no lease: `lease` is ignored.
  async reset(docId: string, snapshot: Snapshot, expected: StoredPosition): Promise<ResetOutcome> {
    const doc = this.doc(docId);
    return this.bounded(doc, 'reset', () => this.writeReset(doc, snapshot, expected));
  }

  /// Checks, cheaply, that documents can still be loaded and stored: the data directory is
  /// writable and still holds the store's lock file (a directory removed, moved away or
  /// replaced has none; every file the store opens is under it). Resolves when it does;
  /// rejects with `StoreUnavailableError` when it does not, when the store is closed, or after
  /// `timeoutMs` (a hung disk). For health checks. A full disk is not noticed.
  ping(): Promise<void> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('file store: closed'));
    // One check at a time, shared: on a hung disk each would hold one of libuv's pool threads,
    // which loads and appends need, and a load balancer keeps asking.
    this.directoryCheck ??= this.checkDirectory().finally(() => {
      this.directoryCheck = null;
    });
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const message = `file store: ${this.dataDir} did not answer within ${this.timeoutMs} ms`;
        reject(new StoreUnavailableError(message));
      }, this.timeoutMs);
    });
    return Promise.race([this.directoryCheck, expired]).finally(() => clearTimeout(timer));
  }

  private async checkDirectory(): Promise<void> {
    try {
      await access(this.dataDir, constants.W_OK);
      await stat(join(this.dataDir, lockFileName));
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      const message = `file store: ${this.dataDir} cannot be used (${String(code)})`;
      throw new StoreUnavailableError(message, { cause: error });
    }
  }

  /// Refuses new operations, waits (at most `timeoutMs`) for those already queued and for a
  /// last checkpoint (the log's handle is the only one kept open between operations), then
  /// releases the directory's lock. Rejects with
  /// `StoreUnavailableError` when operations are still running after that time; the lock is
  /// then kept, since a stuck write may still land while this process lives, and the next
  /// process takes it over as stale.
  close(): Promise<void> {
    this.closing ??= this.drainAndUnlock();
    return this.closing;
  }

  private async drainAndUnlock(): Promise<void> {
    this.closed = true;
    if (this.checkpointTimer) {
      clearTimeout(this.checkpointTimer);
      this.checkpointTimer = null;
    }
    const tails = [];
    for (const doc of this.docs.values()) tails.push(doc.tail);
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      Promise.all(tails).then(() => this.finalCheckpoint()),
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

  /// Moves every logged entry to its journal and deletes the log, so that the next open has
  /// nothing to replay. On failure the log stays, complete, and the next open replays it.
  private async finalCheckpoint(): Promise<true> {
    try {
      await this.checkpointing;
      await this.log.close();
      // Several at a time (`close` has `timeoutMs` for them all), not all at once: thousands
      // of documents would open thousands of files (EMFILE). Every one is tried; any
      // failure keeps the log.
      const docs = [...this.docs.values()];
      let next = 0;
      const failures: unknown[] = [];
      const worker = async (): Promise<void> => {
        while (next < docs.length) {
          const doc = docs[next++]!;
          await this.checkpointDocument(doc).catch((error: unknown) => failures.push(error));
        }
      };
      await Promise.all(Array.from({ length: closeCheckpointConcurrency }, worker));
      if (failures.length > 0) throw failures[0];
      await this.log.removeThrough(this.log.generation, this.oldestLog);
    } catch (error) {
      this.logger?.warn(
        { dir: this.dataDir, err: error instanceof Error ? error.message : String(error) },
        'file store: could not checkpoint at close; the next open replays the write-ahead log',
      );
    }
    return true;
  }

  /// Deletes `*.tmp` files in the shard directories: state files whose atomic write a crash
  /// cut between write and rename. Nothing reads them and a later write replaces them, but
  /// they would pile up. Only safe under the lock, when nobody else is writing. One listing
  /// per shard (at most 256), once, at start-up. The same listing notes the documents with
  /// log records set aside by an earlier open (`unreplayed`).
  private removeTemporaryFiles(): void {
    let removed = 0;
    for (const shard of readdirSync(this.dataDir, { withFileTypes: true })) {
      if (!shard.isDirectory() || !/^[0-9a-f]{2}$/.test(shard.name)) continue;
      const dir = join(this.dataDir, shard.name);
      for (const name of readdirSync(dir)) {
        if (name.endsWith('.unreplayed.wal')) this.unreplayed.add(join(dir, name));
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
      // A suspect one holds the only knowledge that its files need writing again.
      if (cached.active === 0 && cached.logged.length === 0 && !cached.suspect)
        this.docs.delete(docId);
    }
  }

  /// Reads the document's files into `doc`; returns what `load` returns.
  private async read(doc: DocFiles): Promise<StoredDocument | null> {
    if (this.unreplayed.has(doc.unreplayedPath))
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
    const journal = await this.readJournal(doc.journalPath(state.generation));
    const snapshotVersion = state.snapshot ? state.snapshot.version : -1;
    const fileVersion = journalEnd(doc.docId, snapshotVersion, journal);
    // Entries only in the log follow; any the journal already holds (a snapshot that failed
    // after its new generation was named) are dropped from memory.
    let version = fileVersion;
    const logged: LoggedEntry[] = [];
    const unsynced: LoggedEntry[] = [];
    for (const entry of doc.logged) {
      if (entry.epoch !== state.epoch) {
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
    return parseJournalText(text, complete, path);
  }

  /// A journal's whole lines, read synchronously for the replay at open. A torn last line is
  /// left in the file: replay writes the entries to a new generation and deletes this one.
  private readJournalSync(path: string): JournalEntry[] {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return [];
      throw error;
    }
    return parseJournalText(text, text.lastIndexOf('\n') + 1, path);
  }

  /// Replays the records a previous process left in the write-ahead log (see the class
  /// comment) into the documents' journals, fsync'd. Synchronous: it runs once, at open,
  /// before anything else may touch the files. A document whose files do not take its records
  /// (an unreadable state file, a journal with a gap, records past its end) has them set aside
  /// in a file of its own, and loading it fails as damaged until someone repairs it: the rest
  /// of the directory opens, and nothing acknowledged is deleted with the log.
  private replay(records: LogRecord[]): void {
    const byDoc = new Map<string, LogRecord[]>();
    for (const record of records) {
      const list = byDoc.get(record.docId);
      if (list) list.push(record);
      else byDoc.set(record.docId, [record]);
    }
    let replayed = 0;
    const damaged: string[] = [];
    for (const [docId, list] of byDoc) {
      const doc = new DocFiles(this.dataDir, docId);
      try {
        replayed += this.replayDocument(doc, list);
      } catch (error) {
        if (!(error instanceof TypeError || error instanceof SyntaxError)) throw error;
        this.setAside(doc, list);
        damaged.push(`${docId}: ${error.message}`);
      }
    }
    // The shard directories' own entries (new ones, or ones a crash left unsynced).
    syncDirectorySync(this.dataDir);
    if (replayed > 0)
      this.logger?.warn(
        { dir: this.dataDir, entries: replayed, docs: byDoc.size },
        'file store: replayed the write-ahead log a crash left into the journals',
      );
    if (damaged.length > 0)
      this.logger?.warn(
        { dir: this.dataDir, damaged },
        'file store: write-ahead log records that do not fit their documents were set aside ' +
          '(*.unreplayed.wal); those documents fail to load until repaired',
      );
  }

  /// Replays one document's records; returns how many went into its journal.
  private replayDocument(doc: DocFiles, list: LogRecord[]): number {
    const docId = doc.docId;
    let state: StateFile;
    try {
      state = parseStateText(readFileSync(doc.statePath, 'utf8'), doc.statePath);
    } catch (error) {
      // An I/O error is not damage: the open fails, and a later one may succeed.
      const code = errorCode(error);
      if (code !== undefined && code !== 'ENOENT') throw error;
      // The state file is durable before the first record of a document is written.
      throw new TypeError(`the write-ahead log names ${docId}, whose state file is unreadable`, {
        cause: error,
      });
    }
    // In log order, a record at base b supersedes every earlier one at b or later: those were
    // written by rounds that failed (their callers were told so) but reached the disk anyway,
    // and whatever was made after them was made on top of them. Records of one document only
    // ever grow in base otherwise, so this is a stack.
    const kept: JournalEntry[] = [];
    for (const record of list) {
      if (record.epoch !== state.epoch) continue;
      const base = record.entry.baseVersion;
      while (kept.length > 0 && kept[kept.length - 1]!.baseVersion >= base) kept.pop();
      kept.push(record.entry);
    }
    const path = doc.journalPath(state.generation);
    const snapshotVersion = state.snapshot ? state.snapshot.version : -1;
    const journal = this.readJournalSync(path);
    let version = journalEnd(docId, snapshotVersion, journal);
    let lines = '';
    for (const entry of journal) lines += journalLine(JSON.stringify(entry));
    let count = 0;
    for (const entry of kept) {
      // Already in the journal: a checkpoint wrote it before the crash.
      if (entryEnd(entry) <= version) continue;
      if (entry.baseVersion !== version)
        throw new TypeError(
          `the write-ahead log of ${docId} holds steps at ${entry.baseVersion}, ` +
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

  /// Writes a damaged document's log records to `<doc>.unreplayed.wal` beside its files,
  /// durably, before the log that held them is deleted.
  private setAside(doc: DocFiles, list: LogRecord[]): void {
    mkdirSync(doc.dir, { recursive: true });
    let text = '';
    for (const { docId, epoch, entry } of list)
      text += WriteAheadLog.line(docId, epoch, JSON.stringify(entry));
    writeDurablySync(doc.unreplayedPath, text, 'a');
    syncDirectorySync(doc.dir);
    this.unreplayed.add(doc.unreplayedPath);
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
    if (doc.checkpointFailing) {
      // A document whose journal cannot be written would otherwise grow without bound in
      // memory and in the log, each checkpoint carrying it all forward again: past one
      // checkpoint's worth, its appends are refused (retryable) until the journal is fixed.
      const waiting = waitingBytes(doc);
      if (waiting >= this.checkpointBytes) {
        const error = new StoreUnavailableError(
          `file store: the checkpoints of ${doc.docId} fail and ${waiting} bytes of its ` +
            'entries wait in the write-ahead log; its appends are refused until one succeeds',
        );
        for (const pending of batch) pending.reject(error);
        return;
      }
    }
    let exists = doc.exists;
    let epoch = doc.epoch;
    let version = doc.version;
    let create = false;
    const accepted: { pending: PendingAppend; version: number }[] = [];
    const outcomes: (AppendOutcome | null)[] = [];
    const logged: LoggedEntry[] = [];
    let records = '';
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
      const json = JSON.stringify(entry);
      logged.push({
        epoch,
        baseVersion: request.baseVersion,
        end: entryEnd(entry),
        line: journalLine(json),
      });
      records += WriteAheadLog.line(doc.docId, epoch, json);
      version = entryEnd(entry);
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
      if (records !== '') {
        // Before the write: a checkpoint starting while it is in flight must include this
        // document (its operation runs after this one).
        this.dirty.add(doc);
        await this.log.commit(records);
      }
    } catch (error) {
      const unavailable = toUnavailable(error);
      for (const { pending } of accepted) pending.reject(unavailable);
      for (let i = 0; i < batch.length; i++) if (outcomes[i]) batch[i]!.resolve(outcomes[i]!);
      throw error;
    }
    doc.exists = exists;
    doc.epoch = epoch;
    doc.version = version;
    for (const entry of logged) doc.logged.push(entry);
    for (let i = 0; i < batch.length; i++) if (outcomes[i]) batch[i]!.resolve(outcomes[i]!);
    for (const { pending, version } of accepted) pending.resolve({ ok: true, version });
    if (logged.length > 0) this.scheduleCheckpoint();
  }

  /// Starts a checkpoint when the log has grown past `checkpointBytes`, and arms the timer
  /// that starts one `checkpointMs` after the first record otherwise.
  private scheduleCheckpoint(): void {
    if (this.closed) return;
    if (this.log.size >= this.checkpointBytes) {
      this.startCheckpoint();
      return;
    }
    if (this.checkpointTimer) return;
    this.checkpointTimer = setTimeout(() => {
      this.checkpointTimer = null;
      this.startCheckpoint();
    }, this.checkpointMs);
    // Pending records are durable in the log: nothing is lost if the process exits first.
    this.checkpointTimer.unref();
  }

  /// Arms the next checkpoint after a failed one: `retryDelay` from now, which doubles for the
  /// one after, up to `checkpointMs`. Replaces a timer armed for later.
  private scheduleRetry(): void {
    if (this.closed) return;
    if (this.checkpointTimer) clearTimeout(this.checkpointTimer);
    const delay = this.retryDelay;
    this.retryDelay = Math.min(delay * 2, this.checkpointMs);
    this.checkpointTimer = setTimeout(() => {
      this.checkpointTimer = null;
      this.startCheckpoint();
    }, delay);
    this.checkpointTimer.unref();
  }

  private startCheckpoint(): void {
    if (this.checkpointing || this.closed) return;
    if (this.checkpointTimer) {
      clearTimeout(this.checkpointTimer);
      this.checkpointTimer = null;
    }
    // This one rotates the log too, so it covers a failed file an armed one was for.
    this.urgentCheckpointArmed = false;
    this.checkpointing = this.checkpoint()
      .catch((error: unknown) => {
        // The log files stay; the next checkpoint deletes them.
        this.scheduleRetry();
        this.logger?.warn(
          { dir: this.dataDir, err: error instanceof Error ? error.message : String(error) },
          'file store: checkpoint failed; the write-ahead log keeps its entries',
        );
      })
      .finally(() => {
        this.checkpointing = null;
        if (this.checkpointAgain) {
          this.checkpointAgain = false;
          this.armUrgentCheckpoint();
          return;
        }
        // Records committed while it ran wait for the next one.
        if (this.dirty.size > 0) this.scheduleCheckpoint();
      });
  }

  /// A round's write to the log failed. The log goes on in a new file, but whether the rounds
  /// acknowledged earlier in the failed one are on the disk is in doubt: a failed write can
  /// leave pages of earlier writes lost after the fact (the kernel reports a write-back error
  /// once, to whichever sync asks first), and some devices report an error late, on a later
  /// write. Those entries are still in memory: a checkpoint
  /// now writes them to the documents' journals and fsyncs them, instead of leaving them on
  /// that file alone for up to `checkpointMs`. At most one such checkpoint per
  /// `checkpointRetryMs`, so that a disk that keeps failing is not checkpointed in a loop.
  private logWriteFailed(error: unknown): void {
    if (this.closed) return;
    if (this.checkpointing) {
      this.checkpointAgain = true;
      return;
    }
    if (this.urgentCheckpointArmed) return;
    this.logger?.warn(
      { dir: this.dataDir, err: error instanceof Error ? error.message : String(error) },
      'file store: a write-ahead log write failed; checkpointing now, so that the entries ' +
        'acknowledged before it do not depend on that log file',
    );
    this.armUrgentCheckpoint();
  }

  private armUrgentCheckpoint(): void {
    if (this.closed) return;
    if (this.checkpointTimer) clearTimeout(this.checkpointTimer);
    this.urgentCheckpointArmed = true;
    const wait = Math.max(0, this.urgentCheckpointAt + this.checkpointRetryMs - Date.now());
    this.checkpointTimer = setTimeout(() => {
      this.checkpointTimer = null;
      this.urgentCheckpointArmed = false;
      this.urgentCheckpointAt = Date.now();
      this.startCheckpoint();
    }, wait);
    this.checkpointTimer.unref();
  }

  /// Moves later commits to a new log file, writes every dirty document's logged entries to
  /// its journal (as an operation of that document, after the one in flight), then deletes the
  /// log files left. A document that fails keeps its entries and stays dirty, for the next
  /// checkpoint; meanwhile they are carried forward in the log (`carryForward`), which keeps
  /// them durable while the files left go.
  private async checkpoint(): Promise<void> {
    const left = this.log.rotate(true);
    const docs = [...this.dirty];
    this.dirty = new Set();
    // Bounded like any operation: one document stuck on a hung write must not hold every
    // later checkpoint (it stays dirty, and the log files stay, until it answers).
    const results = await Promise.allSettled(
      docs.map((doc) => this.bounded(doc, 'checkpoint', () => this.checkpointDocument(doc))),
    );
    const failed: DocFiles[] = [];
    for (let i = 0; i < docs.length; i++) {
      const result = results[i]!;
      const doc = docs[i]!;
      doc.checkpointFailing = result.status === 'rejected';
      if (result.status === 'fulfilled') continue;
      failed.push(doc);
      this.dirty.add(doc);
      // One line per document and checkpoint: which document, and why, for whoever must fix it.
      const error: unknown = result.reason;
      this.logger?.warn(
        {
          dir: this.dataDir,
          docId: doc.docId,
          err: error instanceof Error ? error.message : String(error),
          pending: doc.unsynced.length + doc.logged.length,
        },
        'file store: checkpoint of a document failed; the write-ahead log carries its entries',
      );
    }
    if (failed.length > 0) {
      this.scheduleRetry();
      if (!(await this.carryForward(left, failed))) return;
    } else {
      this.retryDelay = this.checkpointRetryMs;
    }
    await this.log.removeThrough(left, this.oldestLog);
    this.oldestLog = left + 1;
  }

  /// Writes the entries that `failed` documents hold in the log only (`unsynced`, `logged`)
  /// to the log file of the generation after `left`, which `rotate` kept free, durably: then
  /// the files through `left` may go, and the log keeps only what the failing documents still
  /// need. Returns false, having written nothing, when a round that the rotation left in
  /// flight has not landed within `timeoutMs` (a hung log write): its appends are not in
  /// `logged` yet. The files then stay for the next checkpoint, as they did before. Rejects
  /// with the file system's error when the carried file cannot be written; the files stay too.
  private async carryForward(left: number, failed: DocFiles[]): Promise<boolean> {
    if (!(await this.log.landedThrough(left, this.timeoutMs))) {
      this.logger?.warn(
        { dir: this.dataDir, generation: left },
        'file store: a log write is still in flight; the write-ahead log keeps its files',
      );
      return false;
    }
    // No round can go to those files any more, and every one that did has resolved its
    // commits. The appends they acknowledge join `logged` in the microtasks that follow
    // (`flush` awaits the commit directly); after one turn of the event loop, every one has.
    // Read without the document's queue on purpose: a document stuck in an operation must
    // not hold the log, and an entry leaves these lists only once its journal holds it
    // durably (or, while suspect, for `unsynced`).
    await new Promise<void>((resolve) => setImmediate(resolve));
    let text = '';
    let entries = 0;
    for (const doc of failed) {
      for (const entry of doc.unsynced) text += carriedLine(doc, entry);
      for (const entry of doc.logged) text += carriedLine(doc, entry);
      entries += doc.unsynced.length + doc.logged.length;
    }
    if (text !== '') await this.log.writeCarried(left + 1, text);
    this.logger?.warn(
      { dir: this.dataDir, docs: failed.length, entries, bytes: Buffer.byteLength(text) },
      'file store: checkpoint incomplete; the entries of the documents that failed were ' +
        'carried forward in the write-ahead log, whose older files go',
    );
    return true;
  }

  /// Appends the document's logged entries to its journal, fsync'd.
  private async checkpointDocument(doc: DocFiles): Promise<void> {
    if (doc.suspect) return this.rewriteJournal(doc);
    // After a failure memory may be behind the files (which journal generation is current,
    // which entries it already holds): read them again, which also drops those it holds.
    if (doc.logged.length === 0) return;
    if (!doc.known) await this.read(doc);
    if (doc.logged.length === 0) return;
    let lines = '';
    for (const entry of doc.logged) lines += entry.line;
    await this.appendLines(doc, lines);
    doc.logged = [];
  }

  /// Writes the document's journal again, whole (what its files and the log hold after its
  /// snapshot), to a new generation: after a failed write, what reading the files shows is
  /// only known to be durable once written and fsync'd again.
  private async rewriteJournal(doc: DocFiles): Promise<void> {
    const stored = await this.read(doc);
    if (stored) {
      let lines = '';
      for (const entry of stored.journal) lines += journalLine(JSON.stringify(entry));
      await this.writeGeneration(doc, stored.snapshot, lines);
    } else {
      doc.suspect = false;
      doc.unsynced = [];
    }
  }

  /// Makes `lines` the journal of a new generation after `snapshot`: written and fsync'd
  /// before the state file names it (with that snapshot, and `epoch`), so the switch is
  /// atomic. Every logged entry of that epoch must be in `lines` or under the snapshot. The
  /// file is written even when empty: a file of that generation left by a crash before the
  /// rename must not be picked up.
  private async writeGeneration(
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
    // Whatever failed before, the files hold every entry durably again.
    doc.suspect = false;
    doc.unsynced = [];
    // Garbage from now on; a leftover (after a crash) is never read, generations only grow.
    await unlink(doc.journalPath(previous)).catch(() => {});
  }

  private async appendLines(doc: DocFiles, lines: string): Promise<void> {
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
    // The entries the snapshot does not cover move to a new generation.
    let lines = '';
    if (doc.version > snapshot.version) {
      const journal = await this.readJournal(doc.journalPath(doc.generation));
      for (const entry of journal)
        if (entryEnd(entry) > snapshot.version) lines += journalLine(JSON.stringify(entry));
      // The journal file holds what the checkpoints moved there; the rest is in the log.
      for (const entry of doc.logged) if (entry.end > snapshot.version) lines += entry.line;
    }
    await this.writeGeneration(doc, snapshot, lines);
    return { ok: true };
  }

  private async writeReset(
    doc: DocFiles,
    snapshot: Snapshot,
    expected: StoredPosition,
  ): Promise<ResetOutcome> {
    if (!doc.known) await this.read(doc);
    const epoch = doc.exists ? doc.epoch : null;
    const version = doc.exists ? doc.version : 0;
    if (epoch !== expected.epoch || version !== expected.version) {
      return { ok: false, reason: 'conflict' };
    }
    await this.ensureDir(doc.dir);
    await this.writeGeneration(doc, snapshot, '', snapshot.epoch);
    doc.exists = true;
    doc.epoch = snapshot.epoch;
    doc.version = snapshot.version;
    return { ok: true };
  }

  /// Replaces the state file atomically: temp file, fsync, rename, fsync of the directory.
  private async writeState(doc: DocFiles, state: StateFile): Promise<void> {
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

  /// Writes (`w`) or appends (`a`) `text` to one of the document's files and fsyncs it. Once
  /// the file is open, a failure leaves in doubt what the page cache shows of it: the document
  /// is then suspect.
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

  /// A write to the document's own files failed (see `DocFiles.suspect`). Also while closing:
  /// the close's checkpoint must not trust those files either.
  private markSuspect(doc: DocFiles): void {
    doc.suspect = true;
    if (this.closed) return;
    this.dirty.add(doc);
    this.scheduleCheckpoint();
  }

  private async ensureDir(dir: string): Promise<void> {
    if (this.syncedDirs.has(dir)) return;
    await mkdir(dir, { recursive: true });
    // The shard directory's own entry must reach the disk before files in it count.
    await syncDirectory(this.dataDir);
    this.syncedDirs.add(dir);
  }
}

/// The size of the entries a document holds in the write-ahead log only.
function waitingBytes(doc: DocFiles): number {
  let bytes = 0;
  for (const entry of doc.unsynced) bytes += Buffer.byteLength(entry.line);
  for (const entry of doc.logged) bytes += Buffer.byteLength(entry.line);
  return bytes;
}

/// How many documents the close's checkpoint writes at once: libuv's pool has four threads,
/// so more only queues, while each holds a file open.
const closeCheckpointConcurrency = 16;

/// Writes (`w`) or appends (`a`) `text` to the file at `path` and fsyncs it, synchronously:
/// for what the store does once, at open.
function writeDurablySync(path: string, text: string, flag: 'w' | 'a'): void {
  const fd = openSync(path, flag);
  try {
    let buffer = Buffer.from(text);
    while (buffer.length > 0) buffer = buffer.subarray(writeSync(fd, buffer));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/// `json` after its CRC-32: how journal lines and state files are written, so that a change on
/// the disk that still parses (a flipped digit in a step or a snapshot) is found when the file
/// is read, rather than served as a step or a document nobody made.
function withChecksum(json: string): string {
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}`;
}

const checksum = /^[0-9a-f]{8} $/;

/// The JSON of `text` from `start` to `end` written by `withChecksum`, checked; text written
/// before files carried checksums (it starts with '{') is returned as it is. Throws a
/// `TypeError` naming `what` when the checksum does not match.
function checkedJSON(text: string, start: number, end: number, what: string): string {
  if (text.charCodeAt(start) === 0x7b) return text.slice(start, end);
  const json = text.slice(start + 9, end);
  const prefix = text.slice(start, start + 9);
  if (!checksum.test(prefix) || crc32(json) !== parseInt(prefix, 16))
    throw new TypeError(`corrupt ${what}: checksum mismatch`);
  return json;
}

/// One line of a document's journal file.
function journalLine(json: string): string {
  return withChecksum(json) + '\n';
}

/// The log line for an entry of `doc` that a checkpoint carries forward: its journal line's
/// JSON (`journalLine` wrote it with a checksum and a newline), with the epoch it was appended
/// in, which after a failed reset need not be the document's (see `LoggedEntry.epoch`).
function carriedLine(doc: DocFiles, entry: LoggedEntry): string {
  const json = checkedJSON(entry.line, 0, entry.line.length - 1, `entry of ${doc.docId}`);
  return WriteAheadLog.line(doc.docId, entry.epoch, json);
}

/// The entries of a journal file's text up to `complete` (the end of its last whole line).
function parseJournalText(text: string, complete: number, path: string): JournalEntry[] {
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
/// are contiguous; the first may start inside the snapshot (it was kept whole). A gap is
/// damaged data, not an unreachable store: retrying cannot help (see `toUnavailable`).
function journalEnd(docId: string, snapshotVersion: number, journal: JournalEntry[]): number {
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
function stateText(state: StateFile): string {
  return withChecksum(JSON.stringify(state));
}

/// Reads a state file's text.
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
