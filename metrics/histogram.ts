import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/// A latency histogram over Node's HDR histogram (`perf_hooks.createHistogram`), taking and
/// returning milliseconds but storing whole microseconds.
///
/// Why microseconds: callers measure with `performance.now()` and report in milliseconds with
/// three decimals, so a microsecond is the finest unit anyone reads; it also keeps the HDR
/// bucket array (which `reset` rewrites in full) a third smaller than nanoseconds would.
/// Values below 1 µs are recorded as 1 µs (the HDR histogram's lowest value) and values above
/// `highestMs` as `highestMs`, so `max` stays meaningful instead of the sample vanishing.
export class LatencyHistogram {
  private readonly hdr: RecordableHistogram;
  private readonly highestUs: number;

  /// `significantFigures` is the HDR precision: 3 keeps every value within 0.1%, 2 within 1%
  /// at a tenth of the memory (used for the many per-document histograms). Throws a RangeError
  /// from `createHistogram` for figures outside 1–5.
  constructor(highestMs: number, significantFigures: number) {
    this.highestUs = Math.round(highestMs * 1000);
    this.hdr = createHistogram({ lowest: 1, highest: this.highestUs, figures: significantFigures });
  }

  /// Records one latency. `ms` must be a finite number: NaN would make `createHistogram`'s
  /// integer check throw, so callers test for it first.
  recordMs(ms: number): void {
    let us = Math.round(ms * 1000);
    if (us < 1) us = 1;
    else if (us > this.highestUs) us = this.highestUs;
    this.hdr.record(us);
  }

  /// The number of latencies recorded since the last reset.
  get count(): number {
    return this.hdr.count;
  }

  /// The latency at `percentile` (0–100] in milliseconds with microsecond precision, or null
  /// when nothing was recorded since the last reset.
  percentileMs(percentile: number): number | null {
    if (this.hdr.count === 0) return null;
    return this.hdr.percentile(percentile) / 1000;
  }

  /// The largest latency since the last reset in milliseconds, or null when there is none.
  maxMs(): number | null {
    if (this.hdr.count === 0) return null;
    return this.hdr.max / 1000;
  }

  /// Forgets every recorded value; the histogram's memory is kept for reuse.
  reset(): void {
    this.hdr.reset();
  }
}
