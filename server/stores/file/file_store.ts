import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { entryEnd } from '../journal_entry.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type ResetOutcome,
  type Snapshot,
  type SnapshotOutcome,
  type Store,
  type StoredDocument,
  type StoredPosition,
} from '../store.js';
import { answerRefused, planAppends, takePending } from './append_batch.js';
import { Checkpointer } from './checkpointer.js';
import { DirectoryLock, lockFileName } from './directory_lock.js';
import { waitingBytes, type DocFiles, type PendingAppend } from './doc_files.js';
import { DurableWriter } from './durable_write.js';
import { FileArchive } from './file_archive.js';
import { closedError, errorCode, toUnavailable } from './failures.js';
import { journalLine } from './format.js';
import { DocumentQueue } from './queue.js';
import { readDocument, readJournal } from './reader.js';
import { recoverDirectory } from './recovery.js';
import { fileStoreSettings, type FileStoreOptions, type FileStoreSettings } from './settings.js';
import { WriteAheadLog } from './write_ahead_log.js';

export type { FileStoreLogger, FileStoreOptions } from './settings.js';

/// A store on the local file system, one process per directory (docs/file-store.md). Each
/// document has a journal file and a state file replaced atomically; an append is durable once
/// it is in the write-ahead log all documents share, and checkpoints later move it to the
/// document's journal. Opening the directory replays what a crash left in the log.
///
/// I/O failures and timeouts reject with `StoreUnavailableError` (retryable). Files that do
/// not parse, and a journal that is corrupt other than in its last line or has a gap, reject
/// with a `TypeError` or `SyntaxError`: the document is damaged, and the server quarantines
/// it. Every operation is bounded by `timeoutMs`; one that timed out after it started may
/// still land, and the document is then read again before its next operation, so that a
/// retried append meets the compare-and-set against what is really on disk.
export class FileStore implements Store {
  readonly kind = 'file';
  readonly archive: FileArchive;
  private readonly settings: FileStoreSettings;
  private readonly lock: DirectoryLock;
  private readonly queue: DocumentQueue;
  private readonly writer: DurableWriter;
  private readonly log: WriteAheadLog;
  private readonly checkpointer: Checkpointer;
  /// The `unreplayedPath` of every document whose log records were set aside at open.
  private readonly unreplayed: Set<string>;
  private closed = false;
  private closing: Promise<void> | null = null;
  /// The check of the data directory in flight (see `ping`).
  private directoryCheck: Promise<void> | null = null;

  /// Opens `options.dataDir`: creates it if needed, takes its lock, removes temporary files
  /// left by a crash and replays the write-ahead log into the journals. Synchronous, so that a
  /// store never exists without its lock and a server built on it fails before it listens.
  /// Throws `DirectoryLockedError` when another live process (or another store in this
  /// process) has the directory, the file system's error when it cannot be created or read,
  /// and a `TypeError` when the log is damaged (starting anyway could serve documents without
  /// steps that were acknowledged).
  constructor(options: FileStoreOptions) {
    const settings = fileStoreSettings(options);
    this.settings = settings;
    const logger = settings.logger;
    this.lock = DirectoryLock.acquire(
      settings.dataDir,
      logger ? (obj, msg) => logger.warn(obj, `file store: ${msg}`) : null,
    );
    try {
      const recovered = recoverDirectory(settings.dataDir, logger);
      this.unreplayed = recovered.unreplayed;
      this.queue = new DocumentQueue(settings.dataDir, settings.timeoutMs, settings.maxCachedDocs);
      this.archive = new FileArchive((docId) => this.queue.doc(docId));
      this.writer = new DurableWriter(settings.dataDir, (doc) =>
        this.checkpointer.noteSuspect(doc),
      );
      this.log = new WriteAheadLog(
        settings.dataDir,
        recovered.nextGeneration,
        settings.logZeroAheadBytes,
        (error) => this.checkpointer.logWriteFailed(error),
      );
      this.checkpointer = new Checkpointer({
        settings,
        log: this.log,
        queue: this.queue,
        writer: this.writer,
        unreplayed: this.unreplayed,
        oldestLog: recovered.nextGeneration,
      });
    } catch (error) {
      this.lock.release();
      throw error;
    }
  }

  /// Operations running right now, timed out or not. Each may hold one of libuv's pool
  /// threads in a system call that a hung disk never returns from, and `process.exit` waits
  /// for those threads: see server/main.ts.
  get operationsInFlight(): number {
    return this.queue.inFlight;
  }

