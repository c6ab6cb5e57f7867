import type { DocFiles, LoggedEntry } from './doc_files.js';
import type { DurableWriter } from './durable_write.js';
import { errorMessage } from './failures.js';
import { checkedJSON, journalLine } from './format.js';
import type { DocumentQueue } from './queue.js';
import { readDocument } from './reader.js';
import type { FileStoreSettings } from './settings.js';
import { WriteAheadLog } from './write_ahead_log.js';

/// How many documents the close's checkpoint writes at once: libuv's pool has four threads,
/// so more only queues, while each holds a file open.
const closeCheckpointConcurrency = 16;

/// What a checkpointer works with: the store's settings, its log, queue and writer, and the
/// documents whose log records were set aside at open.
export interface CheckpointerParts {
  settings: FileStoreSettings;
  log: WriteAheadLog;
  queue: DocumentQueue;
  writer: DurableWriter;
  unreplayed: ReadonlySet<string>;
  /// The oldest log generation whose file may still exist.
  oldestLog: number;
}

/// Moves the entries that the write-ahead log alone holds into the documents' journals and
/// deletes the log files they were in (docs/file-store.md, "Checkpoints"). A checkpoint starts
/// once the log holds `checkpointBytes`, `checkpointMs` after its first record, soon after a
/// failed log write, and `checkpointRetryMs` (doubling up to `checkpointMs`) after one in which
/// a document failed. A failing document's entries are carried forward to a new log file, so
/// the old files go anyway. Failures are logged, never thrown: the log keeps what it holds.
export class Checkpointer {
  private readonly settings: FileStoreSettings;
  private readonly log: WriteAheadLog;
  private readonly queue: DocumentQueue;
  private readonly writer: DurableWriter;
  private readonly unreplayed: ReadonlySet<string>;
  /// The wait before the next retry of a failed checkpoint (see `checkpointRetryMs`).
  private retryDelay: number;
  /// Documents that committed to the log since the last checkpoint began.
  private dirty = new Set<DocFiles>();
  private oldestLog: number;
  private checkpointing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /// A log write failed while a checkpoint ran, which may have rotated before it: one more
  /// follows at once (see `logWriteFailed`).
  private again = false;
  /// When the last checkpoint that a failed log write brought forward started.
  private urgentAt = 0;
  private urgentArmed = false;
  private stopped = false;

  constructor(parts: CheckpointerParts) {
    this.settings = parts.settings;
    this.log = parts.log;
    this.queue = parts.queue;
    this.writer = parts.writer;
    this.unreplayed = parts.unreplayed;
    this.oldestLog = parts.oldestLog;
    this.retryDelay = parts.settings.checkpointRetryMs;
  }

  /// `doc` is about to commit records to the log: a checkpoint starting while that write is in
  /// flight must include it (its operation runs after the document's current one).
  noteCommit(doc: DocFiles): void {
    this.dirty.add(doc);
  }

  /// A write to `doc`'s own files failed (see `DocFiles.suspect`): the next checkpoint writes
  /// them again, whole.
  noteSuspect(doc: DocFiles): void {
    if (this.stopped) return;
    this.dirty.add(doc);
    this.schedule();
  }

  /// Starts a checkpoint when the log has grown past `checkpointBytes`, and arms the timer
  /// that starts one `checkpointMs` after the first record otherwise.
  schedule(): void {
    if (this.stopped) return;
    if (this.log.size >= this.settings.checkpointBytes) {
      this.start();
      return;
    }
    if (this.timer) return;
    this.arm(this.settings.checkpointMs);
  }

  /// A round's write to the log failed. The log goes on in a new file, but whether the rounds
  /// acknowledged earlier in the failed one are on the disk is in doubt: a failed write can
  /// leave pages of earlier writes lost after the fact (the kernel reports a write-back error
  /// once, to whichever sync asks first), and some devices report an error late, on a later
  /// write. Those entries are still in memory: a checkpoint now writes them to the documents'
  /// journals and fsyncs them, instead of leaving them on that file alone for up to
  /// `checkpointMs`. At most one such checkpoint per `checkpointRetryMs`, so that a disk that
  /// keeps failing is not checkpointed in a loop.
  logWriteFailed(error: unknown): void {
    if (this.stopped) return;
    if (this.checkpointing) {
      this.again = true;
      return;
    }
    if (this.urgentArmed) return;
    this.settings.logger?.warn(
      { dir: this.settings.dataDir, err: errorMessage(error) },
      'file store: a write-ahead log write failed; checkpointing now, so that the entries ' +
        'acknowledged before it do not depend on that log file',
    );
    this.armUrgent();
  }

