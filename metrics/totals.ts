/// Counters since the recorder was created, never reset: Prometheus reads them as counters and
/// the recorder derives each window's counts as the difference from the previous close, so the
/// hot path increments one counter per event instead of one per consumer.
export class Totals {
  batchesReceived = 0;
  batchesAccepted = 0;
  stepsReceived = 0;
  stepsAccepted = 0;
  /// Rejected batches by error code.
  readonly rejections = new Map<string, number>();
  /// Upper bounds of the Prometheus latency buckets, in milliseconds (what callers measure in).
  readonly bucketBoundsMs: Float64Array;
  /// Latencies per bucket, not cumulative: index i counts values in (bound[i-1], bound[i]] and
  /// the extra last index counts values above every bound (Prometheus' `+Inf`).
  readonly bucketCounts: Float64Array;
  /// Sum of all recorded latencies in milliseconds, for the histogram's `_sum`.
  latencySumMs = 0;

  /// `bucketBoundsSeconds` must be ascending (the config guarantees it).
  constructor(bucketBoundsSeconds: readonly number[]) {
    this.bucketBoundsMs = Float64Array.from(bucketBoundsSeconds, (s) => s * 1000);
    this.bucketCounts = new Float64Array(bucketBoundsSeconds.length + 1);
  }

  /// Counts one latency in its bucket. A linear scan of ~11 bounds beats a binary search here:
  /// most latencies fall in the first few buckets and the loop has no unpredictable branches
  /// beyond its exit.
  recordLatencyMs(ms: number): void {
    const bounds = this.bucketBoundsMs;
    let i = 0;
    while (i < bounds.length && ms > bounds[i]) i++;
    this.bucketCounts[i]++;
    this.latencySumMs += ms;
  }

  /// Adds one rejection of `code`.
  reject(code: string): void {
    this.rejections.set(code, (this.rejections.get(code) ?? 0) + 1);
  }
}
