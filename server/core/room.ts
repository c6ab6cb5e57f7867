import { randomUUID } from 'node:crypto';
import type { Node } from 'prosemirror-model';
import type { Logger } from 'pino';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import {
  type DocJSON,
  type DocRoom,
  type ErrorAnswer,
  type StepJSON,
  type StepsAnswer,
  type StepsBroadcast,
  type SyncAnswer,
  type SyncRequest,
} from '../../schema/events.js';
import type { Authority } from './authority.js';
import type { Lease, Snapshot, Store, StoredPosition } from '../stores/store.js';

/// What a room needs from the transport: one broadcast per flush to every socket of the
/// document, and a way to send everyone away when the room's copy can no longer be trusted
/// (`retryAfterMs`: when to come back, for `closing`).
export interface RoomTransport {
  broadcast(docId: string, message: StepsBroadcast): void;
  evict(docId: string, code: ErrorCode, message: string, retryAfterMs: number): void;
}

/// When editors this process stopped serving a document for (`moved`: handed over, its lease
/// lost or lapsed) should try again: by then the lease is free or another process holds it,
/// and serves it, save for the release's (or the other's acquire's) round trip to the store,
/// which this covers. Sooner, they could reach the next holder before the release and be
/// answered `moved` for a renewal period (see `Rooms.acquire`); with no hint at all, clients
/// fall back to their own backoff.
export const movedRetryMs = 100;

/// How long an editor refused because the lease is being confirmed waits before trying again
/// (ms): about one renewal's round trip.
export const leaseRetryMs = 250;

/// The message of that refusal (`unavailable`).
export const leaseUnconfirmed =
  'This node is confirming it still serves this document: try again in a moment';

/// How long a read refused because its document's room is closed but still settling with its
/// store (`askStore`, `restartHistory`) waits before trying again (ms): about a store read's
/// round trip, after which the room is gone and the next read loads what the store holds.
export const settlingRetryMs = 250;

/// Receives the outcome and timings of every `steps` message: 'accepted' or an error code,
/// and milliseconds from `performance.now()` when it was received, validated and applied,
/// persisted (NaN when it never got that far) and answered. `MetricsRecorder` is one.
export interface BatchObserver {
  record(
    docId: string,
    outcome: string,
    steps: number,
    received: number,
    applied: number,
    persisted: number,
    sent: number,
  ): void;
}

/// A batch made durable, broadcast and acknowledged: what `RoomHooks.accepted` receives.
export interface AcceptedBatch {
  docId: string;
  /// The version after the batch.
  version: number;
  /// The steps as they were applied (rebased when the server rebased them).
  steps: readonly StepJSON[];
  clientID: string;
  /// Who sent it, as the host's `authenticate` named them; null in open mode.
  user: string | null;
}

/// Called by the rooms when documents come and go and batches are accepted. Each is the
/// host's code behind a wrapper that catches what it throws: a room never sees a throw.
export interface RoomHooks {
  /// Awaited after a document is loaded (or made) and before anyone is served from it;
  /// rejecting refuses the load with the error's code (`CodedError`) or `internal`.
  loaded?(room: Room): Promise<void>;
  accepted?(batch: AcceptedBatch): void;
  /// Once for every room loaded (whose `loaded` passed), when it has left memory: unloaded
  /// (after its snapshot), handed over or lost to another process, closed after a failure or
  /// a conflict, or closed with the registry.
  unloaded?(room: Room): void;
}

/// Room settings taken from the server configuration.
export interface RoomOptions {
  /// The most time between the starts of two flushes of a busy room (ms). A batch that
  /// arrives after a quiet spell is flushed at the end of its event-loop turn; while batches
  /// keep arriving, those of the next interval wait and go together: one journal append, one
  /// broadcast frame per socket instead of one per batch. The interval is `flushUsPerSocket` µs
  /// per joined socket, up to this: a flush costs a frame per socket, so a room's frames per
  /// second stay bounded whatever its size, and a small room waits next to nothing.
  /// 0 flushes every turn.
  flushIntervalMs: number;
  flushUsPerSocket: number;
  snapshotEverySteps: number;
  snapshotEveryMs: number;
  /// Written into every snapshot: the version of the schema its document was made with.
  schemaVersion: number;
}

/// How long a room that must learn whether its store lost steps (`Room.askStore`) keeps asking a
/// store that cannot be read: a Redis restarted from its file is back within this, as a rule.
export const storeCheckGiveUpMs = 60_000;

/// How many editors' last versions a snapshot keeps (`Snapshot.clients`): the most recent. An
/// editor away while more than this many others edited the document is not told whether its
/// lost batch landed (it re-applies it, as before the ledger existed).
export const ledgerSize = 1000;

