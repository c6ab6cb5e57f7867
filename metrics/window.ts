import type { TopDocument } from './document_activity.js';

/// What one closed window reports: a plain JSON object, the same one `onWindow` listeners get
/// (the server logs it as one line) and `windows(last)` returns. Units are in the names:
/// `Ms` values are milliseconds with microsecond precision, `PerSec` values are rates over
/// `coveredMs`, and null means "no sample in this window".
export interface MetricsWindow {
  /// Wall-clock start, ms since the epoch, a multiple of the window length; never before the
  /// last window's end, even after the wall clock was stepped back (see `MetricsRecorder`).
  startMs: number;
  /// Wall-clock end (exclusive), `startMs` plus the window length.
  endMs: number;
  /// How much time the window held, measured on the monotonic clock (whole ms): the window
  /// length but for the window the recorder was created in (less), one open when the wall
  /// clock was stepped (more or less; see `MetricsRecorder`), and drift of a few ms as the
  /// windows keep to the wall clock's boundaries. Rates divide by this.
  coveredMs: number;
  /// Connected editors (sockets) when the window closed.
  editors: number;
  /// Documents loaded on the server when the window closed.
  documents: number;
  /// `steps` messages received, whatever their outcome.
  batchesReceived: number;
  /// `steps` messages accepted.
  batchesAccepted: number;
  /// Steps in all received messages.
  stepsReceived: number;
  /// Steps in accepted messages.
  stepsAccepted: number;
  batchesReceivedPerSec: number;
  /// Accepted batches per second: the server's RPS.
  batchesAcceptedPerSec: number;
  /// Accepted steps per second.
  stepsAcceptedPerSec: number;
  /// Rejected batches by error code; codes with no rejection are absent.
  rejections: Record<string, number>;
  /// Server-side latency of every `steps` message (received → outcome sent), all outcomes.
  latencyP50Ms: number | null;
  latencyP90Ms: number | null;
  latencyP99Ms: number | null;
  latencyMaxMs: number | null;
  /// 99th percentile of the validate + apply stage (received → applied).
  applyP99Ms: number | null;
  /// 99th percentile of the journal append stage (applied → persisted).
  persistP99Ms: number | null;
  /// 99th percentile of the broadcast stage (persisted → outcome sent).
  broadcastP99Ms: number | null;
  /// How long accepted batches waited on purpose for their flush (applied → the flush taking
  /// them; part of the persist stage above), so that they go with others: the flush policy's
  /// doing, not work.
  holdP50Ms: number | null;
  holdP90Ms: number | null;
  holdP99Ms: number | null;
  /// Server-side latency less the hold, every outcome: the time spent on a message (validate,
  /// apply, journal append, broadcast and answer), comparable with a server that never holds.
  processingP50Ms: number | null;
  processingP90Ms: number | null;
  processingP99Ms: number | null;
  /// 99th percentile of event-loop delay, null when the recorder was not started.
  eventLoopDelayP99Ms: number | null;
  /// Share of the window the event loop was busy, 0–1 with three decimals.
  eventLoopUtilization: number | null;
  heapUsedBytes: number;
  rssBytes: number;
  /// The busiest documents by accepted batches per second, busiest first.
  topDocuments: TopDocument[];
}
