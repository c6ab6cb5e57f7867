import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import { type DocJSON } from '../../schema/events.js';
import type { Lease, Snapshot, Store, StoredPosition } from '../stores/store.js';
import type { BatchQueue, PendingBatch } from './batch_queue.js';
import { CodedError } from './coded_error.js';
import type { ClientLedger } from './ledger.js';
import { movedRetryMs, settlingRetryMs, type RoomTransport } from './room_options.js';

/// How long a room that must learn whether its store lost steps (`Recovery.askStore`) keeps
/// asking a store that cannot be read: a Redis restarted from its file is back within this, as
/// a rule.
export const storeCheckGiveUpMs = 60_000;

/// What a recovering room reads from the room.
export interface RecoveringRoom {
  readonly docId: string;
  readonly epoch: string;
  readonly publishedVersion: number;
  readonly lease: Lease | null;
  readonly state: string;
  publishedJSON(): DocJSON;
  /// Stops taking batches (refusing what is pending); idempotent.
  close(): void;
}

/// A room closed because its copy and the store disagree (a conflict, a lost lease), settling
/// with the store before it goes: where the store stands decides what happens to the copy. A
/// store that went back to an older state lost acknowledged steps that only this copy holds;
/// the copy is then stored under a new epoch (`restartHistory`) rather than dropped. See
/// docs/leases.md.
export class Recovery {
  /// How long a read refused while the room settles should wait before asking again (ms): a
  /// store read's round trip, or, while the store cannot be read, the time until the room asks
  /// it again (`askStore`'s back-off, up to 5 s).
  private retryMs = settlingRetryMs;
  /// Closed because its lease was found gone, and settling: another process may serve the
  /// document now, so reads are sent there (`moved`), as its editors were.
  private leaseLost = false;
  /// Set once the copy is being stored under a new epoch: the append path and a lease check
  /// may both find the store behind, and it must run once.
  private restarting = false;

  constructor(
    private readonly room: RecoveringRoom,
    private readonly deps: {
      store: Store;
      log: Logger;
      transport: RoomTransport;
      ledger: ClientLedger;
      schemaVersion: number;
      /// Closes the room, sends its sockets away with `code` and tells the registry.
      leave(code: ErrorCode, message?: string): void;
      /// Its batches: those of an append refused, and the ones waiting after it, are refused.
      queue: BatchQueue;
      /// Closes the room and sends its editors to the process that holds the document now.
      moved(reason: string): void;
    },
  ) {}

  /// What a read of the room is refused with once it is closed, while it settles with its
  /// store or stores its copy under a new epoch: its copy may be behind the store, or about
  /// to be replaced, so nothing is read from it, and nothing is loaded before it has gone.
  /// `moved` when it lost its lease (another process may serve the document: a reconnect
  /// through the gateway may reach it, as the room's editors were sent), `unavailable`
  /// otherwise; both retryable after the room's next try of its store.
  refusal(): CodedError {
    const retryAfterMs = this.retryMs;
    return this.leaseLost
      ? new CodedError('moved', 'This node may no longer hold this document', { retryAfterMs })
      : new CodedError('unavailable', 'This document is being reloaded: try again in a moment', {
          retryAfterMs,
        });
  }

  /// True when the store at `stored` lost steps this process published: it is behind them in
  /// this epoch, or holds no such document.
  regressed(stored: StoredPosition): boolean {
    return (
      (stored.epoch === this.room.epoch || stored.epoch === null) &&
      stored.version < this.room.publishedVersion
    );
  }

  /// The store refused an append as a conflict: another writer extended the document, or the
  /// store is behind what this process published (see `restartHistory`). Nothing of
  /// the group was written; everything pending is refused `stale`.
  appendConflict(
    group: PendingBatch[],
    storedVersion: number,
    storedEpoch: string | null = this.room.epoch,
  ): void {
    // Another writer can only move a document on, never back: a store behind what this
    // process published, in its epoch (or without the document), lost acknowledged steps (a
    // restore, or writes its last fsync never reached). Reloading would serve its older copy
    // under the same epoch, hand the lost version numbers out again for other steps, and
    // every editor that saw the lost ones would be told it is up to date: silent divergence.
    const regressed = this.regressed({ epoch: storedEpoch, version: storedVersion });
    if (!regressed) {
      this.deps.log.warn(
        { doc: this.room.docId, version: this.room.publishedVersion, storedVersion },
        'journal conflict: another writer extended this document; reloading',
      );
    }
    this.deps.queue.refuseAll(this.deps.queue.drain(group), 'stale', storedVersion);
    if (regressed) {
      this.restartHistory({ epoch: storedEpoch, version: storedVersion });
      return;
    }
    // This copy is behind the store. Its sockets rejoin and load the stored document, which
    // answers them with the missing steps (or the whole document).
    this.deps.leave('stale', 'The document changed elsewhere: rejoin');
    // `leave` settles only a room it closes itself; this one may have closed while the
    // append was in flight, and its waiters were held by the flag cleared above.
    this.deps.queue.settle();
  }