/// A batch accepted by the authority and waiting to be journaled, acknowledged and broadcast.
interface PendingBatch {
  ack: (answer: StepsAnswer) => void;
  clientID: string;
  user: string | null;
  steps: StepJSON[];
  version: number;
  doc: Node;
  received: number;
  applied: number;
}

/// Why a room stopped serving: a journal conflict (another process extended the document) or
/// an unload. A closed room refuses everything; its registry drops it.
export type RoomState = 'open' | 'closed';

/// One document's room in this process: the pure authority plus what makes it durable and
/// shared. Accepted batches are journaled as one group commit per event-loop turn, and only
/// then acknowledged and broadcast (one broadcast for the whole group). Clients are only ever
/// shown *published* state: steps that are durable. Steps applied but not yet durable are
/// rewound if the journal refuses or fails them, which loses nothing anyone was promised.
export class Room {
  readonly docId: string;
  readonly epoch: string;
  state: RoomState = 'open';
  /// Joined sockets; the registry unloads a room that stays empty.
  sockets = 0;
  /// The last version made durable, acknowledged and broadcast, and its document.
  publishedVersion: number;
  publishedDoc: Node;
  snapshotVersion: number;
  /// Set when the last snapshot was written (ms, Date.now clock).
  lastSnapshotAt: number;
  /// Called once when the room closes itself (conflict, failure): the registry forgets it.
  onClose: (room: Room) => void = () => {};
  /// Set when serving the room threw and it was closed (`fail`).
  failed = false;
  /// The document's lease, with a store shared by several processes: every append and
  /// snapshot carries it, and the store refuses them once another process took it.
  lease: Lease | null = null;
  /// When the lease was taken (ms, `performance.now()`): a handover request is honoured only after a
  /// short hold, so that two nodes that both receive editors cannot bounce a document.
  leasedAt = 0;
  /// When the last renewal that was answered held was sent (ms, `performance.now()`): the
  /// lease runs a lease time from when the store ran it, which is later, never earlier.
  leaseRenewedAt = 0;
  /// Until when (ms, `performance.now()`) the lease is surely still this process's: a margin
  /// short of a lease time after `leaseRenewedAt`. Set with the lease and at each renewal.
  leaseFreshUntil = 0;
  /// How long a read refused while this room, closed, settles with its store should wait before
  /// asking again (ms): a store read's round trip, or, while the store cannot be read, the
  /// time until the room asks it again (`askStore`'s back-off, up to 5 s).
  settleRetryMs = settlingRetryMs;
  /// Closed because its lease was found gone (`leaseGone`), and settling: another process may
  /// serve the document now, so reads are sent there (`moved`), as its editors were.
  leaseLost = false;
  /// Called when `sync` finds the lease past `leaseFreshUntil`: the registry renews it now
  /// (unless a renewal is in flight), so that the editor's retry finds it confirmed.
  onLeaseStale: (room: Room) => void = () => {};

  private readonly authority: Authority;
  private readonly store: Store;
  private readonly transport: RoomTransport;
  private readonly observer: BatchObserver | null;
  private readonly hooks: RoomHooks;
  private readonly log: Logger;
  private readonly options: RoomOptions;
  private readonly now: () => number;
  private pending: PendingBatch[] = [];
  private flushing = false;
  /// Set once the room stores its copy under a new epoch (`restartHistory`): the append path
  /// and a lease check may both find the store behind, and it must run once.
  private restarting = false;
  private flushScheduled = false;
  /// When the last flush started (ms, `performance.now()`).
  private lastFlushAt = -Infinity;
  private readonly flushBound = (): void => this.flush();
  private snapshotting: Promise<boolean> | null = null;
  private snapshotTimer: NodeJS.Timeout | null = null;
  /// After a failed snapshot, the wait before the next try (ms): 1 s, doubling with each
  /// failure, up to `snapshotEveryMs`; 0 once one succeeds.
  private snapshotRetryMs = 0;
  /// Resolves when nothing is pending or in flight; for graceful shutdown.
  private idleWaiters: (() => void)[] = [];
  /// `publishedDoc.toJSON()`, made once per published version for every join, pull and
  /// snapshot that needs the whole document (`docJSONVersion` says which version it is).
  private docJSON: DocJSON | null = null;
  private docJSONVersion = -1;
  /// Per client id, the version after its last published batch (see `Snapshot.clients`). Not
  /// the authority's `lastEnd`, which also counts batches applied but not yet durable (and is
  /// rewound with them): a client is told only of what the document it is sent holds.
  private readonly ledger: Map<string, number>;

