import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { MetricsRecorder } from './recorder.js';
import type { BucketCounts } from './totals.js';

/// Naming options of `createMetricsRegistry`.
export interface MetricsRegistryOptions {
  /// Prefix of Scriptorium's own metric names. Default 'scriptorium_'.
  prefix?: string;
  /// Whether to add prom-client's default process metrics (CPU, memory, GC, event loop).
  /// Default true.
  defaultMetrics?: boolean;
  /// Prefix of the default metrics. Default '' (their usual names, `process_cpu_seconds_total`…).
  defaultMetricsPrefix?: string;
}

/// Builds a prom-client Registry that exposes `recorder`'s counters:
/// - `<prefix>steps_latency_seconds` histogram of server-side `steps` latency (all outcomes),
///   bucketed by `config.latencyBucketsSeconds`;
/// - `<prefix>batch_hold_seconds` histogram of how long accepted batches waited for their
///   flush, and `<prefix>steps_processing_seconds` of the latency less that hold, same buckets;
/// - `<prefix>steps_batches_total{outcome}` counter, outcome 'accepted' or the error code;
/// - `<prefix>steps_accepted_total` counter of steps in accepted batches;
/// - `<prefix>editors_connected` and `<prefix>documents_active` gauges;
/// - prom-client's default metrics unless disabled.
/// Nothing is observed through prom-client per message: every value is read from the
/// recorder's plain counters when the registry is scraped. Does not throw: every metric goes
/// into the fresh registry, so building several registries for one recorder is fine.
export function createMetricsRegistry(
  recorder: MetricsRecorder,
  options: MetricsRegistryOptions = {},
): Registry {
  const prefix = options.prefix ?? 'scriptorium_';
  const registry = new Registry();
  const totals = recorder.totals;

  const bounds = recorder.config.latencyBucketsSeconds;
  new RecordedLatencyHistogram(
    `${prefix}steps_latency_seconds`,
    'Server-side processing time of steps messages, from receipt to outcome sent, in seconds',
    registry,
    totals.latency,
    bounds,
  );
  new RecordedLatencyHistogram(
    `${prefix}batch_hold_seconds`,
    'Time an accepted batch waited on purpose for its flush, from applied to the flush taking it, in seconds',
    registry,
    totals.hold,
    bounds,
  );
  new RecordedLatencyHistogram(
    `${prefix}steps_processing_seconds`,
    'Server-side time spent on steps messages: the latency less the flush hold, in seconds',
    registry,
    totals.processing,
    bounds,
  );

  new Counter({
    name: `${prefix}steps_batches_total`,
    help: 'Steps messages processed, by outcome: accepted or the error code sent back',
    labelNames: ['outcome'] as const,
    registers: [registry],
    // The recorder's totals are the source of truth; the counter is rebuilt from them on each
    // scrape, so the hot path never pays for prom-client's label hashing.
    collect() {
      this.reset();
      this.inc({ outcome: 'accepted' }, totals.batchesAccepted);
      for (const [code, count] of totals.rejections) this.inc({ outcome: code }, count);
    },
  });

  new Counter({
    name: `${prefix}steps_accepted_total`,
    help: 'Steps in accepted steps messages',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(totals.stepsAccepted);
    },
  });

  new Gauge({
    name: `${prefix}editors_connected`,
    help: 'Connected editor sockets',
    registers: [registry],
    collect() {
      this.set(recorder.editors());
    },
  });

  new Gauge({
    name: `${prefix}documents_active`,
    help: 'Documents loaded on the server',
    registers: [registry],
    collect() {
      this.set(recorder.documents());
    },
  });

  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry, prefix: options.defaultMetricsPrefix ?? '' });
  }
  return registry;
}

/// One sample of a histogram as prom-client's registry formats it.
interface ExposedSample {
  metricName: string;
  labels: { le?: number | string };
  sharedLabels: Record<string, never>;
  value: number;
}

/// A prom-client Histogram whose values come from the recorder's bucket counters instead of
/// `observe`: one `observe` costs as much as all of `record` (more with an outcome label),
/// while the bucket loop in `Totals` costs a small fraction of that (bench/metrics-record.ts
/// measures both; figures in bench-results/NOTES.md).
///
/// prom-client's registry formats a metric from `getForPromString()` when it exists, and its
/// `get()` (the JSON view) also builds on `getForPromString()`, so overriding that one method
/// serves both. It is not in prom-client's typings, hence no `override` keyword; the
/// integration test proves the registry still calls it.
class RecordedLatencyHistogram extends Histogram {
  constructor(
    private readonly exposedName: string,
    private readonly exposedHelp: string,
    registry: Registry,
    private readonly source: BucketCounts,
    private readonly boundsSeconds: readonly number[],
  ) {
    super({
      name: exposedName,
      help: exposedHelp,
      buckets: [...boundsSeconds],
      registers: [registry],
    });
  }

  /// The exposition of the recorded buckets: cumulative `_bucket` samples, `+Inf`, `_sum` in
  /// seconds and `_count`.
  async getForPromString(): Promise<{
    name: string;
    help: string;
    type: 'histogram';
    aggregator: 'sum';
    values: ExposedSample[];
  }> {
    const counts = this.source.counts;
    const values: ExposedSample[] = [];
    let cumulative = 0;
    for (let i = 0; i < this.boundsSeconds.length; i++) {
      cumulative += counts[i];
      values.push(this.sample('_bucket', { le: this.boundsSeconds[i] }, cumulative));
    }
    cumulative += counts[this.boundsSeconds.length];
    values.push(this.sample('_bucket', { le: '+Inf' }, cumulative));
    values.push(this.sample('_sum', {}, this.source.sumMs / 1000));
    values.push(this.sample('_count', {}, cumulative));
    return {
      name: this.exposedName,
      help: this.exposedHelp,
      type: 'histogram',
      aggregator: 'sum',
      values,
    };
  }

  private sample(suffix: string, labels: ExposedSample['labels'], value: number): ExposedSample {
    return { metricName: this.exposedName + suffix, labels, sharedLabels: {}, value };
  }
}