  /// The store refused an append because the lease is gone (expired while this process was
  /// cut off, and taken by another): nothing of the group was written. Everything pending is
  /// refused `moved` and the editors go to the node that holds the document now.
  ///
  /// Unless the store is behind what this process published, in its epoch: then it went back
  /// to an older state (a restart from an older file), which lost the lease with the steps, and
  /// this copy is the only one of them. It is stored under a new epoch as after a conflict,
  /// without the lease and only while nobody holds it: a new holder may have acknowledged
  /// steps on the older copy, which this one must not overwrite (the loss is logged then).
  appendLost(group: PendingBatch[], stored?: StoredPosition): void {
    const refused = this.deps.queue.drain(group);
    if (stored && this.regressed(stored)) {
      this.deps.queue.refuseAll(refused, 'stale', stored.version);
      this.restartHistory(stored, false);
      return;
    }
    this.deps.queue.refuseAll(refused, 'moved', this.room.publishedVersion);
    this.deps.moved('the store refused an append: the lease is gone');
    this.deps.queue.settle();
  }

  /// The lease was found gone outside an append (a renewal, a snapshot), or could not be
  /// renewed for a whole lease time. Usually another process serves the document now
  /// (`moved`). But a store that went back to an older state loses the lease with the steps,
  /// and this copy is then the only one of them: where the store stands decides. The room
  /// stops taking batches while it asks.
  leaseGone(reason: string): void {
    if (this.room.state !== 'open') return;
    this.room.close();
    this.leaseLost = true;
    const { log, transport } = this.deps;
    this.askStore(
      (stored) => {
        if (stored && this.regressed(stored)) {
          // This copy is the only one of the lost steps: readers wait for it here.
          this.leaseLost = false;
          this.restartHistory(stored, false);
          return;
        }
        const { docId, publishedVersion } = this.room;
        log.warn({ doc: docId, version: publishedVersion, reason }, 'document moved');
        this.deps.leave('moved');
      },
      // Cut off from the store, as a rule while another process can reach it: the editors go
      // there now rather than wait for this one.
      () => transport.evict(this.room.docId, 'moved', errorBody('moved').message, movedRetryMs),
    );
  }

  /// The store refused a snapshot as a conflict: if it is behind what this process published,
  /// this copy is stored under a new epoch, fenced by the lease this process still holds;
  /// otherwise another writer moved the document on, and the editors reload it.
  snapshotConflict(): void {
    if (this.room.state !== 'open') return;
    this.room.close();
    const { log, transport } = this.deps;
    this.askStore(
      (stored) => {
        if (stored && this.regressed(stored)) {
          this.restartHistory(stored);
          return;
        }
        log.warn(
          { doc: this.room.docId, version: this.room.publishedVersion, stored },
          'snapshot conflict: another writer changed this document; reloading',
        );
        this.deps.leave('stale', 'The document changed elsewhere: rejoin');
      },
      () => transport.evict(this.room.docId, 'unavailable', errorBody('unavailable').message, 0),
    );
  }

  /// After the store was found behind the published version: stores this process's published
  /// document, which holds every acknowledged step, as the snapshot of a new epoch, then sends
  /// the editors away (`stale`). They rejoin with the old epoch and reload the whole document,
  /// so no version number ever names two different steps. The room stays closed but
  /// registered until then, so a join meanwhile is answered `unavailable` (retryable) rather
  /// than loading the store's older copy. Without `Store.reset`, or when it fails, what the
  /// store holds is all that is left: the editors reload it, and the loss is logged as an
  /// error. `fenced`: the reset carries this process's lease.
  restartHistory(stored: StoredPosition, fenced = true): void {
    if (this.restarting) {
      // The first call settles only what was idle when it ends: an append that found the
      // store behind meanwhile (and cleared its flag before calling here) is settled now.
      this.deps.queue.settle();
      return;
    }
    this.restarting = true;
    this.room.close();
    const epoch = randomUUID();
    const context = {
      doc: this.room.docId,
      epoch: this.room.epoch,
      version: this.room.publishedVersion,
      storedEpoch: stored.epoch,
      storedVersion: stored.version,
    };
    const done = (restarted: boolean): void => {
      if (restarted) {
        this.deps.log.error(
          { ...context, newEpoch: epoch },
          'the store lost acknowledged steps of this document: restored them from memory under a new epoch; its editors reload',
        );
      }
      this.deps.leave('stale', 'The document changed elsewhere: rejoin');
      this.deps.queue.settle();
    };
    const lost = (err: unknown): void => {
      this.deps.log.error(
        { ...context, err },
        'the store lost acknowledged steps of this document, and this copy could not replace them: they are gone',
      );
      done(false);
    };
    if (!this.deps.store.reset) {
      lost('the store cannot start a new epoch');
      return;
    }
    let snapshot: Snapshot;
    try {
      snapshot = this.snapshotUnder(epoch);
    } catch (err) {
      lost(err);
      return;
    }
    this.reset(snapshot, stored, fenced ? this.room.lease?.token : null, done, lost);
  }

