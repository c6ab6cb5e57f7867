/// Counts of values per Prometheus bucket since creation, and their sum: what one exposed
/// histogram reads on each scrape.
export class BucketCounts {
  /// Values per bucket, not cumulative: index i counts values in (bound[i-1], bound[i]] and
  /// the extra last index counts values above every bound (Prometheus' `+Inf`).
  readonly counts: Float64Array;
  /// Sum of every recorded value in milliseconds, for the histogram's `_sum`.
  sumMs = 0;

  /// `boundsMs`, ascending, is shared with the other counters of the same buckets.
  constructor(private readonly boundsMs: Float64Array) {
    this.counts = new Float64Array(boundsMs.length + 1);
  }

  /// Counts one value in its bucket. A linear scan of ~11 bounds beats a binary search here:
  /// most values fall in the first few buckets and the loop has no unpredictable branches
  /// beyond its exit.
  recordMs(ms: number): void {
    const bounds = this.boundsMs;
    let i = 0;
    while (i < bounds.length && ms > bounds[i]) i++;
    this.counts[i]++;
    this.sumMs += ms;
  }
}

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
  /// Server-side latency of every message (received → outcome sent).
  readonly latency: BucketCounts;
  /// The part of it a batch was held on purpose, waiting for its flush (applied → taken).
  readonly hold: BucketCounts;
  /// The latency less the hold: the time spent on the message.
  readonly processing: BucketCounts;

  /// `bucketBoundsSeconds` must be ascending (the config guarantees it).
  constructor(bucketBoundsSeconds: readonly number[]) {
    this.bucketBoundsMs = Float64Array.from(bucketBoundsSeconds, (s) => s * 1000);
    this.latency = new BucketCounts(this.bucketBoundsMs);
    this.hold = new BucketCounts(this.bucketBoundsMs);
    this.processing = new BucketCounts(this.bucketBoundsMs);
  }

  /// The latency buckets' counts (`latency.counts`).
  get bucketCounts(): Float64Array {
    return this.latency.counts;
  }

  /// The latencies' sum in milliseconds (`latency.sumMs`).
  get latencySumMs(): number {
    return this.latency.sumMs;
  }

  /// Counts one latency in its bucket.
  recordLatencyMs(ms: number): void {
    this.latency.recordMs(ms);
  }

  /// Adds one rejection of `code`.
  reject(code: string): void {
    this.rejections.set(code, (this.rejections.get(code) ?? 0) + 1);
  }
}
