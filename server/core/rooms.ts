import { randomUUID } from 'node:crypto';
import { Node, type Schema } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import type { Logger } from 'pino';
import { measureJson } from '../../schema/json_limits.js';
import { nodeStats } from '../../schema/doc_size.js';
import { type ErrorCode } from '../../schema/errors.js';
import { type StepJSON } from '../../schema/events.js';
import { Authority, type AuthorityLimits } from './authority.js';
import {
  leaseRetryMs,
  leaseUnconfirmed,
  movedRetryMs,
  Room,
  type BatchObserver,
  type RoomHooks,
  type RoomOptions,
  type RoomTransport,
} from './room.js';
import { stepProblem } from './step_check.js';
import {
  StoreUnavailableError,
  type Lease,
  type LeaseStore,
  type Store,
  type StoredDocument,
} from '../stores/store.js';

/// Settings of the registry and the rooms it makes.
export interface RoomsOptions extends RoomOptions, AuthorityLimits {
  idleUnloadMs: number;
  /// Rooms held at most; the least recently used one without sockets is unloaded for a new one.
  maxLoadedDocuments: number;
  /// Nesting allowed in stored JSON, checked before it is parsed into a document.
  maxJsonDepth: number;
  /// The longest a lease renewal is waited for (ms; the store's own timeout, STORE_TIMEOUT_MS):
  /// past it, the renewal counts as failed. At most 0.9 of the lease time either way.
  storeTimeoutMs?: number;
}

/// An error that carries the code its refusal is answered with: what a host's hook throws to
/// refuse something (`forbidden`, say) becomes one.
export class CodedError extends Error {
  readonly code: ErrorCode;
  /// For retryable codes, when the server knows: how long to wait before trying again.
  readonly retryAfterMs: number | undefined;
  constructor(
    code: ErrorCode,
    message?: string,
    options?: { cause?: unknown; retryAfterMs?: number },
  ) {
    super(message ?? code, options);
    this.name = 'CodedError';
    this.code = code;
    this.retryAfterMs = options?.retryAfterMs;
  }
}

/// Document ownership among processes sharing one store (see `LeaseStore`).
export interface LeaseOptions {
  store: LeaseStore;
  /// This process: `<node id>/<instance>`, unique per process, so that a new process of the
  /// same node (a deploy) is another holder and takes documents over cleanly.
  holder: string;
  ttlMs: number;
}

/// Thrown when a stored document cannot be turned back into a document: a snapshot written by
/// a newer schema, a journal that does not apply, data that does not parse. The document is
/// quarantined (refused with `corrupt`), never rewritten.
export class CorruptDocumentError extends Error {
  readonly docId: string;
  constructor(docId: string, reason: string, options?: { cause?: unknown }) {
    super(`Document ${docId} cannot be loaded: ${reason}`, options);
    this.name = 'CorruptDocumentError';
    this.docId = docId;
  }
}

/// Rejects `Rooms.get` when a new document may not be created yet (`rate-limited`).
export class CreationRateError extends Error {
  constructor(readonly retryAfterMs: number) {
    super(`Too many new documents from this address: wait ${retryAfterMs} ms`);
    this.name = 'CreationRateError';
  }
}

/// Rejects `Rooms.get` when `maxLoadedDocuments` rooms are held and every one has editors.
export class TooManyDocumentsError extends Error {
  constructor(max: number) {
    super(`The server holds ${max} documents, each with editors: try again later`);
    this.name = 'TooManyDocumentsError';
  }
}

/// Whether a document the store does not know may be created (the host's creation rate limit).
export interface CreatePermit {
  /// 0 when it may (one creation is counted), otherwise milliseconds until it may (nothing is
  /// counted). Asked only when the store does not know the document.
  take(): number;
  /// Gives back a creation `take` counted for a document that was not created after all: it
  /// existed by the time the lease was held, another process serves it, the load failed.
  giveBack(): void;
}

/// How long a document that failed to load as corrupt is refused without reading the store
/// again. Clients are told `corrupt` (not retryable), so this only bounds how often a
/// misbehaving client can make the server re-read damaged data, and lets a repair by an
/// operator take effect without a restart.
export const quarantineMs = 60_000;

/// A quarantined document: why, and until when it is refused without a look at the store.
export interface Quarantine {
  reason: string;
  since: number;
  until: number;
}

