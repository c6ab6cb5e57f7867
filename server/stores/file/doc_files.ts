import { createHash } from 'node:crypto';
import { join } from 'node:path';
import type { AppendOutcome, AppendRequest } from '../store.js';

/// One caller's wait for an operation: `queued` until the operation starts, `running` from
/// then on, `abandoned` when the caller's time ran out before it started.
export interface Waiter {
  state: 'queued' | 'running' | 'abandoned';
}

/// An append waiting for its document's next group commit (see `FileStore.append`).
export interface PendingAppend extends Waiter {
  request: AppendRequest;
  resolve: (outcome: AppendOutcome) => void;
  reject: (error: unknown) => void;
}

/// An entry committed to the write-ahead log and not yet written to its document's journal.
export interface LoggedEntry {
  /// The document's epoch it was appended in: a reset whose state file was renamed but not
  /// synced leaves entries of the old epoch in memory under a state file of the new one.
  epoch: string;
  baseVersion: number;
  end: number;
  /// The journal line, newline included.
  line: string;
}

/// One document's files and what this process knows of them. Operations on a document run one
/// at a time, in order, on `tail` (see `DocumentQueue`); `known` is false until the files were
/// read, and again after a failed or timed-out operation, when the disk may hold more than
/// memory says.
export class DocFiles {
  readonly docId: string;
  /// The shard directory holding the document's files, and the name they all start with.
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
  /// log, in memory, and in every carried file, so their size is bounded (see `waitingBytes`).
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

  /// The state file: which journal generation is current, and the newest snapshot.
  get statePath(): string {
    return join(this.dir, `${this.base}.state.json`);
  }

  /// The journal file of `generation`.
  journalPath(generation: number): string {
    return join(this.dir, `${this.base}.${generation}.journal`);
  }

  /// Log records set aside at open because they did not fit the document (see `recovery.ts`).
  get unreplayedPath(): string {
    return join(this.dir, `${this.base}.unreplayed.wal`);
  }
}

/// The size of the entries `doc` holds in the write-ahead log only.
export function waitingBytes(doc: DocFiles): number {
  let bytes = 0;
  for (const entry of doc.unsynced) bytes += Buffer.byteLength(entry.line);
  for (const entry of doc.logged) bytes += Buffer.byteLength(entry.line);
  return bytes;
}