  constructor(
    docId: string,
    epoch: string,
    authority: Authority,
    snapshotVersion: number,
    deps: {
      store: Store;
      transport: RoomTransport;
      observer: BatchObserver | null;
      log: Logger;
      options: RoomOptions;
      hooks?: RoomHooks;
      now?: () => number;
      /// The ledger as the stored document left it (snapshot and journal).
      clients?: ReadonlyMap<string, number>;
    },
  ) {
    this.docId = docId;
    this.epoch = epoch;
    this.authority = authority;
    this.publishedVersion = authority.version;
    this.publishedDoc = authority.doc;
    this.snapshotVersion = snapshotVersion;
    this.store = deps.store;
    this.transport = deps.transport;
    this.observer = deps.observer;
    this.hooks = deps.hooks ?? {};
    this.log = deps.log;
    this.options = deps.options;
    this.now = deps.now ?? Date.now;
    this.ledger = new Map(deps.clients ?? []);
    this.lastSnapshotAt = this.now();
    if (this.publishedVersion > this.snapshotVersion) this.armSnapshotTimer();
  }

  /// The answer to `join` and `pull`: the steps since the client's version when the history
  /// still holds them all (and the epoch matches), otherwise the whole published document,
  /// with how far it holds the batches of `clientID` (the asking connection's). Refused
  /// `unavailable` once the room is closed, and, with `retryAfterMs`, while its lease may have
  /// lapsed (`leaseFresh`) until a renewal confirms it.
  sync(request: SyncRequest, clientID?: string): SyncAnswer {
    if (this.state !== 'open') return { ok: false, ...errorBody('unavailable') };
    if (!this.leaseFresh()) {
      // Not answered from the copy, nor waited for here (the answer is synchronous): a
      // renewal is asked for, and the editor retries once it is likely answered. The protocol
      // waits for one before it asks (`Rooms.get`, `Rooms.confirm`): this is for a lease that
      // went unconfirmed since.
      this.onLeaseStale(this);
      return { ok: false, ...errorBody('unavailable', leaseUnconfirmed, leaseRetryMs) };
    }
    const { version, epoch } = request;
    if (version !== undefined && (epoch === undefined || epoch === this.epoch)) {
      const since = this.authority.stepsSince(version, this.publishedVersion);
      if (since) {
        return {
          ok: true,
          epoch: this.epoch,
          version: this.publishedVersion,
          steps: since.steps,
          clientIDs: since.clientIDs,
        };
      }
    }
    const acceptedThrough = clientID === undefined ? undefined : this.ledger.get(clientID);
    return {
      ok: true,
      epoch: this.epoch,
      version: this.publishedVersion,
      doc: this.publishedJSON(),
      ...(acceptedThrough === undefined ? {} : { acceptedThrough }),
    };
  }

  /// The newest document and its version, including steps applied but not yet durable: what
  /// the server's own edits are made against, so that they never need rebasing.
  current(): { doc: Node; version: number } {
    return { doc: this.authority.doc, version: this.authority.version };
  }

  /// The published document as JSON, serialised once per version.
  publishedJSON(): DocJSON {
    if (this.docJSONVersion !== this.publishedVersion || this.docJSON === null) {
      this.docJSON = this.publishedDoc.toJSON() as DocJSON;
      this.docJSONVersion = this.publishedVersion;
    }
    return this.docJSON;
  }

  /// Handles a `steps` message. The answer goes through `ack`: after the broadcast that carries
  /// the steps when they are accepted, at once when they are refused. `user` is who sent it
  /// (for `RoomHooks.accepted`), null when nobody authenticated.
  receive(
    version: number,
    steps: readonly unknown[],
    clientID: string,
    ack: (answer: StepsAnswer) => void,
    received: number,
    user: string | null = null,
  ): void {
    if (this.state !== 'open') {
      this.refuse(ack, 'unavailable', undefined, this.publishedVersion, received, steps.length);
      return;
    }
    const outcome = this.authority.receive(version, steps, clientID);
    if (!outcome.ok) {
      this.refuse(
        ack,
        outcome.code,
        outcome.message,
        outcome.version,
        received,
        steps.length,
        outcome.code === 'too-large' ? outcome.room : undefined,
      );
      return;
    }
    this.pending.push({
      ack,
      clientID,
      user,
      steps: outcome.steps,
      version: outcome.version,
      doc: outcome.doc,
      received,
      applied: performance.now(),
    });
    if (!this.flushScheduled && !this.flushing) this.scheduleFlush();
  }

