import type { Logger } from 'pino';
import { StoreUnavailableError, type Lease, type LeaseStore } from '../stores/store.js';
import { CodedError } from './coded_error.js';
import type { Room } from './room.js';
import { leaseRetryMs, leaseUnconfirmed, movedRetryMs } from './room_options.js';

/// Document ownership among processes sharing one store (see `LeaseStore` and
/// docs/leases.md).
export interface LeaseOptions {
  store: LeaseStore;
  /// This process: `<node id>/<instance>`, unique per process, so that a new process of the
  /// same node (a deploy) is another holder and takes documents over cleanly.
  holder: string;
  ttlMs: number;
  /// The longest a renewal is waited for (ms; the store's own timeout): past it, the renewal
  /// counts as failed. At most 0.9 of the lease time either way.
  timeoutMs?: number;
}

/// What the lease keeper needs of the registry whose rooms' leases it keeps.
export interface LeasedRooms {
  /// The rooms registered now.
  held(): Iterable<Room>;
  /// Whether `room` is the one registered for its document.
  serves(room: Room): boolean;
  /// Rooms being saved to be unloaded or handed over: their leases are not renewed (the
  /// unload or the hand-over frees them). The keeper adds a room it hands over.
  readonly evicting: Set<Room>;
  /// True once the registry shuts down: nothing is renewed or taken any more.
  readonly closing: boolean;
}

/// Keeps the leases of a registry's rooms, with a store shared by several processes: takes
/// them (`acquire`), renews every room's three times per lease time, each on its own so that
/// one slow renewal delays no other, confirms a lease that may have lapsed before its copy is
/// read (`confirm`), hands a document over when another process asks for it, and frees them.
/// Also renews this node's liveness key. `healthy` is false while a served room's renewal or
/// the liveness key fails. The rules and their reasons are in docs/leases.md.
export class LeaseKeeper {
  private renewTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  /// Lease renewals in flight, one at most per room: what reads waiting for one share.
  private readonly renewals = new Map<Room, Promise<Renewal>>();
  /// Rooms a renewal tick found with their renewal still in flight: renewed again as soon as
  /// it ends, rather than a whole period later.
  private readonly overdue = new Set<Room>();
  /// Rooms whose last renewal failed: `healthy` is false while one is still served.
  private readonly failedRenewals = new Set<Room>();
  /// Rooms retried early since their last good renewal (`retrySoon`): once per run of failures.
  /// Weak: a room that leaves memory while failing needs no clean-up.
  private readonly retried = new WeakSet<Room>();
  private heartbeating = false;
  private heartbeatHealthy = true;
  /// Documents this process handed to another lately, and until when (ms, `performance.now()`)
  /// it will not take them back: editors a gateway still sends here for a moment (nginx counts
  /// a recovered node healthy only once a request to it completes, and a websocket never does)
  /// would otherwise have it take the document straight back, and become its home.
  private readonly handedOver = new Map<string, number>();