  /// The published document as the first snapshot of `epoch`. The new epoch goes on with the
  /// same version numbers, so the ledger still says which batch of each client landed last: a
  /// client whose acknowledgement was lost must not send it again, and one whose batch was
  /// refused must (the client compares with what it saw confirmed before the epoch changed).
  private snapshotUnder(epoch: string): Snapshot {
    return {
      doc: this.room.publishedJSON(),
      version: this.room.publishedVersion,
      epoch,
      schemaVersion: this.deps.schemaVersion,
      savedAt: Date.now(),
      clients: this.deps.ledger.recent(),
    };
  }

  /// Stores `snapshot` over `stored` with `lease` (null: only while nobody holds the
  /// document), then `done(true)`, or `lost` with why not.
  private reset(
    snapshot: Snapshot,
    stored: StoredPosition,
    lease: string | null | undefined,
    done: (restarted: boolean) => void,
    lost: (err: unknown) => void,
  ): void {
    let outcome: ReturnType<NonNullable<Store['reset']>>;
    try {
      outcome = this.deps.store.reset!(this.room.docId, snapshot, stored, lease);
    } catch (err) {
      outcome = Promise.reject(err);
    }
    outcome.then((outcome) => {
      if (outcome.ok) done(true);
      // The lease lapsed while the room, closed, waited for the store (renewals skip closed
      // rooms, and a store that cannot be read renews nothing anyway): the copy is stored as
      // when the lease went back with the steps, only while nobody holds the document.
      else if (outcome.reason === 'lost' && typeof lease === 'string')
        this.reset(snapshot, stored, null, done, lost);
      else lost(`the store answered ${outcome.reason}`);
    }, lost);
  }

  /// Reads where the store stands on this document (no document: epoch null, version 0) and
  /// hands it to `decide`. While the store cannot be read (an outage, a Redis still loading its
  /// file) the room, closed but registered, keeps its copy and asks again, after 250 ms, 500,
  /// … up to 5 s apart, for `storeCheckGiveUpMs`: deciding without the store's answer would
  /// drop the only copy of whatever it lost. `unreadable` runs at the first failure (the
  /// editors need not wait with the copy). Past the limit, `decide` gets null (the usual case:
  /// nothing lost), and the error is logged.
  private askStore(decide: (stored: StoredPosition | null) => void, unreadable: () => void): void {
    const { store, log } = this.deps;
    const docId = this.room.docId;
    const started = performance.now();
    let wait = 250;
    let told = false;
    const failed = (err: unknown): void => {
      if (performance.now() - started >= storeCheckGiveUpMs) {
        log.error(
          { doc: docId, version: this.room.publishedVersion, err },
          'the store could not be read to learn whether it lost steps of this document; dropping this copy',
        );
        decide(null);
        return;
      }
      if (!told) {
        told = true;
        unreadable();
      }
      log.warn(
        { doc: docId, err, retryMs: wait },
        'the store cannot be read; this copy is kept until it answers',
      );
      setTimeout(ask, wait).unref();
      this.retryMs = wait;
      wait = Math.min(2 * wait, 5000);
    };
    const ask = (): void => {
      let loaded: ReturnType<Store['load']>;
      try {
        loaded = store.load(docId);
      } catch (err) {
        loaded = Promise.reject(err);
      }
      loaded
        .then((doc) => {
          // Answered: what is left (a reset, or leaving) takes a store round trip.
          this.retryMs = settlingRetryMs;
          decide(doc ? { epoch: doc.epoch, version: doc.version } : { epoch: null, version: 0 });
        }, failed)
        // A throw here would be an unhandled rejection, which ends the process.
        .catch((err: unknown) => log.error({ doc: docId, err }, 'store check not handled'));
    };
    ask();
  }
}