  /// Flushes after the I/O callbacks of this turn (every batch that arrived in it joins one
  /// append and one broadcast), or, when the last flush started less than the room's flush
  /// interval ago, once that interval is over: under load the batches of the interval go
  /// together.
  private scheduleFlush(): void {
    this.flushScheduled = true;
    const interval = Math.min(
      this.options.flushIntervalMs,
      (this.sockets * this.options.flushUsPerSocket) / 1000,
    );
    const wait = this.lastFlushAt + interval - performance.now();
    if (wait < 1) setImmediate(this.flushBound);
    else setTimeout(this.flushBound, wait);
  }

  /// Resolves once nothing is waiting to be journaled.
  whenIdle(): Promise<void> {
    if (this.pending.length === 0 && !this.flushing) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /// Batches this room accepted by rebasing them over steps their sender had not seen.
  get rebasedBatches(): number {
    return this.authority.rebasedBatches;
  }

  /// Nothing waits to be journaled, none is in flight, and a snapshot holds the published
  /// version: the room may be dropped from memory without losing track of anything.
  get settled(): boolean {
    return this.pending.length === 0 && !this.flushing && !this.needsSnapshot;
  }

  /// True when the published version is not in a snapshot yet.
  get needsSnapshot(): boolean {
    return this.publishedVersion > this.snapshotVersion;
  }

  /// Writes a snapshot of the published document if it has moved since the last one. Never
  /// overlaps with itself. Resolves true when the store holds a snapshot at the published
  /// version afterwards; false when the write failed (the room stays loaded and retries).
  snapshot(): Promise<boolean> {
    // The one in flight may be of an older version: once it is done, another if the version
    // moved on meanwhile. One that failed is not retried at once (see `armSnapshotTimer`).
    if (this.snapshotting) return this.snapshotting.then((ok) => (ok ? this.snapshot() : false));
    if (!this.needsSnapshot) return Promise.resolve(true);
    const version = this.publishedVersion;
    let doc: DocJSON;
    try {
      doc = this.publishedJSON();
    } catch (err) {
      this.fail(err);
      return Promise.resolve(false);
    }
    const started = performance.now();
    this.clearSnapshotTimer();
    let written: ReturnType<Store['snapshot']>;
    try {
      written = this.store.snapshot(
        this.docId,
        {
          doc,
          version,
          epoch: this.epoch,
          schemaVersion: this.options.schemaVersion,
          savedAt: Date.now(),
          clients: this.recentClients(),
        },
        this.lease?.token,
      );
    } catch (err) {
      // A store (a host's own) that throws instead of rejecting: from a timer, the throw would
      // end the process.
      written = Promise.reject(err);
    }
    this.snapshotting = written
      .then(
        (outcome) => {
          if (!outcome.ok && outcome.reason === 'lost') {
            this.leaseGone('the store refused a snapshot: the lease is gone');
            return false;
          }
          if (outcome.ok || outcome.reason === 'outdated') {
            this.snapshotVersion = Math.max(this.snapshotVersion, version);
            this.lastSnapshotAt = this.now();
            this.log.debug(
              { doc: this.docId, version, ms: +(performance.now() - started).toFixed(3) },
              'snapshot written',
            );
            return true;
          }
          // A conflict: the store holds another epoch, or fewer versions than this process
          // published. The second is a store gone back to an older state (a restore, a Redis
          // restarted from an older file) that kept the lease: no append or renewal may come to
          // notice it before the room is unloaded or handed over, and the acknowledged steps
          // that only this copy holds would go with it.
          this.snapshotConflict();
          return false;
        },
        (err: unknown) => {
          this.log.warn({ doc: this.docId, version, err }, 'snapshot failed; will retry');
          return false;
        },
      )
      .then((ok) => {
        this.snapshotting = null;
        this.snapshotRetryMs = ok
          ? 0
          : Math.min(2 * this.snapshotRetryMs || 1000, this.options.snapshotEveryMs);
        if (this.needsSnapshot && this.state === 'open') this.armSnapshotTimer();
        return ok;
      });
    return this.snapshotting;
  }

  /// Closes the room after something threw while serving it (a bug, or input that got past
  /// every check): what is pending is refused with `internal`, its editors are sent away with
  /// `internal` and reconnect, and the registry drops it, so the next join reloads the
  /// document from the store, which holds only what was made durable. Other rooms and the
  /// process are unaffected.
  fail(err: unknown): void {
    if (this.state === 'closed') return;
    this.failed = true;
    // A throw while publishing leaves the flag set, and a closed room never flushes again:
    // `whenIdle` (shutdown, a hand-over, making space) would wait on it for ever.
    this.flushing = false;
    this.log.error(
      { doc: this.docId, version: this.publishedVersion, err },
      'room failed; dropping it so its editors reload the document from the store',
    );
    const refused = this.pending;
    this.pending = [];
    this.refuseAll(refused, 'internal', this.publishedVersion);
    this.leave('internal');
  }

  /// Closes the room: refuses what is pending, stops timers. Sockets are the transport's.
  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.clearSnapshotTimer();
    const pending = this.pending;
    this.pending = [];
    this.refuseAll(pending, 'unavailable', this.publishedVersion);
    this.settleIdle();
  }