  async load(docId: string): Promise<StoredDocument | null> {
    const doc = this.queue.doc(docId);
    return this.queue.bounded(doc, 'load', () => readDocument(doc, this.unreplayed));
  }

  /// See `Store.append`. Appends to one document that queue up while its previous operation
  /// runs are written together, in one log commit (see `flush`).
  async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (this.closed) throw closedError();
    const doc = this.queue.doc(docId);
    let pending!: PendingAppend;
    const outcome = new Promise<AppendOutcome>((resolve, reject) => {
      pending = { request, resolve, reject, state: 'queued' };
    });
    doc.pending.push(pending);
    if (!doc.flushQueued) {
      doc.flushQueued = true;
      // Errors reach the callers through their own promises.
      this.queue.enqueue(doc, () => this.flush(doc)).catch(() => {});
    }
    return this.queue.deadline(doc, pending, outcome, 'append');
  }

  async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    const doc = this.queue.doc(docId);
    return this.queue.bounded(doc, 'snapshot', () => this.writeSnapshot(doc, snapshot));
  }

  /// See `Store.reset`. The new epoch's state file names a new, empty journal generation, so
  /// the switch is one atomic rename. The log's records of the old epoch are skipped by any
  /// later replay (they name another epoch), and the entries memory holds for it go with them.
  /// One process per directory, so no lease: `lease` is ignored.
  async reset(docId: string, snapshot: Snapshot, expected: StoredPosition): Promise<ResetOutcome> {
    const doc = this.queue.doc(docId);
    return this.queue.bounded(doc, 'reset', () => this.writeReset(doc, snapshot, expected));
  }

  /// Checks, cheaply, that documents can still be loaded and stored: the data directory is
  /// writable and still holds the store's lock file (a directory removed, moved away or
  /// replaced has none; every file the store opens is under it). Resolves when it does;
  /// rejects with `StoreUnavailableError` when it does not, when the store is closed, or after
  /// `timeoutMs` (a hung disk). For health checks. A full disk is not noticed.
  ping(): Promise<void> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('file store: closed'));
    const { dataDir, timeoutMs } = this.settings;
    // One check at a time, shared: on a hung disk each would hold one of libuv's pool threads,
    // which loads and appends need, and a load balancer keeps asking.
    this.directoryCheck ??= checkDirectory(dataDir).finally(() => {
      this.directoryCheck = null;
    });
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const message = `file store: ${dataDir} did not answer within ${timeoutMs} ms`;
        reject(new StoreUnavailableError(message));
      }, timeoutMs);
    });
    return Promise.race([this.directoryCheck, expired]).finally(() => clearTimeout(timer));
  }

  /// Refuses new operations, waits (at most `timeoutMs`) for those already queued and for a
  /// last checkpoint (the log's handle is the only one kept open between operations), then
  /// releases the directory's lock. Rejects with `StoreUnavailableError` when operations are
  /// still running after that time; the lock is then kept, since a stuck write may still land
  /// while this process lives, and the next process takes it over as stale.
  close(): Promise<void> {
    this.closing ??= this.drainAndUnlock();
    return this.closing;
  }

  private async drainAndUnlock(): Promise<void> {
    const { dataDir, timeoutMs } = this.settings;
    this.closed = true;
    this.queue.close();
    this.checkpointer.stop();
    const tails = this.queue.cached().map((doc) => doc.tail);
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      Promise.all(tails).then(() => this.checkpointer.final()),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!drained)
      throw new StoreUnavailableError(
        `file store: operations on ${dataDir} still running after ${timeoutMs} ms; ` +
          'its lock is kept until this process exits',
      );
    this.queue.clear();
    this.lock.release();
  }

  /// Applies every pending append in order against the version in memory, writes the accepted
  /// ones with one log commit, then settles them all. A document whose checkpoints fail has
  /// its appends refused, retryably, once a checkpoint's worth of its entries waits in the log:
  /// otherwise it would grow without bound in memory and in the log, each checkpoint carrying
  /// it all forward again.
  private async flush(doc: DocFiles): Promise<void> {
    doc.flushQueued = false;
    const batch = takePending(doc);
    if (batch.length === 0) return;
    try {
      if (!doc.known) await readDocument(doc, this.unreplayed);
    } catch (error) {
      for (const pending of batch) pending.reject(toUnavailable(error));
      throw error;
    }
    if (doc.checkpointFailing && this.refuseWhileFailing(doc, batch)) return;
    const plan = planAppends(doc, batch);
    try {
      // The state file first: a journal without one would be invisible to `readDocument`.
      if (plan.create) {
        const state = { docId: doc.docId, epoch: plan.epoch, generation: 0, snapshot: null };
        await this.writer.writeState(doc, state);
        doc.generation = 0;
        doc.snapshotVersion = -1;
        doc.journalEntrySynced = false;
      }
      if (plan.records !== '') {
        this.checkpointer.noteCommit(doc);
        await this.log.commit(plan.records);
      }
    } catch (error) {
      const unavailable = toUnavailable(error);
      for (const { pending } of plan.accepted) pending.reject(unavailable);
      answerRefused(batch, plan.outcomes);
      throw error;
    }
    doc.exists = plan.exists;
    doc.epoch = plan.epoch;
    doc.version = plan.version;
    for (const entry of plan.logged) doc.logged.push(entry);
    answerRefused(batch, plan.outcomes);
    for (const { pending, version } of plan.accepted) pending.resolve({ ok: true, version });
    if (plan.logged.length > 0) this.checkpointer.schedule();
  }

  /// Rejects `batch` and returns true when a checkpoint's worth of `doc`'s entries waits in
  /// the log (see `flush`).
  private refuseWhileFailing(doc: DocFiles, batch: PendingAppend[]): boolean {
    const waiting = waitingBytes(doc);
    if (waiting < this.settings.checkpointBytes) return false;
    const error = new StoreUnavailableError(
      `file store: the checkpoints of ${doc.docId} fail and ${waiting} bytes of its ` +
        'entries wait in the write-ahead log; its appends are refused until one succeeds',
    );
    for (const pending of batch) pending.reject(error);
    return true;
  }

  private async writeSnapshot(doc: DocFiles, snapshot: Snapshot): Promise<SnapshotOutcome> {
    if (!doc.known) await readDocument(doc, this.unreplayed);
    if (!doc.exists) {
      // As in the memory store: only a document's first version may be stored this way.
      if (snapshot.version !== 0) return { ok: false, reason: 'conflict' };
      const state = { docId: doc.docId, epoch: snapshot.epoch, generation: 0, snapshot };
      await this.writer.writeState(doc, state);
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
    // What the snapshot replaces and trims goes to the history first: a crash after it and
    // before the switch leaves both, and the next snapshot archives the same segment again.
    await this.archive.keepBeforeSnapshot(doc, snapshot.version);
    // The entries the snapshot does not cover move to a new generation.
    let lines = '';
    if (doc.version > snapshot.version) {
      const journal = await readJournal(doc.journalPath(doc.generation));
      for (const entry of journal)
        if (entryEnd(entry) > snapshot.version) lines += journalLine(JSON.stringify(entry));
      // The journal file holds what the checkpoints moved there; the rest is in the log.
      for (const entry of doc.logged) if (entry.end > snapshot.version) lines += entry.line;
    }
    await this.writer.writeGeneration(doc, snapshot, lines);
    return { ok: true };
  }

  private async writeReset(
    doc: DocFiles,
    snapshot: Snapshot,
    expected: StoredPosition,
  ): Promise<ResetOutcome> {
    if (!doc.known) await readDocument(doc, this.unreplayed);
    const epoch = doc.exists ? doc.epoch : null;
    const version = doc.exists ? doc.version : 0;
    if (epoch !== expected.epoch || version !== expected.version) {
      return { ok: false, reason: 'conflict' };
    }
    await this.writer.ensureDir(doc.dir);
    await this.writer.writeGeneration(doc, snapshot, '', snapshot.epoch);
    doc.exists = true;
    doc.epoch = snapshot.epoch;
    doc.version = snapshot.version;
    return { ok: true };
  }
}

/// Resolves when `dataDir` is writable and holds its lock file; rejects with
/// `StoreUnavailableError` naming the file system's error code otherwise.
async function checkDirectory(dataDir: string): Promise<void> {
  try {
    await access(dataDir, constants.W_OK);
    await stat(join(dataDir, lockFileName));
  } catch (error) {
    const message = `file store: ${dataDir} cannot be used (${String(errorCode(error))})`;
    throw new StoreUnavailableError(message, { cause: error });
  }
}
