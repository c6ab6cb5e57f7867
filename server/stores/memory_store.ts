import { segmentOf } from './archive.js';
import { entryOf } from './journal_entry.js';
import { MemoryArchive } from './memory_archive.js';
import type {
  AppendOutcome,
  AppendRequest,
  JournalEntry,
  ResetOutcome,
  Snapshot,
  SnapshotOutcome,
  Store,
  StoredDocument,
  StoredPosition,
} from './store.js';

interface MemoryRecord {
  epoch: string;
  version: number;
  snapshot: Snapshot | null;
  journal: JournalEntry[];
}

/// A store that keeps everything in this process: for tests and for trying things out. It
/// has the same compare-and-set and fencing rules as the durable stores, so code that works
/// against it works against them; it loses everything when the process exits.
export class MemoryStore implements Store {
  readonly kind = 'memory';
  readonly archive = new MemoryArchive();
  private readonly records = new Map<string, MemoryRecord>();

  async load(docId: string): Promise<StoredDocument | null> {
    const record = this.records.get(docId);
    if (!record) return null;
    // Copies, so that a caller mutating what it loaded cannot change what is stored.
    return {
      epoch: record.epoch,
      version: record.version,
      snapshot: record.snapshot,
      journal: record.journal.slice(),
    };
  }

  async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    let record = this.records.get(docId);
    if (!record) {
      if (request.baseVersion !== 0)
        return { ok: false, reason: 'conflict', version: 0, epoch: null };
      record = { epoch: request.epoch, version: 0, snapshot: null, journal: [] };
      this.records.set(docId, record);
    }
    if (record.epoch !== request.epoch || record.version !== request.baseVersion) {
      return { ok: false, reason: 'conflict', version: record.version, epoch: record.epoch };
    }
    record.journal.push(entryOf(request));
    record.version += request.steps.length;
    return { ok: true, version: record.version };
  }

  async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    let record = this.records.get(docId);
    if (!record) {
      // A snapshot of a document that was never journaled: only its first version may be
      // stored this way (a restore or an import starts a fresh history).
      if (snapshot.version !== 0) return { ok: false, reason: 'conflict' };
      record = { epoch: snapshot.epoch, version: 0, snapshot: null, journal: [] };
      this.records.set(docId, record);
    }
    if (record.epoch !== snapshot.epoch || record.version < snapshot.version) {
      return { ok: false, reason: 'conflict' };
    }
    if (record.snapshot && record.snapshot.version >= snapshot.version) {
      return { ok: false, reason: 'outdated' };
    }
    // The snapshot it replaces and the entries it trims go to the history, not away.
    const segment = segmentOf(record.snapshot, record.journal, snapshot.version);
    if (segment) this.archive.keep(docId, segment);
    record.snapshot = snapshot;
    let drop = 0;
    while (
      drop < record.journal.length &&
      record.journal[drop]!.baseVersion + record.journal[drop]!.steps.length <= snapshot.version
    ) {
      drop++;
    }
    if (drop > 0) record.journal.splice(0, drop);
    return { ok: true };
  }

  async reset(docId: string, snapshot: Snapshot, expected: StoredPosition): Promise<ResetOutcome> {
    const record = this.records.get(docId);
    const at: StoredPosition = record
      ? { epoch: record.epoch, version: record.version }
      : { epoch: null, version: 0 };
    if (at.epoch !== expected.epoch || at.version !== expected.version) {
      return { ok: false, reason: 'conflict' };
    }
    this.records.set(docId, {
      epoch: snapshot.epoch,
      version: snapshot.version,
      snapshot,
      journal: [],
    });
    return { ok: true };
  }

  async close(): Promise<void> {
    this.records.clear();
    this.archive.clear();
  }
}