  private flush(): void {
    try {
      this.flushGroup();
    } catch (err) {
      this.fail(err);
    }
  }

  private flushGroup(): void {
    this.flushScheduled = false;
    if (this.flushing || this.pending.length === 0 || this.state !== 'open') {
      this.settleIdle();
      return;
    }
    const group = this.pending;
    this.pending = [];
    this.flushing = true;
    this.lastFlushAt = performance.now();
    const baseVersion = this.publishedVersion;
    let steps: StepJSON[];
    let clientIDs: string[];
    if (group.length === 1) {
      steps = group[0]!.steps;
      clientIDs = new Array(steps.length).fill(group[0]!.clientID);
    } else {
      steps = [];
      clientIDs = [];
      for (let i = 0; i < group.length; i++) {
        const batch = group[i]!;
        for (let j = 0; j < batch.steps.length; j++) {
          steps.push(batch.steps[j]!);
          clientIDs.push(batch.clientID);
        }
      }
    }
    let appended: ReturnType<Store['append']>;
    try {
      appended = this.store.append(this.docId, {
        epoch: this.epoch,
        baseVersion,
        steps,
        clientIDs,
        ...(this.lease ? { lease: this.lease.token } : {}),
      });
    } catch (err) {
      // A store (a host's own) that throws instead of rejecting: the group left `pending`
      // above, so `fail` would not answer it. Handled as the failed append it is.
      appended = Promise.reject(err);
    }
    appended
      .then(
        (outcome) => {
          if (outcome.ok) this.publish(group, steps, clientIDs);
          else if (outcome.reason === 'lost') this.lostLease(group, outcome.stored);
          else this.conflict(group, outcome.version, outcome.epoch);
        },
        (err: unknown) => this.appendFailed(group, err),
      )
      // A throw while publishing (after the append, so the steps are durable) must not become
      // an unhandled rejection, which would end the process: the room fails alone.
      .catch((err: unknown) => this.fail(err));
  }

  private publish(group: PendingBatch[], steps: StepJSON[], clientIDs: string[]): void {
    const persisted = performance.now();
    const last = group[group.length - 1]!;
    this.publishedVersion = last.version;
    this.publishedDoc = last.doc;
    // One broadcast for the whole group, encoded once by the adapter for every socket; it is
    // written before the acknowledgements below, so each sender sees its steps confirmed by
    // the broadcast first.
    this.transport.broadcast(this.docId, { version: last.version, steps, clientIDs });
    for (let i = 0; i < group.length; i++) {
      const batch = group[i]!;
      this.ledger.set(batch.clientID, batch.version);
      batch.ack({ ok: true, version: batch.version });
      if (this.observer) {
        this.observer.record(
          this.docId,
          'accepted',
          batch.steps.length,
          batch.received,
          batch.applied,
          persisted,
          performance.now(),
        );
      }
    }
    if (this.hooks.accepted) {
      for (let i = 0; i < group.length; i++) {
        const batch = group[i]!;
        this.hooks.accepted({
          docId: this.docId,
          version: batch.version,
          steps: batch.steps,
          clientID: batch.clientID,
          user: batch.user,
        });
      }
    }
    this.flushing = false;
    if (this.ledger.size > 2 * ledgerSize) this.trimLedger();
    if (
      this.publishedVersion - this.snapshotVersion >= this.options.snapshotEverySteps &&
      this.snapshotRetryMs === 0
    ) {
      void this.snapshot();
    } else if (this.snapshotTimer === null && !this.snapshotting) {
      this.armSnapshotTimer();
    }
    this.flushNextOrSettle();
  }

  private appendFailed(group: PendingBatch[], err: unknown): void {
    this.log.warn({ doc: this.docId, err }, 'journal append failed; refusing the batches');
    // Everything applied after the published version depended on the failed group: rewind
    // the authority and refuse it all. None of it was acknowledged.
    const refused = group.concat(this.pending);
    this.pending = [];
    this.authority.rewind(this.publishedVersion, this.publishedDoc);
    this.flushing = false;
    this.refuseAll(refused, 'unavailable', this.publishedVersion);
    this.settleIdle();
  }

