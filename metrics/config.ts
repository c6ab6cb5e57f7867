/// Settings of the metrics recorder. Units are in the names; `resolveMetricsConfig` validates
/// and freezes them once, so the recorder never re-checks them on the hot path.
export interface MetricsConfig {
  /// False turns `record` into an immediate return and `start` into a no-op (`METRICS=off`).
  enabled: boolean;
  /// Length of a window; windows start at wall-clock multiples of it.
  windowMs: number;
  /// Closed windows kept for `windows(last)`: 360 windows of 10 s is one hour.
  windowsKept: number;
  /// How many documents each window lists, busiest first.
  topDocuments: number;
  /// Latencies above this are recorded as this (the histograms must have a finite range).
  highestLatencyMs: number;
  /// Per-document latency histograms are created for at most this many active documents at once;
  /// busier servers list the rest with `p99Ms: null` rather than grow memory without bound.
  documentHistogramsMax: number;
  /// Upper bounds, in seconds and ascending, of the Prometheus latency histogram's buckets.
  latencyBucketsSeconds: readonly number[];
  /// Sampling resolution of `perf_hooks.monitorEventLoopDelay`.
  eventLoopResolutionMs: number;
}

/// The defaults: 10 s windows, one hour kept, top 10 documents, buckets fitted to 50 µs–100 ms.
export const metricsDefaults: Readonly<MetricsConfig> = Object.freeze({
  enabled: true,
  windowMs: 10_000,
  windowsKept: 360,
  topDocuments: 10,
  highestLatencyMs: 60_000,
  documentHistogramsMax: 1000,
  latencyBucketsSeconds: Object.freeze([
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
  ]),
  eventLoopResolutionMs: 20,
});

/// Merges `overrides` into `metricsDefaults` and returns the frozen result. Throws a RangeError
/// naming the first setting that is out of range (non-positive or non-integer counts and
/// durations, buckets that are empty, non-positive or not strictly ascending).
export function resolveMetricsConfig(
  overrides: Partial<MetricsConfig> = {},
): Readonly<MetricsConfig> {
  const config: MetricsConfig = { ...metricsDefaults, ...overrides };
  if (typeof config.enabled !== 'boolean') throw new RangeError('metrics: enabled must be boolean');
  positiveInteger('windowMs', config.windowMs);
  positiveInteger('windowsKept', config.windowsKept);
  positiveInteger('highestLatencyMs', config.highestLatencyMs);
  positiveInteger('eventLoopResolutionMs', config.eventLoopResolutionMs);
  if (!Number.isInteger(config.topDocuments) || config.topDocuments < 0) {
    throw new RangeError('metrics: topDocuments must be an integer >= 0');
  }
  if (!Number.isInteger(config.documentHistogramsMax) || config.documentHistogramsMax < 0) {
    throw new RangeError('metrics: documentHistogramsMax must be an integer >= 0');
  }
  const buckets = config.latencyBucketsSeconds;
  if (buckets.length === 0) throw new RangeError('metrics: latencyBucketsSeconds is empty');
  for (let i = 0; i < buckets.length; i++) {
    if (!(buckets[i] > 0) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
      throw new RangeError('metrics: latencyBucketsSeconds must be positive and ascending');
    }
  }
  config.latencyBucketsSeconds = Object.freeze([...buckets]);
  return Object.freeze(config);
}

function positiveInteger(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0) {
    throw new RangeError(`metrics: ${name} must be a positive integer`);
  }
}