  /// Starts no checkpoint from now on; `final` still runs one.
  stop(): void {
    this.stopped = true;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /// Waits for the checkpoint in flight and the log's last commits, then moves every cached
  /// document's logged entries to its journal and deletes the log, so that the next open has
  /// nothing to replay. On failure the log stays, complete, and the next open replays it.
  /// Resolves true either way.
  async final(): Promise<true> {
    try {
      await this.checkpointing;
      await this.log.close();
      // Several at a time, not all at once: thousands of documents would open thousands of
      // files (EMFILE). Every one is tried; any failure keeps the log.
      const docs = this.queue.cached();
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
      this.settings.logger?.warn(
        { dir: this.settings.dataDir, err: errorMessage(error) },
        'file store: could not checkpoint at close; the next open replays the write-ahead log',
      );
    }
    return true;
  }

  /// Replaces any armed timer with one that starts a checkpoint after `delay` ms.
  private arm(delay: number, urgent = false): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (urgent) {
        this.urgentArmed = false;
        this.urgentAt = Date.now();
      }
      this.start();
    }, delay);
    // Pending records are durable in the log: nothing is lost if the process exits first.
    this.timer.unref();
  }

  /// Arms the next checkpoint after a failed one: `retryDelay` from now, which doubles for the
  /// one after, up to `checkpointMs`. Replaces a timer armed for later.
  private scheduleRetry(): void {
    if (this.stopped) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(delay * 2, this.settings.checkpointMs);
    this.arm(delay);
  }

  private armUrgent(): void {
    if (this.stopped) return;
    this.urgentArmed = true;
    const wait = Math.max(0, this.urgentAt + this.settings.checkpointRetryMs - Date.now());
    this.arm(wait, true);
  }

  private start(): void {
    if (this.checkpointing || this.stopped) return;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    // This one rotates the log too, so it covers a failed file an armed one was for.
    this.urgentArmed = false;
    this.checkpointing = this.checkpoint()
      .catch((error: unknown) => {
        // The log files stay; the next checkpoint deletes them.
        this.scheduleRetry();
        this.settings.logger?.warn(
          { dir: this.settings.dataDir, err: errorMessage(error) },
          'file store: checkpoint failed; the write-ahead log keeps its entries',
        );
      })
      .finally(() => {
        this.checkpointing = null;
        if (this.again) {
          this.again = false;
          this.armUrgent();
          return;
        }
        // Records committed while it ran wait for the next one.
        if (this.dirty.size > 0) this.schedule();
      });
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
      docs.map((doc) => this.queue.bounded(doc, 'checkpoint', () => this.checkpointDocument(doc))),
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
      this.settings.logger?.warn(
        {
          dir: this.settings.dataDir,
          docId: doc.docId,
          err: errorMessage(result.reason),
          pending: doc.unsynced.length + doc.logged.length,
        },
        'file store: checkpoint of a document failed; the write-ahead log carries its entries',
      );
    }
    if (failed.length > 0) {
      this.scheduleRetry();
      if (!(await this.carryForward(left, failed))) return;
    } else {
      this.retryDelay = this.settings.checkpointRetryMs;
    }
    await this.log.removeThrough(left, this.oldestLog);
    this.oldestLog = left + 1;
  }

  /// Writes the entries that `failed` documents hold in the log only (`unsynced`, `logged`)
  /// to the log file of the generation after `left`, which `rotate` kept free, durably: then
  /// the files through `left` may go, and the log keeps only what the failing documents still
  /// need. Returns false, having written nothing, when a round that the rotation left in
  /// flight has not landed within `timeoutMs` (a hung log write): its appends are not in
  /// `logged` yet, so the files stay for the next checkpoint. Rejects with the file system's
  /// error when the carried file cannot be written; the files stay too.
  private async carryForward(left: number, failed: DocFiles[]): Promise<boolean> {
    const { dataDir, logger, timeoutMs } = this.settings;
    if (!(await this.log.landedThrough(left, timeoutMs))) {
      logger?.warn(
        { dir: dataDir, generation: left },
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
      for (const entry of doc.unsynced) text += this.carriedLine(doc, entry);
      for (const entry of doc.logged) text += this.carriedLine(doc, entry);
      entries += doc.unsynced.length + doc.logged.length;
    }
    if (text !== '') await this.log.writeCarried(left + 1, text);
    logger?.warn(
      { dir: dataDir, docs: failed.length, entries, bytes: Buffer.byteLength(text) },
      'file store: checkpoint incomplete; the entries of the documents that failed were ' +
        'carried forward in the write-ahead log, whose older files go',
    );
    return true;
  }

  /// The log line for an entry of `doc` carried forward: its journal line's JSON, with the
  /// epoch it was appended in, which after a failed reset need not be the document's (see
  /// `LoggedEntry.epoch`).
  private carriedLine(doc: DocFiles, entry: LoggedEntry): string {
    const json = checkedJSON(entry.line, 0, entry.line.length - 1, `entry of ${doc.docId}`);
    return WriteAheadLog.line(doc.docId, entry.epoch, json);
  }

  /// Appends the document's logged entries to its journal, fsync'd; a suspect document has
  /// its journal written again, whole.
  private async checkpointDocument(doc: DocFiles): Promise<void> {
    if (doc.suspect) return this.rewriteJournal(doc);
    if (doc.logged.length === 0) return;
    // After a failure memory may be behind the files (which journal generation is current,
    // which entries it already holds): read them again, which also drops those it holds.
    if (!doc.known) await readDocument(doc, this.unreplayed);
    if (doc.logged.length === 0) return;
    let lines = '';
    for (const entry of doc.logged) lines += entry.line;
    await this.writer.appendLines(doc, lines);
    doc.logged = [];
  }

  /// Writes the document's journal again, whole (what its files and the log hold after its
  /// snapshot), to a new generation: after a failed write, what reading the files shows is
  /// only known to be durable once written and fsync'd again.
  private async rewriteJournal(doc: DocFiles): Promise<void> {
    const stored = await readDocument(doc, this.unreplayed);
    if (stored) {
      let lines = '';
      for (const entry of stored.journal) lines += journalLine(JSON.stringify(entry));
      await this.writer.writeGeneration(doc, stored.snapshot, lines);
    } else {
      doc.suspect = false;
      doc.unsynced = [];
    }
  }
}
