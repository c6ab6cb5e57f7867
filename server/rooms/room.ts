import type { Node } from 'prosemirror-model';
import type { Logger } from 'pino';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import {
  type DocJSON,
  type StepJSON,
  type StepsAnswer,
  type SyncAnswer,
  type SyncRequest,
} from '../../schema/events.js';
import type { Authority } from '../core/authority.js';
import type { Lease, Store } from '../stores/store.js';
import { BatchQueue, groupSteps, type PendingBatch } from './batch_queue.js';
import type { CodedError } from './coded_error.js';
import { FlushPacer, processLoad } from './flush_policy.js';
import { ClientLedger } from './ledger.js';
import { LeaseState } from './lease_state.js';
import { Recovery } from './room_recovery.js';
import {
  leaseRetryMs,
  leaseUnconfirmed,
  movedRetryMs,
  type BatchObserver,
  type RoomOptions,
  type RoomTransport,
} from './room_options.js';
import { Snapshots } from './room_snapshots.js';
import type { RoomHooks } from './room_hooks.js';
import { syncAnswer } from './sync_answer.js';

/// What a room tells its registry.
export interface RoomEvents {
  /// Once, when the room closes itself (a conflict, a failure, its lease gone): the registry
  /// forgets it.
  closed(room: Room): void;
  /// `sync` found the lease past its fresh time: the registry renews it now (unless a renewal
  /// is in flight), so that the editor's retry finds it confirmed.
  leaseStale(room: Room): void;
}

/// Whether a room serves. A closed room (a conflict, a lost lease, a failure, an unload)
/// refuses everything; its registry drops it.
export type RoomState = 'open' | 'closed';