  private conflict(
    group: PendingBatch[],
    storedVersion: number,
    storedEpoch: string | null = this.epoch,
  ): void {
    // Another writer can only move a document on, never back: a store behind what this
    // process published, in its epoch (or without the document), lost acknowledged steps (a
    // restore, or writes its last fsync never reached). Reloading would serve its older copy
    // under the same epoch, hand the lost version numbers out again for other steps, and
    // every editor that saw the lost ones would be told it is up to date: silent divergence.
    const regressed = this.regressed({ epoch: storedEpoch, version: storedVersion });
    if (!regressed) {
      this.log.warn(
        { doc: this.docId, version: this.publishedVersion, storedVersion },
        'journal conflict: another writer extended this document; reloading',
      );
    }
    const refused = group.concat(this.pending);
    this.pending = [];
    this.flushing = false;
    this.refuseAll(refused, 'stale', storedVersion);
    if (regressed) {
      this.restartHistory({ epoch: storedEpoch, version: storedVersion });
      return;
    }
    // This copy is behind the store. Its sockets rejoin and load the stored document, which
    // answers them with the missing steps (or the whole document).
    this.leave('stale', 'The document changed elsewhere: rejoin');
    // `leave` settles only a room it closes itself; this one may have closed while the
    // append was in flight, and its waiters were held by the flag cleared above.
    this.settleIdle();
  }

  /// After the store was found behind the published version (`conflict`): stores this
  /// process's published document, which holds every acknowledged step, as the snapshot of a
  /// new epoch, then sends the editors away (`stale`). They rejoin with the old epoch and
  /// reload the whole document, so no version number ever names two different steps. The
  /// room stays closed but registered until then, so a join meanwhile is answered
  /// `unavailable` (retryable) rather than loading the store's older copy. Without
  /// `Store.reset`, or when it fails, what the store holds is all that is left: the editors
  /// reload it, and the loss is logged as an error.
  private restartHistory(stored: StoredPosition, fenced = true): void {
    if (this.restarting) {
      // The first call settles only what was idle when it ends: an append that found the
      // store behind meanwhile (and cleared its flag before calling here) is settled now.
      this.settleIdle();
      return;
    }
    this.restarting = true;
    this.close();
    const version = this.publishedVersion;
    const epoch = randomUUID();
    const context = {
      doc: this.docId,
      epoch: this.epoch,
      version,
      storedEpoch: stored.epoch,
      storedVersion: stored.version,
    };
    const done = (restarted: boolean): void => {
      if (restarted) {
        this.log.error(
          { ...context, newEpoch: epoch },
          'the store lost acknowledged steps of this document: restored them from memory under a new epoch; its editors reload',
        );
      }
      this.leave('stale', 'The document changed elsewhere: rejoin');
      this.settleIdle();
    };
    const lost = (err: unknown): void => {
      this.log.error(
        { ...context, err },
        'the store lost acknowledged steps of this document, and this copy could not replace them: they are gone',
      );
      done(false);
    };
    if (!this.store.reset) {
      lost('the store cannot start a new epoch');
      return;
    }
    let snapshot: Snapshot;
    try {
      snapshot = {
        doc: this.publishedJSON(),
        version,
        epoch,
        schemaVersion: this.options.schemaVersion,
        savedAt: Date.now(),
        // The new epoch goes on with the same version numbers, so the ledger still says which
        // batch of each client landed last: a client whose acknowledgement was lost must not
        // send it again, and one whose batch was refused above must (the client compares with
        // what it saw confirmed before the epoch changed).
        clients: this.recentClients(),
      };
    } catch (err) {
      lost(err);
      return;
    }
    const reset = (lease: string | null | undefined): void => {
      let outcome: ReturnType<NonNullable<Store['reset']>>;
      try {
        outcome = this.store.reset!(this.docId, snapshot, stored, lease);
      } catch (err) {
        outcome = Promise.reject(err);
      }
      outcome.then((outcome) => {
        if (outcome.ok) done(true);
        // The lease lapsed while the room, closed, waited for the store (renewals skip closed
        // rooms, and a store that cannot be read renews nothing anyway): the copy is stored as
        // when the lease went back with the steps, only while nobody holds the document.
        else if (outcome.reason === 'lost' && typeof lease === 'string') reset(null);
        else lost(`the store answered ${outcome.reason}`);
      }, lost);
    };
    reset(fenced ? this.lease?.token : null);
  }