/// The rooms this process holds, by document id. Loads a document on first use (concurrent
/// callers share one load), and unloads it once no socket has been joined for `idleUnloadMs`
/// and its snapshot is written. A failed snapshot keeps the room loaded and is retried.
export class Rooms {
  private readonly rooms = new Map<string, Room>();
  /// Loads in flight, by document id, and whether each may claim the document (an editor's).
  private readonly loading = new Map<string, { load: Promise<Room | null>; claims: boolean }>();
  /// By room, not by document id: a timer armed for a room that is then dropped must not be
  /// taken for one of the next room of its document.
  private readonly unloadTimers = new Map<Room, NodeJS.Timeout>();
  private readonly quarantined = new Map<string, Quarantine>();
  /// Rooms being saved to be unloaded for a new one.
  private readonly evicting = new Set<Room>();
  /// Rooms loaded (their `loaded` hook, if any, passed) whose unload the host has not been told
  /// of yet: told once, whichever way the room goes (see `unloaded`).
  private readonly unannounced = new WeakSet<Room>();
  /// Documents refused as corrupt since start, for the operator's metrics.
  corruptLoads = 0;
  /// Rooms closed because serving them threw, since start.
  roomFailures = 0;
  private readonly store: Store;
  private readonly schema: Schema;
  private readonly transport: RoomTransport;
  private readonly observer: BatchObserver | null;
  private readonly hooks: RoomHooks;
  private readonly log: Logger;
  private readonly options: RoomsOptions;
  private readonly leases: LeaseOptions | null;
  private renewTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  /// Lease renewals in flight, one at most per room: what reads waiting for one share.
  private readonly renewals = new Map<Room, Promise<Renewal>>();
  /// Rooms a renewal tick found with their renewal still in flight: renewed again as soon as
  /// it ends, rather than a whole period later.
  private readonly overdue = new Set<Room>();
  /// Rooms whose last renewal failed: `leasesHealthy` is false while one is registered.
  private readonly failedRenewals = new Set<Room>();
  /// Rooms retried early since their last good renewal (`retrySoon`): once per run of failures.
  /// Weak: a room that leaves memory while failing needs no clean-up.
  private readonly retried = new WeakSet<Room>();
  private heartbeating = false;
  /// Documents this process handed to another lately, and until when (ms, `performance.now()`)
  /// it will not take them back: editors a gateway still sends here for a moment (nginx counts
  /// a recovered node healthy only once a request to it completes, and a websocket never does)
  /// would otherwise have it take the document straight back, and become its home.
  private readonly handedOver = new Map<string, number>();
  /// False while lease renewals or this node's heartbeats fail (the store cannot be reached):
  /// `/readyz` reports it.
  get leasesHealthy(): boolean {
    for (const room of this.failedRenewals) {
      if (this.rooms.get(room.docId) === room && room.state === 'open') return false;
      this.failedRenewals.delete(room);
    }
    return this.heartbeatHealthy;
  }
  private heartbeatHealthy = true;
  private closing = false;

