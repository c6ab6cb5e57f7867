import { randomUUID } from 'node:crypto';
import type { Schema } from 'prosemirror-model';
import type { Logger } from 'pino';
import { Authority, type AuthorityLimits } from '../core/authority.js';
import {
  StoreUnavailableError,
  type Lease,
  type Store,
  type StoredDocument,
} from '../stores/store.js';
import { lapsed, LeaseKeeper, type LeaseOptions } from './lease_keeper.js';
import { CodedError } from './coded_error.js';
import { take, type Creation, type CreatePermit } from './create_permit.js';
import { TooManyDocumentsError } from './load_errors.js';
import { Quarantines } from './quarantine.js';
import { emptyDoc, restoreDocument, type Restored } from './restore.js';
import { Room, type RoomEvents } from './room.js';
import type { RoomHooks } from './room_hooks.js';
import type { BatchObserver, RoomOptions, RoomTransport } from './room_options.js';

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

/// The rooms this process holds, by document id. Loads a document on first use (concurrent
/// callers share one load), and unloads it once no socket has been joined for `idleUnloadMs`
/// and its snapshot is written, or, least recently used first, when `maxLoadedDocuments` are
/// held and another is asked for. A failed snapshot keeps the room loaded and is retried. A
/// document whose stored data cannot be loaded is quarantined (`Quarantines`); with a store
/// shared by several processes, `LeaseKeeper` keeps each room's lease.
export class Rooms {
  private readonly rooms = new Map<string, Room>();
  /// Loads in flight, by document id, and whether each may claim the document (an editor's).
  private readonly loading = new Map<string, { load: Promise<Room | null>; claims: boolean }>();
  /// By room, not by document id: a timer armed for a room that is then dropped must not be
  /// taken for one of the next room of its document.
  private readonly unloadTimers = new Map<Room, NodeJS.Timeout>();
  private readonly quarantines: Quarantines;
  /// Rooms being saved to be unloaded for a new one, or handed over.
  private readonly evicting = new Set<Room>();
  /// Rooms loaded (their `loaded` hook, if any, passed) whose unload the host has not been told
  /// of yet: told once, whichever way the room goes (see `unloaded`).
  private readonly unannounced = new WeakSet<Room>();
  private failures = 0;
  private readonly store: Store;
  private readonly schema: Schema;
  private readonly transport: RoomTransport;
  private readonly observer: BatchObserver | null;
  private readonly hooks: RoomHooks;
  private readonly log: Logger;
  private readonly options: RoomsOptions;
  private readonly keeper: LeaseKeeper | null;
  private readonly roomEvents: RoomEvents;
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
    leases?: Omit<LeaseOptions, 'timeoutMs'> | null;
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
    // interval: it flushes every turn.
    this.options =
      deps.options.maxRebaseSteps === 0 ? { ...deps.options, flushIntervalMs: 0 } : deps.options;
    this.quarantines = new Quarantines(deps.log);
    this.keeper = deps.leases ? this.keep(deps.leases) : null;
    this.roomEvents = {
      // The room went by itself: handed over or its lease lost (`moved`), failed (`internal`),
      // another writer or a store gone back found (`stale`).
      closed: (closed) => {
        if (closed.failed) this.failures++;
        this.keeper?.forget(closed);
        if (this.rooms.get(closed.docId) === closed) this.rooms.delete(closed.docId);
        this.cancelUnload(closed);
        this.unloaded(closed);
      },
      leaseStale: (stale) => {
        if (this.keeper?.renewable(stale)) void this.keeper.renew(stale);
      },
    };
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
    return this.quarantines.count;
  }

  /// Documents refused as corrupt since start, for the operator's metrics.
  get corruptLoads(): number {
    return this.quarantines.corruptLoads;
  }

  /// Rooms closed because serving them threw, since start.
  get roomFailures(): number {
    return this.failures;
  }

  /// False while lease renewals or this node's heartbeats fail (the store cannot be reached):
  /// `/readyz` reports it. Always true without leases.
  get leasesHealthy(): boolean {
    return this.keeper ? this.keeper.healthy : true;
  }

  /// Frees every lease held, for shutdown, after `flushAll` and `closeAll`.
  async releaseAll(rooms: readonly Room[]): Promise<void> {
    await this.keeper?.releaseAll(rooms);
  }

  /// The room of `docId`, loading it from the store if needed; concurrent callers share one
  /// load. With `create` (an editor; a permit counts creations) a document the store does not
  /// know starts empty (a fresh epoch, version 0); without it (a read), resolves null. Either
  /// way, a document that is not made changes nothing: no lease, nothing unloaded for it.
  /// When `maxLoadedDocuments` rooms are held, the least recently used one without sockets is
  /// unloaded first (after its snapshot). A loaded room whose lease may have lapsed is
  /// resolved only once a renewal confirms it (`confirm`). Rejects with:
  /// - `CreationRateError` when the permit refuses a creation;
  /// - `TooManyDocumentsError` when every held room has sockets;
  /// - `StoreUnavailableError` when the store cannot load (retryable);
  /// - `CorruptDocumentError` when the stored data cannot be read back (quarantined);
  /// - `CodedError` `moved` when another process holds the document (a read does not ask it
  ///   to hand it over) or the lease was found lost, `unavailable` (retryable) when the lease
  ///   could not be confirmed or the room is closed and settling with its store.
  get(docId: string, create: boolean | CreatePermit): Promise<Room | null> {
    const room = this.rooms.get(docId);
    if (room) {
      // Closed and still registered: settling with its store (see `Room.closedRefusal`).
      // Checked before the lease, which a closed room no longer renews.
      if (room.state !== 'open') return Promise.reject(room.closedRefusal());
      // A copy whose lease may have lapsed (a pause, a renewal answered late) is not read from:
      // another process may have moved it on. Asked again once confirmed: the room may have
      // gone meanwhile.
      if (!room.leaseFresh()) return this.confirm(room).then(() => this.get(docId, create));
      // Re-inserted: the map's order is least recently used first.
      this.rooms.delete(docId);
      this.rooms.set(docId, room);
      return Promise.resolve(room);
    }
    const quarantined = this.quarantines.refusal(docId);
    if (quarantined) return Promise.reject(quarantined);
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
    if (this.keeper) return this.keeper.confirm(room);
    // Without leases a copy is always fresh; a closed one is still not read from.
    return room.state === 'open' ? Promise.resolve() : Promise.reject(lapsed());
  }

  /// Counts a socket joined to `room`; cancels a pending unload.
  attach(room: Room): void {
    room.socketJoined();
    this.cancelUnload(room);
  }

  /// Counts a socket gone. The last one out triggers a snapshot and schedules the unload.
  detach(room: Room): void {
    if (room.socketLeft() > 0 || room.state !== 'open') return;
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
    this.keeper?.stop();
    for (const timer of this.unloadTimers.values()) clearTimeout(timer);
    this.unloadTimers.clear();
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
      if (this.keeper && this.store.exists) {
        const exists = this.store.exists.bind(this.store);
        found = await this.quarantines.read(docId, () => exists(docId));
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
      lease = this.keeper ? await this.keeper.acquire(docId, create !== false) : null;
      room = await this.loadHeld(docId, create, lease, asked, lease ? undefined : known, creation);
      return room;
    } finally {
      // Not serving it after all (absent, damaged, refused): let another process have it now
      // rather than when the lease expires.
      if (lease && room === null) {
        this.keeper?.letGo(docId, lease);
      }
      // A creation counted for a document that existed after all, or went elsewhere, is the
      // client's again: two nodes racing to create one document, or a join answered `moved`
      // and retried, must not use up an honest client's creations.
      if (creation.counted && !creation.made && typeof create === 'object') create.giveBack();
    }
  }

  /// Reads `docId` from the store: null when the store has never seen it. Rejects as
  /// `Quarantines.read` does.
  private read(docId: string): Promise<StoredDocument | null> {
    return this.quarantines.read(docId, () => this.store.load(docId));
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
      let restored: Restored;
      try {
        restored = restoreDocument(docId, stored, this.schema, this.options);
      } catch (err) {
        throw this.quarantines.add(docId, err);
      }
      room = this.makeRoom(docId, stored.epoch, restored);
    } else if (create) {
      // Counted already when the look found nothing; not when the look found the document and
      // it was gone once the lease was held (deleted meanwhile).
      if (typeof create === 'object' && !creation.counted) take(create, creation);
      creation.made = true;
      const authority = new Authority(emptyDoc(this.schema), 0, this.options);
      room = this.makeRoom(docId, randomUUID(), { authority, snapshotVersion: 0 });
    } else {
      return null;
    }
    if (lease) this.keeper!.hold(room, lease, leaseAskedAt);
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
      await this.keeper?.release(room);
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
    if (!room.leaseFresh()) await this.confirm(room);
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

  /// The lease keeper of this registry's rooms.
  private keep(leases: Omit<LeaseOptions, 'timeoutMs'>): LeaseKeeper {
    const { storeTimeoutMs: timeoutMs } = this.options;
    const registry = this;
    return new LeaseKeeper(
      timeoutMs === undefined ? leases : { ...leases, timeoutMs },
      {
        held: () => this.rooms.values(),
        serves: (room) => this.rooms.get(room.docId) === room,
        evicting: this.evicting,
        get closing() {
          return registry.closing;
        },
      },
      this.log,
    );
  }

  private makeRoom(
    docId: string,
    epoch: string,
    restored: Pick<Restored, 'authority' | 'snapshotVersion'> & Partial<Restored>,
  ): Room {
    const { authority, snapshotVersion, clients } = restored;
    return new Room(docId, epoch, authority, snapshotVersion, {
      ...(clients ? { clients } : {}),
      store: this.store,
      transport: this.transport,
      observer: this.observer,
      log: this.log,
      options: this.options,
      hooks: this.hooks,
      events: this.roomEvents,
    });
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
    await this.keeper?.release(room);
    this.unloaded(room);
  }

  /// Tells the host `room` is gone from memory, once per load: a room can be closed, and go,
  /// more than once (an append refused after a hand-over closed it, `closeAll` of a room still
  /// asking its store), and one whose `loaded` hook refused it was never loaded for the host.
  private unloaded(room: Room): void {
    if (this.unannounced.delete(room)) this.hooks.unloaded?.(room);
  }
}