  /// The store refused an append because the lease is gone (expired while this process was
  /// cut off, and taken by another): nothing of the group was written. Everything pending is
  /// refused `moved` and the editors go to the node that holds the document now.
  ///
  /// Unless the store is behind what this process published, in its epoch: then it went back
  /// to an older state (a restart from an older file), which lost the lease with the steps, and
  /// this copy is the only one of them. It is stored under a new epoch as after a `conflict`,
  /// without the lease and only while nobody holds it: a new holder may have acknowledged
  /// steps on the older copy, which this one must not overwrite (the loss is logged then).
  private lostLease(group: PendingBatch[], stored?: StoredPosition): void {
    const refused = group.concat(this.pending);
    this.pending = [];
    this.flushing = false;
    if (stored && this.regressed(stored)) {
      this.refuseAll(refused, 'stale', stored.version);
      this.restartHistory(stored, false);
      return;
    }
    this.refuseAll(refused, 'moved', this.publishedVersion);
    this.moved('the store refused an append: the lease is gone');
    this.settleIdle();
  }

  /// True when the store at `stored` lost steps this process published: it is behind them in
  /// this epoch, or holds no such document.
  private regressed(stored: StoredPosition): boolean {
    return (
      (stored.epoch === this.epoch || stored.epoch === null) &&
      stored.version < this.publishedVersion
    );
  }

  /// Whether this room may answer from its copy now: true without a lease, or while the lease
  /// is surely still held (`leaseFreshUntil`). A process paused past its lease time (SIGSTOP,
  /// a long GC, a renewal whose answer came late) may have lost the document to another that
  /// moved it on, and would answer joins, pulls and reads from an old copy. False says only
  /// that a renewal must tell (see `Rooms.get`): a slow store, or one renewal that failed,
  /// also leaves a healthy lease unconfirmed for a moment, and must not close the room.
  leaseFresh(): boolean {
    return !this.lease || performance.now() < this.leaseFreshUntil;
  }

  /// The lease was found gone outside an append (a renewal, a snapshot), or could not be
  /// renewed for a whole lease time. Usually another process serves the document now
  /// (`moved`). But a store that went back to an older state loses the lease with the steps,
  /// and this copy is then the only one of them: where the store stands decides, as in
  /// `lostLease`. The room stops taking batches while it asks.
  leaseGone(reason: string): void {
    if (this.state !== 'open') return;
    this.close();
    this.leaseLost = true;
    this.askStore(
      (stored) => {
        if (stored && this.regressed(stored)) {
          // This copy is the only one of the lost steps: readers wait for it here.
          this.leaseLost = false;
          this.restartHistory(stored, false);
          return;
        }
        this.log.warn(
          { doc: this.docId, version: this.publishedVersion, reason },
          'document moved',
        );
        this.leave('moved');
      },
      // Cut off from the store, as a rule while another process can reach it: the editors go
      // there now rather than wait for this one.
      () => this.transport.evict(this.docId, 'moved', errorBody('moved').message, movedRetryMs),
    );
  }

  /// The store refused a snapshot as a conflict (see `snapshot`): if it is behind what this
  /// process published, this copy is stored under a new epoch, fenced by the lease this process
  /// still holds; otherwise another writer moved the document on, and the editors reload it.
  private snapshotConflict(): void {
    if (this.state !== 'open') return;
    this.close();
    this.askStore(
      (stored) => {
        if (stored && this.regressed(stored)) {
          this.restartHistory(stored);
          return;
        }
        this.log.warn(
          { doc: this.docId, version: this.publishedVersion, stored },
          'snapshot conflict: another writer changed this document; reloading',
        );
        this.leave('stale', 'The document changed elsewhere: rejoin');
      },
      () => this.transport.evict(this.docId, 'unavailable', errorBody('unavailable').message, 0),
    );
  }

