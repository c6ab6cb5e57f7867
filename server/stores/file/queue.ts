import { docIdPattern } from '../../../schema/events.js';
import { StoreUnavailableError } from '../store.js';
import { DocFiles, type Waiter } from './doc_files.js';
import { closedError, toUnavailable } from './failures.js';

/// The documents a file store knows, least recently used first, and the one-at-a-time queue
/// of operations on each, every caller's wait bounded by `timeoutMs` (docs/file-store.md,
/// "Timeouts"). A timed-out operation that had not started never runs; one that had started
/// may still finish, and its document is read again from disk once it settles.
export class DocumentQueue {
  private readonly dataDir: string;
  private readonly timeoutMs: number;
  private readonly maxCachedDocs: number;
  private readonly docs = new Map<string, DocFiles>();
  private running = 0;
  private closed = false;

  constructor(dataDir: string, timeoutMs: number, maxCachedDocs: number) {
    this.dataDir = dataDir;
    this.timeoutMs = timeoutMs;
    this.maxCachedDocs = maxCachedDocs;
  }

  /// Operations running right now, timed out or not.
  get inFlight(): number {
    return this.running;
  }

  /// The documents cached now.
  cached(): DocFiles[] {
    return [...this.docs.values()];
  }

  /// The document `docId`, cached and marked most recently used. Throws a `TypeError` for an
  /// id `docIdPattern` refuses.
  doc(docId: string): DocFiles {
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

  /// Refuses every operation queued from now on with `closedError`.
  close(): void {
    this.closed = true;
  }

  /// Forgets every cached document (once closed and drained).
  clear(): void {
    this.docs.clear();
  }

  /// Queues `operation` for the document and bounds the caller's wait (see `deadline`).
  bounded<T>(doc: DocFiles, what: string, operation: () => Promise<T>): Promise<T> {
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
  /// operation will not run); if it is running, the document is marked stuck, to be read
  /// again once the operation settles.
  deadline<T>(doc: DocFiles, waiter: Waiter, result: Promise<T>, what: string): Promise<T> {
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

  /// Runs `operation` after every operation already queued for the document. Its failure
  /// rejects with `toUnavailable` of the error and has the document read again next time.
  enqueue<T>(doc: DocFiles, operation: () => Promise<T>): Promise<T> {
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
      // A suspect one holds the only knowledge that its files need writing again; a logged
      // one the only copy in memory of entries not yet in its journal.
      if (cached.active === 0 && cached.logged.length === 0 && !cached.suspect)
        this.docs.delete(docId);
    }
  }
}