  constructor(deps: {
    store: Store;
    /// Every document is made and checked with it; snapshots carry `options.schemaVersion`.
    schema: Schema;
    transport: RoomTransport;
    observer: BatchObserver | null;
    log: Logger;
    options: RoomsOptions;
    hooks?: RoomHooks;
    leases?: LeaseOptions | null;
  }) {
    this.store = deps.store;
    this.schema = deps.schema;
    this.transport = deps.transport;
    this.observer = deps.observer;
    this.hooks = deps.hooks ?? {};
    this.log = deps.log;
    // Without server-side rebasing a document accepts one batch per version its editors were
    // shown: the others made at that version are refused `stale` until the next broadcast. A
    // room holding its broadcasts for the flush interval would then accept one batch per
    // interval (66 a second at 30 editors, against 150 offered): it flushes every turn.
    this.options =
      deps.options.maxRebaseSteps === 0 ? { ...deps.options, flushIntervalMs: 0 } : deps.options;
    this.leases = deps.leases ?? null;
    if (this.leases) {
      // Three renewals per lease time: one lost answer does not lose the lease.
      this.renewTimer = setInterval(() => this.renewLeases(), this.leases.ttlMs / 3);
      this.renewTimer.unref();
      // The node's liveness on a timer of its own: a slow renewal round (many documents, a
      // slow reply) must not let it lapse, which would tell the others this node restarted.
      this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.leases.ttlMs / 3);
      this.heartbeatTimer.unref();
      void this.heartbeat();
    }
  }

  /// Rooms held in memory now.
  get size(): number {
    return this.rooms.size;
  }

  /// The loaded room of `docId`, if any, without loading.
  peek(docId: string): Room | undefined {
    return this.rooms.get(docId);
  }

  /// Documents quarantined now.
  get quarantinedCount(): number {
    return this.quarantined.size;
  }

  /// The room of `docId`, loading it from the store if needed. With `create` a document the
  /// store does not know starts empty (a fresh epoch, version 0), if the permit (when `create`
  /// is one) allows it, else rejects with `CreationRateError` having taken no lease and
  /// unloaded nothing for it; without it (a read), resolves
  /// null, having taken no lease and unloaded nothing for it; a read of a document another
  /// process holds rejects with `moved` without asking that process to hand it over.
  /// When `maxLoadedDocuments` rooms are held, the least recently used one without sockets is
  /// unloaded first (after its snapshot); if every one has sockets, rejects with
  /// `TooManyDocumentsError`.
  /// Rejects with the store's `StoreUnavailableError` when it cannot load (retryable), and with
  /// `CorruptDocumentError` when the stored data cannot be read back (the document is then
  /// quarantined for `quarantineMs`). A loaded room whose lease may have lapsed (see
  /// `Room.leaseFresh`: its copy may be older than what another process wrote since) is
  /// resolved only once a renewal (the one in flight, or one sent now) is answered held;
  /// rejects with `moved` when it is answered lost, and with a retryable `unavailable` when it
  /// fails (the room stays open: see `confirmLease`). A loaded room that is closed but still
  /// settling with its store (after a conflict or a lost lease) rejects with a retryable
  /// `unavailable` (`Room.settleRetryMs`), whatever its lease: its copy is not read from.
  get(docId: string, create: boolean | CreatePermit): Promise<Room | null> {
    const room = this.rooms.get(docId);
    if (room) {
      // Closed and still registered: asking its store where it stands (a conflict, a lost
      // lease) or storing its copy under a new epoch. The copy may be behind the store, or
      // about to be replaced: no read from it, and no load of the store's before it has gone.
      // Checked before the lease, which a closed room no longer renews: the hint follows the
      // room's own tries of its store (`settleRetryMs`), where the lease check answered `moved`
      // every 100 ms for as long as the store could not be read. `moved` when the room lost
      // its lease (another process may serve the document: a reconnect through the gateway
      // may reach it, as the room's editors were sent), `unavailable` otherwise.
      if (room.state !== 'open') {
        return Promise.reject(
          room.leaseLost
            ? new CodedError('moved', 'This node may no longer hold this document', {
                retryAfterMs: room.settleRetryMs,
              })
            : new CodedError(
                'unavailable',
                'This document is being reloaded: try again in a moment',
                { retryAfterMs: room.settleRetryMs },
              ),
        );
      }
      // A copy whose lease may have lapsed (a pause, a renewal answered late) is not read from:
      // another process may have moved it on. Asked again once confirmed: the room may have
      // gone meanwhile.
      if (!room.leaseFresh()) return this.confirmLease(room).then(() => this.get(docId, create));
      // Re-inserted: the map's order is least recently used first.
      this.rooms.delete(docId);
      this.rooms.set(docId, room);
      return Promise.resolve(room);
    }
    const quarantine = this.quarantined.get(docId);
    if (quarantine) {
      if (Date.now() < quarantine.until) {
        return Promise.reject(new CorruptDocumentError(docId, quarantine.reason));
      }
      this.quarantined.delete(docId);
    }
    const inFlight = this.loading.get(docId);
    if (inFlight) {
      return inFlight.load.then(
        (loaded) => (loaded || !create ? loaded : this.get(docId, create)),
        (err: unknown) => {
          // A read's load answers `moved` without asking the holder to hand the document over
          // (a reader must not move it from its editors): an editor that shared it asks now,
          // or it would be answered `moved` with nobody asking, and come back to the same.
          if (create && !inFlight.claims && err instanceof CodedError && err.code === 'moved') {
            return this.get(docId, create);
          }
          throw err;
        },
      );
    }
    const load = this.load(docId, create).finally(() => this.loading.delete(docId));
    this.loading.set(docId, { load, claims: create !== false });
    return load;
  }

  /// Resolves once `room`'s lease is confirmed, as `get` waits before resolving a loaded room:
  /// at once while it is fresh (or there is none), else once a renewal (the one in flight,
  /// shared with every read waiting, or one sent now) is answered held. Rejects as `get` does:
  /// with `moved` when it is answered lost or the room closed meanwhile, with a retryable
  /// `unavailable` when it failed. For reads of a room already joined (a `pull`).
  confirm(room: Room): Promise<void> {
    return this.confirmLease(room);
  }

  /// Counts a socket joined to `room`; cancels a pending unload.
  attach(room: Room): void {
    room.sockets++;
    this.cancelUnload(room);
  }

  /// Counts a socket gone. The last one out triggers a snapshot and schedules the unload.
  detach(room: Room): void {
    room.sockets--;
    if (room.sockets > 0 || room.state !== 'open') return;
    void room.whenIdle().then(() => room.snapshot());
    this.scheduleUnload(room);
  }

  /// Waits for in-flight batches of every room and writes their snapshots. Used by graceful
  /// shutdown; resolves with the number of rooms whose snapshot failed.
  async flushAll(): Promise<number> {
    this.closing = true;
    let failed = 0;
    await Promise.all(
      [...this.rooms.values()].map(async (room) => {
        await room.whenIdle();
        if (!(await room.snapshot())) failed++;
      }),
    );
    return failed;
  }

  /// Closes every room and forgets it; pending timers are cleared. Returns the rooms closed
  /// (their leases are still held: `releaseAll` frees them).
  closeAll(): Room[] {
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.renewTimer = null;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    for (const timer of this.unloadTimers.values()) clearTimeout(timer);
    this.unloadTimers.clear();
    this.overdue.clear();
    const closed = [...this.rooms.values()];
    this.rooms.clear();
    for (const room of closed) {
      room.close();
      this.unloaded(room);
    }
    return closed;
  }

  private async load(docId: string, create: boolean | CreatePermit): Promise<Room | null> {
    if (this.closing) throw new StoreUnavailableError('shutting down');
    // A read looks first: a document the store does not know is answered null before anything
    // is done for it. A lease would take a fencing number and record this node as the
    // document's home, and space would be made by unloading another document: a reader
    // probing made-up ids must change nothing. An editor whose creations are counted looks
    // first too, and a creation refused is refused here, for the same reasons: a client
    // joining made-up ids faster than it may create documents must change nothing either.
    // Undefined until looked: null is a look that found nothing.
    let known: StoredDocument | null | undefined;
    const creation: Creation = { counted: false, made: false };
    if (create === false || typeof create === 'object') {
      // With leases the document is read again once the lease is held, so the look only needs
      // to know whether it exists: a whole read of a long journal, twice per load, otherwise.
      let found: boolean;
      if (this.leases && this.store.exists) {
        found = await this.lookFor(docId, this.store.exists.bind(this.store));
      } else {
        known = await this.read(docId);
        found = known !== null;
      }
      if (!found && create === false) return null;
      if (!found && typeof create === 'object') take(create, creation);
    }
    let room: Room | null = null;
    let lease: Lease | null = null;
    try {
      await this.makeSpace(docId);
      // The lease first: what is loaded after it is the newest state, since no other process
      // can append once it is ours. So with leases a look is read again once the lease is
      // held (another process may have appended since, or created the document); without
      // them no other process writes, and what the look found is the newest state.
      // Only an editor (`create`) claims a document held elsewhere: a read must not move it.
      const asked = performance.now();
      lease = this.leases ? await this.acquire(docId, create !== false) : null;
      room = await this.loadHeld(docId, create, lease, asked, lease ? undefined : known, creation);
      return room;
    } finally {
      // Not serving it after all (absent, damaged, refused): let another process have it now
      // rather than when the lease expires.
      if (lease && room === null && this.leases) {
        this.leases.store.release(docId, lease).catch(() => {});
      }
      // A creation counted for a document that existed after all, or went elsewhere, is the
      // client's again: two nodes racing to create one document, or a join answered `moved`
      // and retried, must not use up an honest client's creations.
      if (creation.counted && !creation.made && typeof create === 'object') create.giveBack();
    }
  }

  /// Whether the store holds `docId`, through the store's `exists`. Rejects with
  /// `StoreUnavailableError` when the store cannot be reached; anything else it threw is a
  /// store that cannot be trusted about this document, quarantined as `read` does.
  private async lookFor(
    docId: string,
    exists: (docId: string) => Promise<boolean>,
  ): Promise<boolean> {
    try {
      return await exists(docId);
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw err;
      throw this.quarantine(docId, err);
    }
  }

  /// Reads `docId` from the store: null when the store has never seen it. Rejects with
  /// `StoreUnavailableError` when the store cannot be reached, and quarantines the document
  /// (rejecting with `CorruptDocumentError`) for anything else the store threw while reading.
  private async read(docId: string): Promise<StoredDocument | null> {
    try {
      return await this.store.load(docId);
    } catch (err) {
      // The store could not be reached: retryable. Anything else it threw while reading is
      // data it cannot parse (a torn or foreign entry): the document is damaged.
      if (err instanceof StoreUnavailableError) throw err;
      throw this.quarantine(docId, err);
    }
  }

  /// The rest of `load`, once the lease (if any) is held. `known`: the document as read
  /// before (null: found absent), when that read is still the newest state (no leases);
  /// undefined to read it now.
  private async loadHeld(
    docId: string,
    create: boolean | CreatePermit,
    lease: Lease | null,
    leaseAskedAt: number,
    known: StoredDocument | null | undefined,
    creation: Creation,
  ): Promise<Room | null> {
    const stored = known !== undefined ? known : await this.read(docId);
    const existing = this.rooms.get(docId);
    if (existing) return existing;
    let room: Room;
    if (stored) {
      try {
        room = this.restore(docId, stored);
      } catch (err) {
        throw this.quarantine(docId, err);
      }
    } else if (create) {
      // Counted already when the look found nothing; not when the look found the document and
      // it was gone once the lease was held (deleted meanwhile).
      if (typeof create === 'object' && !creation.counted) take(create, creation);
      creation.made = true;
      const authority = new Authority(this.emptyDoc(), 0, this.options);
      room = this.makeRoom(docId, randomUUID(), authority, 0);
    } else {
      return null;
    }
    if (lease) {
      room.lease = lease;
      room.leasedAt = performance.now();
      this.renewed(room, leaseAskedAt);
    }
    if (this.hooks.loaded) {
      try {
        await this.hooks.loaded(room);
      } catch (err) {
        room.close();
        throw err;
      }
    }
    this.unannounced.add(room);
    // Another load cannot have finished meanwhile (loads of one document are one promise), but
    // the registry may have been closed while this one read the store: registered now, the
    // room would outlive `closeAll` with its lease held.
    if (this.closing) {
      room.close();
      await this.releaseLease(room);
      this.unloaded(room);
      throw new StoreUnavailableError('shutting down');
    }
    this.rooms.set(docId, room);
    this.log.debug({ doc: docId, version: room.publishedVersion }, 'document loaded');
    // A room loaded for a read or a join that never came must not stay forever.
    this.scheduleUnload(room);
    // A load slower than the lease (a huge journal, a paused process) is not renewed while it
    // runs: what it read may be older than what a process that took the lease since wrote,
    // unless a renewal sent now finds the lease still ours (no other process wrote, then).
    if (!room.leaseFresh()) await this.confirmLease(room);
    return room;
  }

  /// Unloads least recently used rooms without sockets until there is room for one more.
  /// Rejects with `TooManyDocumentsError` when every held room has sockets (or none could be
  /// saved: a room whose snapshot fails stays, it holds steps not yet in a snapshot).
  private async makeSpace(docId: string): Promise<void> {
    const max = this.options.maxLoadedDocuments;
    const tried = new Set<Room>();
    // Loads in flight count too (they will each add a room), except this one.
    while (this.rooms.size + this.loading.size - (this.loading.has(docId) ? 1 : 0) >= max) {
      let victim: Room | null = null;
      for (const room of this.rooms.values()) {
        if (
          room.sockets === 0 &&
          room.state === 'open' &&
          !this.evicting.has(room) &&
          !tried.has(room)
        ) {
          victim = room;
          break;
        }
      }
      if (!victim) throw new TooManyDocumentsError(max);
      tried.add(victim);
      this.evicting.add(victim);
      try {
        await victim.whenIdle();
        const saved = await victim.snapshot();
        // A batch may have come meanwhile (the host's own change, a socket that joined, wrote
        // and left): it would be acknowledged after the room was dropped, and not be in the
        // snapshot an `unloaded` hook reads.
        if (
          !saved ||
          !victim.settled ||
          victim.sockets > 0 ||
          this.rooms.get(victim.docId) !== victim
        )
          continue;
        await this.drop(victim);
        this.log.debug({ doc: victim.docId }, 'document unloaded to make room for another');
      } finally {
        this.evicting.delete(victim);
      }
    }
  }

  /// Records `docId` as quarantined because of `err`; returns the error to reject with.
  private quarantine(docId: string, err: unknown): CorruptDocumentError {
    const error =
      err instanceof CorruptDocumentError
        ? err
        : new CorruptDocumentError(docId, (err as Error)?.message ?? String(err), { cause: err });
    const now = Date.now();
    this.quarantined.set(docId, { reason: error.message, since: now, until: now + quarantineMs });
    this.corruptLoads++;
    this.log.error(
      { doc: docId, err: error },
      'document quarantined: its stored data cannot be loaded; other documents are unaffected',
    );
    return error;
  }

  /// Takes `docId`'s lease, or (with `claim`) asks its holder to hand it over, and rejects
  /// with `moved` (retry once the holder let go: at most the lease's remaining time, and
  /// usually one renewal).
  private async acquire(docId: string, claim: boolean): Promise<Lease> {
    const { store, holder, ttlMs } = this.leases!;
    const until = this.handedOver.get(docId);
    if (until !== undefined) {
      const left = until - performance.now();
      if (left > 0) {
        throw new CodedError('moved', 'This document was handed to another node a moment ago', {
          retryAfterMs: Math.min(Math.ceil(left), Math.ceil(ttlMs / 3)) + 100,
        });
      }
      this.handedOver.delete(docId);
    }
    const outcome = await store.acquire(docId, holder, ttlMs);
    if (outcome.ok) return outcome.lease;
    if (claim) await store.requestHandover(docId, holder, 2 * ttlMs);
    throw new CodedError('moved', `This document is served by ${outcome.holder} now`, {
      retryAfterMs: Math.min(outcome.remainingMs, Math.ceil(ttlMs / 3)) + 100,
    });
  }

  /// A renewal period: renews the lease of every loaded room whose renewal is not in flight,
  /// one store call each. A room whose renewal is still in flight (a slow store) is renewed
  /// again as soon as it is answered: waiting for the next period could leave its lease
  /// unconfirmed for a moment (past 0.9 of a lease time since the last renewal sent), and its
  /// readers waiting. Each room on its own: one slow or failing renewal delays no other.
  private renewLeases(): void {
    if (this.closing || !this.leases) return;
    const now = performance.now();
    for (const [docId, until] of this.handedOver) if (until <= now) this.handedOver.delete(docId);
    for (const room of this.rooms.values()) {
      if (this.renewals.has(room)) this.overdue.add(room);
      else if (this.renewable(room)) void this.renewLease(room);
    }
  }

  /// Whether `room`'s lease is renewed: held, open, and not being handed over or unloaded
  /// (that frees the lease).
  private renewable(room: Room): boolean {
    return (
      room.lease !== null && room.state === 'open' && !this.evicting.has(room) && !this.closing
    );
  }

  /// Renews `room`'s lease, or joins the renewal in flight; resolves with how it went (never
  /// rejects). A lease found lost closes its room (`moved`); one another process asked for is
  /// handed over after a short hold; one that could not be renewed for a whole lease time is
  /// given up, since this process can no longer know it still holds it (its writes would be
  /// refused anyway).
  private renewLease(room: Room): Promise<Renewal> {
    const inFlight = this.renewals.get(room);
    if (inFlight) return inFlight;
    const renewal = this.renewOnce(room).finally(() => {
      this.renewals.delete(room);
      if (this.overdue.delete(room) && this.renewable(room)) void this.renewLease(room);
    });
    this.renewals.set(room, renewal);
    return renewal;
  }

  private async renewOnce(room: Room): Promise<Renewal> {
    const { store, holder, ttlMs } = this.leases!;
    let outcome;
    // The lease runs from when the store ran the renewal, after it was sent: an answer that
    // comes late (a pause) must not make the lease look newer than it is.
    const sent = performance.now();
    try {
      outcome = await bounded(
        store.renew(room.docId, holder, room.lease!, ttlMs),
        this.renewalTimeoutMs(),
      );
    } catch (err) {
      // Only a room still served here: one closed or unloaded while its renewal was in flight
      // is not this node's health, and must not be kept (with its document) in the set.
      if (this.rooms.get(room.docId) === room && room.state === 'open')
        this.failedRenewals.add(room);
      if (performance.now() - room.leaseRenewedAt > ttlMs) {
        // Not `moved` at once: a store that comes back from an outage in an older state has
        // lost steps that only this copy holds (`leaseGone` asks it first).
        room.leaseGone('the lease could not be renewed in time');
      } else {
        this.log.warn({ doc: room.docId, err }, 'lease renewal failed; retrying');
        // Once per run of failures: a store that is down for a while is asked at the periods'
        // pace, not five times as often for every room.
        if (!this.retried.has(room)) {
          this.retried.add(room);
          this.retrySoon(room);
        }
      }
      return 'failed';
    }
    this.failedRenewals.delete(room);
    this.retried.delete(room);
    if (outcome === 'lost') {
      room.leaseGone('the lease was lost');
      return 'lost';
    }
    this.renewed(room, sent);
    if (outcome === 'wanted' && performance.now() - room.leasedAt >= ttlMs) {
      // Not awaited: a hand-over waits for the room's append in flight, and the room's next
      // renewal must not wait for it (`evicting` keeps the room out meanwhile).
      this.handOver(room).catch((err: unknown) =>
        this.log.warn({ doc: room.docId, err }, 'hand-over failed; the lease will expire'),
      );
    }
    return 'held';
  }

  /// Renews `room`'s lease again a fifteenth of a lease time after a failed renewal, rather
  /// than at the next period: a failure answered at once (an error reply after a failover, a
  /// reset connection) followed by another would otherwise send the next renewal a whole lease
  /// time after the last good one, racing the lease's expiry in the store. Not while one is in
  /// flight (`renewLease` joins it).
  private retrySoon(room: Room): void {
    const retry = setTimeout(
      () => {
        if (this.renewable(room)) void this.renewLease(room);
      },
      Math.ceil(this.leases!.ttlMs / 15),
    );
    retry.unref();
  }

  /// The longest a renewal is waited for: the store's timeout, and never past the time its
  /// answer could still confirm the lease (0.9 of a lease time after it was sent).
  private renewalTimeoutMs(): number {
    const { ttlMs } = this.leases!;
    return Math.min(this.options.storeTimeoutMs ?? Infinity, ttlMs - Math.ceil(ttlMs / 10));
  }

  /// Resolves once `room`'s lease is confirmed: a renewal (the one in flight, shared with any
  /// other reader waiting, or one sent now) answered held, sent recently enough that the lease
  /// is fresh again. Rejects with `moved` when it is answered lost, or the room was given up
  /// or closed meanwhile (its copy is not read from), and with a retryable `unavailable`
  /// when it failed or timed out: the room stays open (a store stalled for a moment is not a
  /// lost lease), until a whole lease time without renewal gives it up (`renewOnce`).
  private async confirmLease(room: Room): Promise<void> {
    // Twice at most: a renewal in flight may have been sent too long ago (before a pause) for
    // its answer to confirm the lease now; one sent after it does.
    for (let tries = 0; tries < 2 && !room.leaseFresh(); tries++) {
      if (room.state !== 'open') throw lapsed();
      if (!this.renewals.has(room) && !this.renewable(room)) break;
      const renewal = await this.renewLease(room);
      if (renewal === 'lost' || room.state !== 'open') throw lapsed();
      if (renewal === 'failed') break;
    }
    if (room.state !== 'open') throw lapsed();
    if (room.leaseFresh()) return;
    throw new CodedError('unavailable', leaseUnconfirmed, { retryAfterMs: leaseRetryMs });
  }

  /// Notes that `room`'s lease was taken or renewed by a call sent at `sent` (ms,
  /// `performance.now()`): it is surely held until a margin short of a lease time after that.
  /// The margin covers the time between that check and an answer leaving this process.
  private renewed(room: Room, sent: number): void {
    const { ttlMs } = this.leases!;
    room.leaseRenewedAt = sent;
    room.leaseFreshUntil = sent + ttlMs - Math.ceil(ttlMs / 10);
  }

  /// Renews this node's liveness key: alive for two renewal periods, so that it is gone a third
  /// of a lease time before this node's leases expire, and whoever takes them over knows their
  /// home is down. A failure shows in `/readyz` (`leasesHealthy`).
  private async heartbeat(): Promise<void> {
    if (this.heartbeating || this.closing || !this.leases) return;
    this.heartbeating = true;
    const { store, ttlMs } = this.leases;
    try {
      await store.heartbeat(nodeOf(this.leases), Math.round((2 * ttlMs) / 3));
      this.heartbeatHealthy = true;
    } catch {
      this.heartbeatHealthy = false;
    } finally {
      this.heartbeating = false;
    }
  }

  /// Gives a document to the process that asked for it: what is pending is journaled, a
  /// snapshot written (so the next holder replays little), the editors sent away with `moved`
  /// (they reconnect through the gateway, to the node that routes there now), the lease freed.
  private async handOver(room: Room): Promise<void> {
    this.evicting.add(room);
    try {
      await room.whenIdle();
      await room.snapshot();
      // Closed by the snapshot's answer: the store went back to an older state, and the room
      // is storing its copy under a new epoch with this lease; it must not be freed under it.
      if (room.state !== 'open') return;
      room.moved('handed over to the process that asked for it');
      this.handedOver.set(room.docId, performance.now() + 2 * this.leases!.ttlMs);
      await this.releaseLease(room);
    } finally {
      this.evicting.delete(room);
    }
  }

  /// Frees `room`'s lease if it has one (best effort: it expires by itself otherwise).
  private async releaseLease(room: Room): Promise<void> {
    const lease = room.lease;
    if (!lease || !this.leases) return;
    room.lease = null;
    try {
      await this.leases.store.release(room.docId, lease);
    } catch (err) {
      this.log.warn({ doc: room.docId, err }, 'lease release failed; it will expire');
    }
  }

  /// Frees every lease held, for shutdown (after `flushAll` and `closeAll`). This node's
  /// liveness key goes first: a node taking a document over while the key still said this one
  /// was alive would become the document's home, and it would never come back here.
  async releaseAll(rooms: readonly Room[]): Promise<void> {
    if (this.leases) {
      await this.leases.store.depart(nodeOf(this.leases)).catch((err: unknown) => {
        this.log.warn({ err }, 'could not mark this node as gone; its leases expire as usual');
      });
    }
    await Promise.all(rooms.map((room) => this.releaseLease(room)));
  }

  /// A new document: the schema's smallest valid one (one empty paragraph in ours).
  private emptyDoc(): Node {
    const doc = this.schema.topNodeType.createAndFill();
    if (!doc) throw new TypeError('the schema cannot make an empty document');
    return doc;
  }

  private restore(docId: string, stored: StoredDocument): Room {
    const snapshot = stored.snapshot;
    let doc: Node;
    let version = 0;
    // prosemirror-model parses and checks documents recursively: stored JSON nested deeper
    // than any document the limits allow is refused before it can overflow the stack.
    const jsonLimits = {
      maxDepth: this.options.maxJsonDepth,
      maxBytes: Infinity,
      maxStringBytes: Infinity,
    };
    // A stored document over the size limits (kept by a server with higher limits, or written
    // by something else) is quarantined, with the limit to raise in the operator's log line.
    // Served, it could only shrink, and one over the socket buffer would end every join in a
    // slow-consumer disconnect: a reconnect loop instead of an answer.
    const { maxDocBytes, maxDocSize } = this.options;
    const checkSize = (what: string, checked: Node): void => {
      const bytes = nodeStats(checked).bytes;
      if (bytes > maxDocBytes || checked.nodeSize > maxDocSize) {
        throw new CorruptDocumentError(
          docId,
          `${what} is larger than this server allows (${bytes} bytes of JSON, ${checked.nodeSize} positions; MAX_DOC_BYTES ${maxDocBytes}, MAX_DOC_SIZE ${maxDocSize})`,
        );
      }
    };
    if (snapshot) {
      const measured = measureJson(snapshot.doc, jsonLimits);
      if (!measured.ok) throw new CorruptDocumentError(docId, `snapshot: ${measured.message}`);
      if (snapshot.schemaVersion > this.options.schemaVersion) {
        throw new CorruptDocumentError(
          docId,
          `snapshot written with schema version ${snapshot.schemaVersion}, this server has ${this.options.schemaVersion}`,
        );
      }
      try {
        doc = Node.fromJSON(this.schema, snapshot.doc);
        doc.check();
      } catch (err) {
        throw new CorruptDocumentError(docId, `snapshot: ${(err as Error).message}`);
      }
      checkSize('the snapshot', doc);
      version = snapshot.version;
    } else {
      doc = this.emptyDoc();
    }
    const authority = new Authority(doc, version, this.options);
    // Each client's last batch in the document: the snapshot's, then the journal's after it.
    const clients = new Map<string, number>(
      snapshot?.clients ? Object.entries(snapshot.clients) : [],
    );
    let previousEnd: number | null = null;
    for (const entry of stored.journal) {
      const end = entry.baseVersion + entry.steps.length;
      // Each entry starts where the one before ended: one that starts before would say twice
      // what a version holds, one that starts after leaves a gap.
      if (previousEnd !== null && entry.baseVersion !== previousEnd) {
        throw new CorruptDocumentError(
          docId,
          `journal entries do not follow each other: one ends at ${previousEnd}, the next starts at ${entry.baseVersion}`,
        );
      }
      previousEnd = end;
      if (end <= authority.version) continue;
      if (entry.baseVersion > authority.version) {
        throw new CorruptDocumentError(
          docId,
          `journal gap: entry at ${entry.baseVersion}, document at ${authority.version}`,
        );
      }
      const skip = authority.version - entry.baseVersion;
      const stepsJSON: StepJSON[] = entry.steps.slice(skip);
      const steps: Step[] = new Array(stepsJSON.length);
      let current = authority.doc;
      for (let i = 0; i < stepsJSON.length; i++) {
        const measured = measureJson(stepsJSON[i], jsonLimits);
        if (!measured.ok) {
          throw new CorruptDocumentError(
            docId,
            `journal step ${authority.version + i}: ${measured.message}`,
          );
        }
        let result;
        try {
          steps[i] = Step.fromJSON(this.schema, stepsJSON[i]);
          // Journals written before the step checks can hold steps they refuse: 40 replaces
          // with from > to, each doubling the document, hold the loop for seconds and take
          // gigabytes before anything else notices.
          const problem = stepProblem(steps[i]!.toJSON() as StepJSON);
          if (problem) throw new RangeError(problem);
          result = steps[i]!.apply(current);
        } catch (err) {
          throw new CorruptDocumentError(
            docId,
            `journal step ${authority.version + i}: ${(err as Error).message}`,
          );
        }
        if (!result.doc) {
          throw new CorruptDocumentError(
            docId,
            `journal step ${authority.version + i}: ${result.failed}`,
          );
        }
        current = result.doc;
      }
      for (let i = skip; i < entry.clientIDs.length; i++)
        clients.set(entry.clientIDs[i]!, entry.baseVersion + i + 1);
      authority.remember(steps, entry.clientIDs.slice(skip), current);
    }
    // A journal written before the depth limit existed can nest a document past it by wraps
    // that each look harmless; serving it would overflow the stack in the first snapshot.
    const height = nodeStats(authority.doc).height;
    if (height > this.options.maxDocDepth) {
      throw new CorruptDocumentError(
        docId,
        `the document is nested ${height} levels deep, more than ${this.options.maxDocDepth}`,
      );
    }
    checkSize('the document', authority.doc);
    if (authority.version !== stored.version) {
      throw new CorruptDocumentError(
        docId,
        `journal ends at ${authority.version}, the store says ${stored.version}`,
      );
    }
    return this.makeRoom(docId, stored.epoch, authority, version, clients);
  }

  private makeRoom(
    docId: string,
    epoch: string,
    authority: Authority,
    snapshotVersion: number,
    clients?: ReadonlyMap<string, number>,
  ): Room {
    const room = new Room(docId, epoch, authority, snapshotVersion, {
      ...(clients ? { clients } : {}),
      store: this.store,
      transport: this.transport,
      observer: this.observer,
      log: this.log,
      options: this.options,
      hooks: this.hooks,
    });
    // The room went by itself: handed over or its lease lost (`moved`), failed (`internal`),
    // another writer or a store gone back found (`stale`).
    room.onLeaseStale = (stale) => {
      if (this.renewable(stale)) void this.renewLease(stale);
    };
    room.onClose = (closed) => {
      if (closed.failed) this.roomFailures++;
      this.overdue.delete(closed);
      this.failedRenewals.delete(closed);
      if (this.rooms.get(docId) === closed) this.rooms.delete(docId);
      this.cancelUnload(closed);
      this.unloaded(closed);
    };
    return room;
  }

  private scheduleUnload(room: Room): void {
    if (this.unloadTimers.has(room)) return;
    const timer = setTimeout(() => {
      this.unloadTimers.delete(room);
      this.unload(room).catch((err: unknown) => {
        // A timer's rejection would end the process: the room fails alone instead.
        room.fail(err);
      });
    }, this.options.idleUnloadMs);
    timer.unref();
    this.unloadTimers.set(room, timer);
  }

  private cancelUnload(room: Room): void {
    const timer = this.unloadTimers.get(room);
    if (!timer) return;
    clearTimeout(timer);
    this.unloadTimers.delete(room);
  }

  private async unload(room: Room): Promise<void> {
    if (room.sockets > 0 || room.state !== 'open' || this.rooms.get(room.docId) !== room) return;
    await room.whenIdle();
    const saved = await room.snapshot();
    // Someone may have joined while the snapshot was written.
    if (room.sockets > 0 || this.rooms.get(room.docId) !== room) return;
    // A failed snapshot, or a batch that came meanwhile (see `makeSpace`): later.
    if (!saved || !room.settled) {
      this.scheduleUnload(room);
      return;
    }
    await this.drop(room);
    this.log.debug({ doc: room.docId, version: room.publishedVersion }, 'document unloaded');
  }

  /// Drops a saved room without sockets, whether idle or unloaded to make space: out of the
  /// registry with its unload timer (one armed while its snapshot was written, say), closed,
  /// its lease freed (so another node may take the document at once, instead of being sent
  /// `moved` until the lease expires), and the host told.
  private async drop(room: Room): Promise<void> {
    this.rooms.delete(room.docId);
    this.cancelUnload(room);
    room.close();
    await this.releaseLease(room);
    this.unloaded(room);
  }

  /// Tells the host `room` is gone from memory, once per load: a room can be closed, and go,
  /// more than once (an append refused after a hand-over closed it, `closeAll` of a room still
  /// asking its store), and one whose `loaded` hook refused it was never loaded for the host.
  private unloaded(room: Room): void {
    if (this.unannounced.delete(room)) this.hooks.unloaded?.(room);
  }
}