/// One document's room in this process: the pure authority plus what makes it durable and
/// shared. Accepted batches are journaled as one group commit per flush, all or nothing, and
/// only then acknowledged and broadcast (one broadcast for the whole group). Clients are only
/// ever shown *published* state: steps that are durable. Steps applied but not yet durable are
/// rewound if the journal refuses or fails them, which loses nothing anyone was promised.
/// Snapshots are `Snapshots`'; settling with the store after a conflict is `Recovery`'s.
export class Room {
  readonly docId: string;
  readonly epoch: string;
  private status: RoomState = 'open';
  private joined = 0;
  private version: number;
  private doc: Node;
  private hasFailed = false;
  private leaseState: LeaseState = LeaseState.none;
  private readonly authority: Authority;
  private readonly store: Store;
  private readonly transport: RoomTransport;
  private readonly hooks: RoomHooks;
  private readonly events: RoomEvents;
  private readonly log: Logger;
  private readonly options: RoomOptions;
  private readonly ledger: ClientLedger;
  private readonly snapshots: Snapshots;
  private readonly recovery: Recovery;
  private readonly queue: BatchQueue;
  private flushScheduled = false;
  private readonly pacer = new FlushPacer(processLoad);
  private readonly flushBound = (): void => this.flush();
  /// `publishedDoc.toJSON()`, made once per published version for every join, pull and
  /// snapshot that needs the whole document (`docJSONVersion` says which version it is).
  private docJSON: DocJSON | null = null;
  private docJSONVersion = -1;

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
      events?: RoomEvents;
      now?: () => number;
      /// The ledger as the stored document left it (snapshot and journal).
      clients?: ReadonlyMap<string, number>;
    },
  ) {
    this.docId = docId;
    this.epoch = epoch;
    this.authority = authority;
    this.version = authority.version;
    this.doc = authority.doc;
    this.store = deps.store;
    this.transport = deps.transport;
    this.hooks = deps.hooks ?? {};
    this.events = deps.events ?? { closed: () => {}, leaseStale: () => {} };
    this.log = deps.log;
    this.options = deps.options;
    this.ledger = new ClientLedger(deps.clients);
    this.queue = new BatchQueue(docId, deps.observer);
    const { store, log, options, ledger } = this;
    this.snapshots = new Snapshots(
      this,
      {
        fail: (err) => this.fail(err),
        leaseGone: (reason) => this.leaseGone(reason),
        conflict: () => this.recovery.snapshotConflict(),
      },
      { store, log, options, ledger, now: deps.now ?? Date.now },
      snapshotVersion,
    );
    this.recovery = new Recovery(this, {
      store,
      log,
      transport: this.transport,
      ledger,
      schemaVersion: options.schemaVersion,
      queue: this.queue,
      leave: (code, message) => this.leave(code, message),
      moved: (reason) => this.moved(reason),
    });
    if (this.version > snapshotVersion) this.snapshots.arm();
  }

  /// `open` while the room serves; `closed` for good once it stopped.
  get state(): RoomState {
    return this.status;
  }

  /// Joined sockets; the registry unloads a room that stays empty.
  get sockets(): number {
    return this.joined;
  }

  /// The last version made durable, acknowledged and broadcast.
  get publishedVersion(): number {
    return this.version;
  }

  /// The document at `publishedVersion`.
  get publishedDoc(): Node {
    return this.doc;
  }

  /// The version the newest snapshot this room wrote holds.
  get snapshotVersion(): number {
    return this.snapshots.version;
  }

  /// True once serving the room threw and it was closed (`fail`).
  get failed(): boolean {
    return this.hasFailed;
  }

  /// The document's lease with a store shared by several processes (null without one):
  /// every append and snapshot carries it.
  get lease(): Lease | null {
    return this.leaseState.lease;
  }

  /// The lease and when it was taken, renewed, and is trusted until (see `LeaseState`).
  get leaseTimes(): LeaseState {
    return this.leaseState;
  }

  /// What a read of this room is refused with once it is closed (see `Recovery.refusal`).
  closedRefusal(): CodedError {
    return this.recovery.refusal();
  }

  /// Counts a socket joined.
  socketJoined(): void {
    this.joined++;
  }

  /// Counts a socket gone; returns how many are left.
  socketLeft(): number {
    return --this.joined;
  }

  /// Holds `lease`, taken by a call sent at `askedAt` (ms, `performance.now()`).
  holdLease(lease: Lease, askedAt: number, ttlMs: number): void {
    this.leaseState = LeaseState.taken(lease, askedAt, ttlMs);
  }

  /// Notes a renewal sent at `sent` and answered held.
  leaseRenewed(sent: number, ttlMs: number): void {
    this.leaseState = this.leaseState.renewed(sent, ttlMs);
  }

  /// Lets the lease go here; returns it (null when there was none) for the store's release.
  releaseLease(): Lease | null {
    const lease = this.leaseState.lease;
    this.leaseState = this.leaseState.released();
    return lease;
  }

  /// The answer to `join` and `pull` (see `syncAnswer`), as `clientID` (the asking
  /// connection's) sees the published document. Refused
  /// `unavailable` once the room is closed, and, with `retryAfterMs`, while its lease may have
  /// lapsed (`leaseFresh`) until a renewal confirms it.
  sync(request: SyncRequest, clientID?: string): SyncAnswer {
    if (this.state !== 'open') return { ok: false, ...errorBody('unavailable') };
    if (!this.leaseFresh()) {
      // Not answered from the copy, nor waited for here (the answer is synchronous): a
      // renewal is asked for, and the editor retries once it is likely answered. The protocol
      // waits for one before it asks (`Rooms.get`, `Rooms.confirm`): this is for a lease that
      // went unconfirmed since.
      this.events.leaseStale(this);
      return { ok: false, ...errorBody('unavailable', leaseUnconfirmed, leaseRetryMs) };
    }
    return syncAnswer(
      {
        epoch: this.epoch,
        version: this.version,
        authority: this.authority,
        ledger: this.ledger,
        json: () => this.publishedJSON(),
      },
      request,
      clientID,
    );
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
      this.queue.refuse(ack, 'unavailable', undefined, this.version, received, steps.length);
      return;
    }
    const outcome = this.authority.receive(version, steps, clientID);
    if (!outcome.ok) {
      this.queue.refuse(
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
    this.queue.push({
      ack,
      clientID,
      user,
      steps: outcome.steps,
      version: outcome.version,
      doc: outcome.doc,
      received,
      applied: performance.now(),
    });
    if (!this.flushScheduled && !this.queue.flushing) this.scheduleFlush();
  }

  /// Flushes after the I/O callbacks of this turn (every batch that arrived in it joins one
  /// append and one broadcast), or later when the flush policy says the process or this room
  /// is under pressure (`flushWaitMs`): then the batches of that wait go together.
  private scheduleFlush(): void {
    this.flushScheduled = true;
    const wait = this.pacer.waitMs(this.sockets, this.options);
    if (wait < 1) setImmediate(this.flushBound);
    else setTimeout(this.flushBound, wait);
  }

  /// Resolves once nothing is waiting to be journaled.
  whenIdle(): Promise<void> {
    return this.queue.whenIdle();
  }

  /// Batches this room accepted by rebasing them over steps their sender had not seen.
  get rebasedBatches(): number {
    return this.authority.rebasedBatches;
  }

  /// Nothing waits to be journaled, none is in flight, and a snapshot holds the published
  /// version: the room may be dropped from memory without losing track of anything.
  get settled(): boolean {
    return this.queue.waiting === 0 && !this.queue.flushing && !this.needsSnapshot;
  }

  /// True when the published version is not in a snapshot yet.
  get needsSnapshot(): boolean {
    return this.snapshots.needed;
  }

  /// Writes a snapshot of the published document if it has moved since the last one. Never
  /// overlaps with itself. Resolves true when the store holds a snapshot at the published
  /// version afterwards; false when the write failed (the room stays loaded and retries).
  snapshot(): Promise<boolean> {
    return this.snapshots.write();
  }

  /// Closes the room after something threw while serving it (a bug, or input that got past
  /// every check): what is pending is refused with `internal`, its editors are sent away with
  /// `internal` and reconnect, and the registry drops it, so the next join reloads the
  /// document from the store, which holds only what was made durable. Other rooms and the
  /// process are unaffected.
  fail(err: unknown): void {
    if (this.status === 'closed') return;
    this.hasFailed = true;
    // A throw while publishing leaves the flag set, and a closed room never flushes again:
    // `whenIdle` (shutdown, a hand-over, making space) would wait on it for ever.
    this.queue.landed();
    this.log.error(
      { doc: this.docId, version: this.version, err },
      'room failed; dropping it so its editors reload the document from the store',
    );
    this.queue.refuseAll(this.queue.drain(), 'internal', this.version);
    this.leave('internal');
  }

  /// Closes the room: refuses what is pending, stops timers. Sockets are the transport's.
  close(): void {
    if (this.status === 'closed') return;
    this.status = 'closed';
    this.snapshots.stop();
    this.queue.refuseAll(this.queue.drain(), 'unavailable', this.version);
    this.queue.settle();
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
    if (this.queue.flushing || this.queue.waiting === 0 || this.status !== 'open') {
      this.queue.settle();
      return;
    }
    const group = this.queue.takeGroup();
    this.pacer.startedAt = performance.now();
    const baseVersion = this.publishedVersion;
    const { steps, clientIDs, users } = groupSteps(group);
    let appended: ReturnType<Store['append']>;
    try {
      appended = this.store.append(this.docId, {
        epoch: this.epoch,
        baseVersion,
        steps,
        clientIDs,
        users,
        at: (this.options.clock ?? Date.now)(),
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
          else if (outcome.reason === 'lost') this.recovery.appendLost(group, outcome.stored);
          else this.recovery.appendConflict(group, outcome.version, outcome.epoch);
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
    this.version = last.version;
    this.doc = last.doc;
    // One broadcast for the whole group, encoded once by the adapter for every socket, before
    // the acknowledgements, so each sender sees its steps confirmed by the broadcast first;
    // corked, each socket gets both in one write (released even if one throws: `fail` writes).
    this.transport.cork?.(this.docId);
    try {
      this.transport.broadcast(this.docId, { version: last.version, steps, clientIDs });
      for (let i = 0; i < group.length; i++) {
        const batch = group[i]!;
        this.ledger.set(batch.clientID, batch.version);
        this.queue.accepted(batch, persisted, this.pacer.startedAt);
      }
    } finally {
      this.transport.uncork?.();
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
    this.pacer.published(performance.now() - persisted);
    this.queue.landed();
    this.snapshots.published();
    this.flushNextOrSettle();
  }

  private appendFailed(group: PendingBatch[], err: unknown): void {
    this.log.warn({ doc: this.docId, err }, 'journal append failed; refusing the batches');
    // Everything applied after the published version depended on the failed group: rewind
    // the authority and refuse it all. None of it was acknowledged.
    const refused = this.queue.drain(group);
    this.authority.rewind(this.version, this.doc);
    this.queue.refuseAll(refused, 'unavailable', this.version);
    this.queue.settle();
  }

  /// Whether this room may answer from its copy now: true without a lease, or while the lease
  /// is surely still held (`LeaseState.freshUntil`). A process paused past its lease time
  /// (SIGSTOP, a long GC, a renewal whose answer came late) may have lost the document to
  /// another that moved it on, and would answer joins, pulls and reads from an old copy. False
  /// says only that a renewal must tell (see `Rooms.get`): a slow store, or one renewal that
  /// failed, also leaves a healthy lease unconfirmed for a moment, and must not close the room.
  leaseFresh(): boolean {
    return this.leaseState.fresh(performance.now());
  }

  /// The lease was found gone outside an append (a renewal, a snapshot), or could not be
  /// renewed for a whole lease time: the room closes and settles with its store
  /// (`Recovery.leaseGone`), which decides whether its editors go elsewhere (`moved`) or its
  /// copy is stored under a new epoch.
  leaseGone(reason: string): void {
    this.recovery.leaseGone(reason);
  }

  /// Stops serving because another process owns the document now (the lease was lost, or
  /// handed over): the editors are sent away with `moved` and reconnect through the gateway.
  moved(reason: string): void {
    if (this.status === 'closed') return;
    this.log.warn({ doc: this.docId, version: this.version, reason }, 'document moved');
    this.leave('moved');
  }

  /// Closes the room (if it is not already), sends its sockets away with `code` and tells the
  /// registry.
  private leave(code: ErrorCode, message?: string): void {
    this.close();
    const retryAfterMs = code === 'moved' ? movedRetryMs : 0;
    this.transport.evict(this.docId, code, message ?? errorBody(code).message, retryAfterMs);
    this.events.closed(this);
  }

  private flushNextOrSettle(): void {
    if (this.queue.waiting > 0 && this.status === 'open') {
      if (!this.flushScheduled) this.scheduleFlush();
    } else {
      this.queue.settle();
    }
  }
}