  constructor(
    private readonly options: LeaseOptions,
    private readonly rooms: LeasedRooms,
    private readonly log: Logger,
  ) {
    // Three renewals per lease time: one lost answer does not lose the lease.
    this.renewTimer = setInterval(() => this.renewLeases(), options.ttlMs / 3);
    this.renewTimer.unref();
    // The node's liveness on a timer of its own: a slow renewal round (many documents, a
    // slow reply) must not let it lapse, which would tell the others this node restarted.
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), options.ttlMs / 3);
    this.heartbeatTimer.unref();
    void this.heartbeat();
  }

  /// False while lease renewals or this node's heartbeats fail (the store cannot be reached):
  /// `/readyz` reports it.
  get healthy(): boolean {
    for (const room of this.failedRenewals) {
      if (this.rooms.serves(room) && room.state === 'open') return false;
      this.failedRenewals.delete(room);
    }
    return this.heartbeatHealthy;
  }

  /// Holds `lease` in `room`, taken by a call sent at `askedAt` (ms, `performance.now()`).
  hold(room: Room, lease: Lease, askedAt: number): void {
    room.holdLease(lease, askedAt, this.options.ttlMs);
  }

  /// Frees a lease taken for a document that is not served after all (absent, damaged,
  /// refused), so that another process may have it now rather than when it expires. Best
  /// effort: it expires by itself otherwise.
  letGo(docId: string, lease: Lease): void {
    this.options.store.release(docId, lease).catch(() => {});
  }

  /// Forgets `room`, closed: it is renewed no more.
  forget(room: Room): void {
    this.overdue.delete(room);
    this.failedRenewals.delete(room);
  }

  /// Stops the timers, for shutdown.
  stop(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.renewTimer = null;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    this.overdue.clear();
  }

  /// Takes `docId`'s lease, or (with `claim`) asks its holder to hand it over, and rejects
  /// with `moved` (retry once the holder let go: at most the lease's remaining time, and
  /// usually one renewal).
  async acquire(docId: string, claim: boolean): Promise<Lease> {
    const { store, holder, ttlMs } = this.options;
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
    if (this.rooms.closing) return;
    const now = performance.now();
    for (const [docId, until] of this.handedOver) if (until <= now) this.handedOver.delete(docId);
    for (const room of this.rooms.held()) {
      if (this.renewals.has(room)) this.overdue.add(room);
      else if (this.renewable(room)) void this.renew(room);
    }
  }

  /// Whether `room`'s lease is renewed: held, open, and not being handed over or unloaded
  /// (that frees the lease).
  renewable(room: Room): boolean {
    return (
      room.lease !== null &&
      room.state === 'open' &&
      !this.rooms.evicting.has(room) &&
      !this.rooms.closing
    );
  }

  /// Renews `room`'s lease, or joins the renewal in flight; resolves with how it went (never
  /// rejects). A lease found lost closes its room (`moved`); one another process asked for is
  /// handed over after a short hold; one that could not be renewed for a whole lease time is
  /// given up, since this process can no longer know it still holds it (its writes would be
  /// refused anyway).
  renew(room: Room): Promise<Renewal> {
    const inFlight = this.renewals.get(room);
    if (inFlight) return inFlight;
    const renewal = this.renewOnce(room).finally(() => {
      this.renewals.delete(room);
      if (this.overdue.delete(room) && this.renewable(room)) void this.renew(room);
    });
    this.renewals.set(room, renewal);
    return renewal;
  }

  private async renewOnce(room: Room): Promise<Renewal> {
    const { store, holder, ttlMs } = this.options;
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
      if (this.rooms.serves(room) && room.state === 'open') this.failedRenewals.add(room);
      if (performance.now() - room.leaseTimes.renewedAt > ttlMs) {
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
    room.leaseRenewed(sent, ttlMs);
    if (outcome === 'wanted' && performance.now() - room.leaseTimes.takenAt >= ttlMs) {
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
  /// flight (`renew` joins it).
  private retrySoon(room: Room): void {
    const retry = setTimeout(
      () => {
        if (this.renewable(room)) void this.renew(room);
      },
      Math.ceil(this.options.ttlMs / 15),
    );
    retry.unref();
  }

  /// The longest a renewal is waited for: the store's timeout, and never past the time its
  /// answer could still confirm the lease (0.9 of a lease time after it was sent).
  private renewalTimeoutMs(): number {
    const { ttlMs } = this.options;
    return Math.min(this.options.timeoutMs ?? Infinity, ttlMs - Math.ceil(ttlMs / 10));
  }

  /// Resolves once `room`'s lease is confirmed: a renewal (the one in flight, shared with any
  /// other reader waiting, or one sent now) answered held, sent recently enough that the lease
  /// is fresh again. Rejects with `moved` when it is answered lost, or the room was given up
  /// or closed meanwhile (its copy is not read from), and with a retryable `unavailable`
  /// when it failed or timed out: the room stays open (a store stalled for a moment is not a
  /// lost lease), until a whole lease time without renewal gives it up (`renewOnce`).
  async confirm(room: Room): Promise<void> {
    // Twice at most: a renewal in flight may have been sent too long ago (before a pause) for
    // its answer to confirm the lease now; one sent after it does.
    for (let tries = 0; tries < 2 && !room.leaseFresh(); tries++) {
      if (room.state !== 'open') throw lapsed();
      if (!this.renewals.has(room) && !this.renewable(room)) break;
      const renewal = await this.renew(room);
      if (renewal === 'lost' || room.state !== 'open') throw lapsed();
      if (renewal === 'failed') break;
    }
    if (room.state !== 'open') throw lapsed();
    if (room.leaseFresh()) return;
    throw new CodedError('unavailable', leaseUnconfirmed, { retryAfterMs: leaseRetryMs });
  }

  /// Renews this node's liveness key: alive for two renewal periods, so that it is gone a third
  /// of a lease time before this node's leases expire, and whoever takes them over knows their
  /// home is down. A failure shows in `/readyz` (`leasesHealthy`).
  private async heartbeat(): Promise<void> {
    if (this.heartbeating || this.rooms.closing) return;
    this.heartbeating = true;
    const { store, ttlMs } = this.options;
    try {
      await store.heartbeat(nodeOf(this.options), Math.round((2 * ttlMs) / 3));
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
    this.rooms.evicting.add(room);
    try {
      await room.whenIdle();
      await room.snapshot();
      // Closed by the snapshot's answer: the store went back to an older state, and the room
      // is storing its copy under a new epoch with this lease; it must not be freed under it.
      if (room.state !== 'open') return;
      room.moved('handed over to the process that asked for it');
      this.handedOver.set(room.docId, performance.now() + 2 * this.options.ttlMs);
      await this.release(room);
    } finally {
      this.rooms.evicting.delete(room);
    }
  }

  /// Frees `room`'s lease if it has one (best effort: it expires by itself otherwise).
  async release(room: Room): Promise<void> {
    const lease = room.releaseLease();
    if (!lease) return;
    try {
      await this.options.store.release(room.docId, lease);
    } catch (err) {
      this.log.warn({ doc: room.docId, err }, 'lease release failed; it will expire');
    }
  }

  /// Frees every lease held, for shutdown (after `flushAll` and `closeAll`). This node's
  /// liveness key goes first: a node taking a document over while the key still said this one
  /// was alive would become the document's home, and it would never come back here.
  async releaseAll(rooms: readonly Room[]): Promise<void> {
    await this.options.store.depart(nodeOf(this.options)).catch((err: unknown) => {
      this.log.warn({ err }, 'could not mark this node as gone; its leases expire as usual');
    });
    await Promise.all(rooms.map((room) => this.release(room)));
  }
}

/// How a lease renewal went: answered held (or wanted by another process), lost, or failed
/// (the store could not be reached, or did not answer in time).
export type Renewal = 'held' | 'lost' | 'failed';

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
export function lapsed(): CodedError {
  return new CodedError('moved', 'This node may no longer hold this document', {
    retryAfterMs: movedRetryMs,
  });
}

/// The node a lease holder (`<node id>/<instance>`) runs on: what liveness keys are named by.
function nodeOf(leases: LeaseOptions): string {
  return leases.holder.split('/')[0]!;
}