/// One load's creation permit: whether a creation was counted, and whether a document was made
/// with it (one counted and not used is given back).
interface Creation {
  counted: boolean;
  made: boolean;
}

/// Takes a creation from `permit`, noting it in `creation`; throws `CreationRateError` when the
/// permit refuses it.
function take(permit: CreatePermit, creation: Creation): void {
  const wait = permit.take();
  if (wait > 0) throw new CreationRateError(wait);
  creation.counted = true;
}

/// How a lease renewal went: answered held (or wanted by another process), lost, or failed
/// (the store could not be reached, or did not answer in time).
type Renewal = 'held' | 'lost' | 'failed';

/// `promise`, or a `StoreUnavailableError` after `timeoutMs`, whichever comes first.
function bounded<T>(promise: Promise<T>, timeoutMs: number): Promise<T> {
  if (!Number.isFinite(timeoutMs)) return promise;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(new StoreUnavailableError(`no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    // A renewal in flight at shutdown must not hold the process up for its timeout.
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/// The refusal of a read from a copy whose lease may have lapsed (see `Room.leaseFresh`): the
/// document is likely served elsewhere, or here again, once the lease has settled.
function lapsed(): CodedError {
  return new CodedError('moved', 'This node may no longer hold this document', {
    retryAfterMs: movedRetryMs,
  });
}

/// The node a lease holder (`<node id>/<instance>`) runs on: what liveness keys are named by.
function nodeOf(leases: LeaseOptions): string {
  return leases.holder.split('/')[0]!;
}