  /// Reads where the store stands on this document (no document: epoch null, version 0) and
  /// hands it to `decide`. While the store cannot be read (an outage, a Redis still loading its
  /// file) the room, closed but registered, keeps its copy and asks again, after 250 ms, 500,
  /// … up to 5 s apart, for `storeCheckGiveUpMs`: deciding without the store's answer would
  /// drop the only copy of whatever it lost. `unreadable` runs at the first failure (the
  /// editors need not wait with the copy). Past the limit, `decide` gets null (the usual case:
  /// nothing lost), and the error is logged.
  private askStore(decide: (stored: StoredPosition | null) => void, unreadable: () => void): void {
    const started = performance.now();
    let wait = 250;
    let told = false;
    const ask = (): void => {
      let loaded: ReturnType<Store['load']>;
      try {
        loaded = this.store.load(this.docId);
      } catch (err) {
        loaded = Promise.reject(err);
      }
      loaded
        .then(
          (doc) => {
            // Answered: what is left (a reset, or leaving) takes a store round trip.
            this.settleRetryMs = settlingRetryMs;
            decide(doc ? { epoch: doc.epoch, version: doc.version } : { epoch: null, version: 0 });
          },
          (err: unknown) => {
            if (performance.now() - started >= storeCheckGiveUpMs) {
              this.log.error(
                { doc: this.docId, version: this.publishedVersion, err },
                'the store could not be read to learn whether it lost steps of this document; dropping this copy',
              );
              decide(null);
              return;
            }
            if (!told) {
              told = true;
              unreadable();
            }
            this.log.warn(
              { doc: this.docId, err, retryMs: wait },
              'the store cannot be read; this copy is kept until it answers',
            );
            setTimeout(ask, wait).unref();
            this.settleRetryMs = wait;
            wait = Math.min(2 * wait, 5000);
          },
        )
        // A throw here would be an unhandled rejection, which ends the process.
        .catch((err: unknown) =>
          this.log.error({ doc: this.docId, err }, 'store check not handled'),
        );
    };
    ask();
  }

  /// Stops serving because another process owns the document now (the lease was lost, or
  /// handed over): the editors are sent away with `moved` and reconnect through the gateway.
  moved(reason: string): void {
    if (this.state === 'closed') return;
    this.log.warn({ doc: this.docId, version: this.publishedVersion, reason }, 'document moved');
    this.leave('moved');
  }

  /// Closes the room (if it is not already), sends its sockets away with `code` and tells the
  /// registry.
  private leave(code: ErrorCode, message?: string): void {
    this.close();
    const retryAfterMs = code === 'moved' ? movedRetryMs : 0;
    this.transport.evict(this.docId, code, message ?? errorBody(code).message, retryAfterMs);
    this.onClose(this);
  }

  private flushNextOrSettle(): void {
    if (this.pending.length > 0 && this.state === 'open') {
      if (!this.flushScheduled) this.scheduleFlush();
    } else {
      this.settleIdle();
    }
  }

  private settleIdle(): void {
    if (this.pending.length > 0 || this.flushing) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (let i = 0; i < waiters.length; i++) waiters[i]!();
  }

  private refuseAll(batches: readonly PendingBatch[], code: ErrorCode, version: number): void {
    for (let i = 0; i < batches.length; i++) {
      const batch = batches[i]!;
      this.refuse(batch.ack, code, undefined, version, batch.received, batch.steps.length);
    }
  }

  private refuse(
    ack: (answer: StepsAnswer) => void,
    code: ErrorCode,
    message: string | undefined,
    version: number,
    received: number,
    steps: number,
    room?: DocRoom,
  ): void {
    // A batch refused `moved` (its room's lease found gone) comes back once the document is
    // served elsewhere, like the room's editors.
    const retryAfterMs = code === 'moved' ? movedRetryMs : undefined;
    const answer: ErrorAnswer = { ok: false, ...errorBody(code, message, retryAfterMs), version };
    if (room) answer.room = room;
    ack(answer);
    if (this.observer) {
      const now = performance.now();
      this.observer.record(this.docId, code, steps, received, now, NaN, now);
    }
  }

  /// The ledger's `ledgerSize` most recent entries, for a snapshot.
  private recentClients(): Record<string, number> {
    if (this.ledger.size > ledgerSize) this.trimLedger();
    return Object.fromEntries(this.ledger);
  }

  /// Keeps the `ledgerSize` clients whose last batch is the most recent.
  private trimLedger(): void {
    const kept = [...this.ledger].sort((a, b) => b[1] - a[1]).slice(0, ledgerSize);
    this.ledger.clear();
    for (const [clientID, end] of kept) this.ledger.set(clientID, end);
  }

  /// Arms the next snapshot: `snapshotEveryMs` after the last one written, or, after one
  /// failed, `snapshotRetryMs` from now (a failing store is not asked again at once, which
  /// would be a busy loop: the last success stays in the past).
  private armSnapshotTimer(): void {
    if (this.snapshotTimer !== null || this.state !== 'open') return;
    const wait =
      this.snapshotRetryMs > 0
        ? this.snapshotRetryMs
        : Math.max(0, this.lastSnapshotAt + this.options.snapshotEveryMs - this.now());
    this.snapshotTimer = setTimeout(() => {
      this.snapshotTimer = null;
      void this.snapshot();
    }, wait);
    this.snapshotTimer.unref();
  }

  private clearSnapshotTimer(): void {
    if (this.snapshotTimer !== null) {
      clearTimeout(this.snapshotTimer);
      this.snapshotTimer = null;
    }
  }
}
