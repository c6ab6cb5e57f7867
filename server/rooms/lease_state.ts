import type { Lease } from '../stores/store.js';

/// A room's lease as this process knows it, as one immutable value: the room holds the
/// current one and replaces it when the lease is taken, renewed or released, so that the
/// fields never disagree. All times are ms on the `performance.now()` clock. See
/// docs/leases.md for why a lease is trusted only until `freshUntil`.
export class LeaseState {
  /// No lease: a store not shared with other processes, or a lease released.
  static readonly none = new LeaseState(null, 0, 0, 0);

  private constructor(
    /// The lease every append and snapshot carries; the store refuses them once another
    /// process took it.
    readonly lease: Lease | null,
    /// When the lease was taken: a hand-over request is honoured only a lease time after it,
    /// so that two nodes that both receive editors cannot bounce a document.
    readonly takenAt: number,
    /// When the last renewal answered held was sent: the lease runs a lease time from when
    /// the store ran it, which is later, never earlier.
    readonly renewedAt: number,
    /// Until when the lease is surely still this process's: a tenth of a lease time short of
    /// a lease time after `renewedAt`, which covers an answer's way out of this process.
    readonly freshUntil: number,
  ) {}

  /// `lease`, taken now by a call sent at `askedAt`.
  static taken(lease: Lease, askedAt: number, ttlMs: number): LeaseState {
    return new LeaseState(lease, performance.now(), 0, 0).renewed(askedAt, ttlMs);
  }

  /// This lease, renewed (or taken) by a call sent at `sent` and answered held.
  renewed(sent: number, ttlMs: number): LeaseState {
    return new LeaseState(this.lease, this.takenAt, sent, sent + ttlMs - Math.ceil(ttlMs / 10));
  }

  /// The state once the lease is let go: no lease, so nothing to confirm.
  released(): LeaseState {
    return new LeaseState(null, this.takenAt, this.renewedAt, this.freshUntil);
  }

  /// True without a lease, or while it is surely still held at `now`.
  fresh(now: number): boolean {
    return this.lease === null || now < this.freshUntil;
  }
}
