import type { Logger } from 'pino';
import type { DocJSON } from '../../schema/events.js';
import type { Lease, Store } from '../stores/store.js';
import type { ClientLedger } from './ledger.js';
import type { RoomOptions } from './room_options.js';

/// What a room's snapshots read from the room.
export interface SnapshotSource {
  readonly docId: string;
  readonly epoch: string;
  readonly publishedVersion: number;
  readonly lease: Lease | null;
  readonly state: string;
  /// The published document as JSON; may throw (the room then fails).
  publishedJSON(): DocJSON;
}

/// What the snapshots tell the room when a write cannot be taken as written.
export interface SnapshotOutcomes {
  /// Serialising the document threw.
  fail(err: unknown): void;
  /// The store refused the snapshot: the lease is gone.
  leaseGone(reason: string): void;
  /// The store refused the snapshot as a conflict: another epoch, or behind the room.
  conflict(): void;
}

/// One room's snapshots: written every `snapshotEverySteps` published steps or
/// `snapshotEveryMs` after the last one, never two at once. A failed write keeps the steps in
/// the journal and is retried after 1 s, doubling up to `snapshotEveryMs`: a failing store is
/// not asked again at once.
export class Snapshots {
  private written: number;
  /// When the last snapshot was written (ms, `now`'s clock).
  private lastAt: number;
  private writing: Promise<boolean> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /// After a failed write, the wait before the next try (ms); 0 once one succeeds.
  private retryMs = 0;

  constructor(
    private readonly room: SnapshotSource,
    private readonly outcomes: SnapshotOutcomes,
    private readonly deps: {
      store: Store;
      log: Logger;
      options: RoomOptions;
      ledger: ClientLedger;
      now: () => number;
    },
    version: number,
  ) {
    this.written = version;
    this.lastAt = deps.now();
  }

  /// The version the store's newest snapshot holds, as far as this room wrote it.
  get version(): number {
    return this.written;
  }

  /// True when the published version is not in a snapshot yet.
  get needed(): boolean {
    return this.room.publishedVersion > this.version;
  }

  /// After a publish: writes now when `snapshotEverySteps` steps are not in a snapshot (and
  /// the last write did not fail), else makes sure the timer is armed.
  published(): void {
    const { snapshotEverySteps } = this.deps.options;
    if (this.room.publishedVersion - this.version >= snapshotEverySteps && this.retryMs === 0) {
      void this.write();
    } else if (this.timer === null && !this.writing) {
      this.arm();
    }
  }

  /// Writes a snapshot of the published document if it has moved since the last one. Never
  /// overlaps with itself. Resolves true when the store holds a snapshot at the published
  /// version afterwards; false when the write failed (the room stays loaded and retries).
  write(): Promise<boolean> {
    // The one in flight may be of an older version: once it is done, another if the version
    // moved on meanwhile. One that failed is not retried at once (see `arm`).
    if (this.writing) return this.writing.then((ok) => (ok ? this.write() : false));
    if (!this.needed) return Promise.resolve(true);
    const version = this.room.publishedVersion;
    let doc: DocJSON;
    try {
      doc = this.room.publishedJSON();
    } catch (err) {
      this.outcomes.fail(err);
      return Promise.resolve(false);
    }
    this.stop();
    this.writing = this.send(doc, version).then((ok) => {
      this.writing = null;
      this.retryMs = ok ? 0 : Math.min(2 * this.retryMs || 1000, this.deps.options.snapshotEveryMs);
      if (this.needed && this.room.state === 'open') this.arm();
      return ok;
    });
    return this.writing;
  }

  /// Arms the next write: `snapshotEveryMs` after the last one written, or, after one
  /// failed, `retryMs` from now (the last success stays in the past, so without the back-off
  /// a failing store would be asked in a busy loop).
  arm(): void {
    if (this.timer !== null || this.room.state !== 'open') return;
    const wait =
      this.retryMs > 0
        ? this.retryMs
        : Math.max(0, this.lastAt + this.deps.options.snapshotEveryMs - this.deps.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.write();
    }, wait);
    this.timer.unref();
  }

  /// Clears the timer (the room closed, or a write starts).
  stop(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /// Sends one snapshot at `version`; resolves whether the store holds one at it now.
  private send(doc: DocJSON, version: number): Promise<boolean> {
    const { store, log, options, ledger } = this.deps;
    const { docId } = this.room;
    const started = performance.now();
    let written: ReturnType<Store['snapshot']>;
    try {
      written = store.snapshot(
        docId,
        {
          doc,
          version,
          epoch: this.room.epoch,
          schemaVersion: options.schemaVersion,
          savedAt: Date.now(),
          clients: ledger.recent(),
        },
        this.room.lease?.token,
      );
    } catch (err) {
      // A store (a host's own) that throws instead of rejecting: from a timer, the throw would
      // end the process.
      written = Promise.reject(err);
    }
    return written.then(
      (outcome) => {
        if (!outcome.ok && outcome.reason === 'lost') {
          this.outcomes.leaseGone('the store refused a snapshot: the lease is gone');
          return false;
        }
        if (outcome.ok || outcome.reason === 'outdated') {
          this.written = Math.max(this.written, version);
          this.lastAt = this.deps.now();
          const ms = +(performance.now() - started).toFixed(3);
          log.debug({ doc: docId, version, ms }, 'snapshot written');
          if (outcome.ok) options.afterSnapshot?.(docId);
          return true;
        }
        // A conflict: the store holds another epoch, or fewer versions than this process
        // published. The second is a store gone back to an older state (a restore, a Redis
        // restarted from an older file) that kept the lease: no append or renewal may come to
        // notice it before the room is unloaded or handed over, and the acknowledged steps
        // that only this copy holds would go with it.
        this.outcomes.conflict();
        return false;
      },
      (err: unknown) => {
        log.warn({ doc: docId, version, err }, 'snapshot failed; will retry');
        return false;
      },
    );
  }
}
