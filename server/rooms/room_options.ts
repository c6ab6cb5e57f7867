import type { ErrorCode } from '../../schema/errors.js';
import type { StepsBroadcast } from '../../schema/events.js';

/// What a room needs from the transport: one broadcast per flush to every socket of the
/// document, and a way to send everyone away when the room's copy can no longer be trusted
/// (`retryAfterMs`: when to come back, for `closing`).
export interface RoomTransport {
  broadcast(docId: string, message: StepsBroadcast): void;
  /// Optional: holds the writes to the document's sockets until `uncork`, so that what one
  /// flush sends to a socket (the broadcast, its sender's acknowledgement) goes in one write.
  cork?(docId: string): void;
  uncork?(): void;
  evict(docId: string, code: ErrorCode, message: string, retryAfterMs: number): void;
}

/// Receives the outcome and timings of every `steps` message: 'accepted' or an error code,
/// and milliseconds from `performance.now()` when it was received, validated and applied,
/// persisted (NaN when it never got that far) and answered, and, for an accepted batch, when
/// its flush took it (the time between applied and taken is the hold). `MetricsRecorder` is one.
export interface BatchObserver {
  record(
    docId: string,
    outcome: string,
    steps: number,
    received: number,
    applied: number,
    persisted: number,
    sent: number,
    taken?: number,
  ): void;
}

/// Room settings taken from the server configuration.
export interface RoomOptions {
  /// The most time a batch waits for its flush (ms), the ceiling of the flush policy
  /// (`flushWaitMs`): a batch is flushed at the end of its event-loop turn while the process
  /// has headroom, and batches are gathered into one flush (one journal append, one broadcast
  /// frame per socket instead of one per batch) only under pressure. 0 flushes every turn.
  flushIntervalMs: number;
  /// Under pressure (the event loop busy), the gathering time per joined socket (µs), up to
  /// `flushIntervalMs`: a flush costs a frame per socket, so a busy room's frames per second
  /// stay bounded whatever its size.
  flushUsPerSocket: number;
  /// The event loop busy (%) past which the process is under pressure; 0: always.
  flushBusyPercent: number;
  snapshotEverySteps: number;
  snapshotEveryMs: number;
  /// Written into every snapshot: the version of the schema its document was made with.
  schemaVersion: number;
  /// The wall clock (ms since the Unix epoch) stamped on journal entries for the history;
  /// `Date.now` when absent. Injectable so that tests can move time forward.
  clock?: () => number;
  /// Told after each snapshot the store took (not one it found outdated): the archive grew,
  /// and the history's retention may run.
  afterSnapshot?: (docId: string) => void;
}

/// When editors this process stopped serving a document for (`moved`: handed over, its lease
/// lost or lapsed) should try again: by then the lease is free or another process holds it,
/// and serves it, save for the release's (or the other's acquire's) round trip to the store,
/// which this covers. Sooner, they could reach the next holder before the release and be
/// answered `moved` for a renewal period (see `LeaseKeeper.acquire`); with no hint at all,
/// clients fall back to their own backoff.
export const movedRetryMs = 100;

/// How long an editor refused because the lease is being confirmed waits before trying again
/// (ms): about one renewal's round trip.
export const leaseRetryMs = 250;

/// The message of that refusal (`unavailable`).
export const leaseUnconfirmed =
  'This node is confirming it still serves this document: try again in a moment';

/// How long a read refused because its document's room is closed but still settling with its
/// store (`Recovery`) waits before trying again (ms): about a store read's round trip, after
/// which the room is gone and the next read loads what the store holds.
export const settlingRetryMs = 250;
