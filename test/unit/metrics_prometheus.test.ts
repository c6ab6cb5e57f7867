import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createMetricsRegistry, MetricsRecorder } from '../../metrics/index.js';
import { parsePrometheusText, sampleValue } from '../support/prometheus_text.js';

/// Records a message of total latency `ms` (all of it in the apply stage).
function recordLatency(recorder: MetricsRecorder, ms: number, outcome = 'accepted'): void {
  // Received at 0 so the difference is exactly `ms` (10.05 - 10 is not 0.05 in binary).
  recorder.record('doc', outcome, 2, 0, ms, ms, ms);
}

test('the registry exposes recorded latencies, outcomes, steps and gauges as valid text', async () => {
  const recorder = new MetricsRecorder({}, { now: () => 0, editors: () => 12, documents: () => 5 });
  // One latency per region of the default buckets (seconds): ≤50 µs, ≤250 µs, ≤1 ms, ≤5 ms,
  // ≤100 ms and above every bound.
  for (const ms of [0.03, 0.2, 0.7, 3, 80, 250]) recordLatency(recorder, ms);
  recordLatency(recorder, 0.05, 'stale'); // exactly on a bound: `le` is inclusive
  recordLatency(recorder, 0.4, 'too-large');
  const registry = createMetricsRegistry(recorder);
  assert.equal(registry.contentType, 'text/plain; version=0.0.4; charset=utf-8');
  const families = parsePrometheusText(await registry.metrics());

  const latency = families.get('scriptorium_steps_latency_seconds');
  assert.equal(latency?.type, 'histogram');
  const bucket = (le: string): number =>
    sampleValue(families, 'scriptorium_steps_latency_seconds_bucket', { le });
  assert.deepEqual(
    ['0.00005', '0.0001', '0.00025', '0.0005', '0.001', '0.005', '0.1', '+Inf'].map(bucket),
    [2, 2, 3, 4, 5, 6, 7, 8],
  );
  assert.equal(sampleValue(families, 'scriptorium_steps_latency_seconds_count'), 8);
  const sum = sampleValue(families, 'scriptorium_steps_latency_seconds_sum');
  assert.ok(Math.abs(sum - 0.33438) < 1e-9, `sum ${sum}`);

  assert.equal(families.get('scriptorium_steps_batches_total')?.type, 'counter');
  const batches = (outcome: string): number =>
    sampleValue(families, 'scriptorium_steps_batches_total', { outcome });
  assert.deepEqual([batches('accepted'), batches('stale'), batches('too-large')], [6, 1, 1]);
  assert.equal(sampleValue(families, 'scriptorium_steps_accepted_total'), 12);
  assert.equal(sampleValue(families, 'scriptorium_editors_connected'), 12);
  assert.equal(sampleValue(families, 'scriptorium_documents_active'), 5);
  // prom-client's default metrics are on by default.
  assert.equal(families.get('process_cpu_user_seconds_total')?.type, 'counter');
  assert.equal(families.get('nodejs_eventloop_lag_p99_seconds')?.type, 'gauge');
});

test('counters keep growing across scrapes and window closes', async () => {
  let now = 0;
  const recorder = new MetricsRecorder({}, { now: () => now });
  const registry = createMetricsRegistry(recorder, { defaultMetrics: false, prefix: 'x_' });
  recordLatency(recorder, 1);
  const first = parsePrometheusText(await registry.metrics());
  assert.equal(sampleValue(first, 'x_steps_batches_total', { outcome: 'accepted' }), 1);
  now = 10_000;
  recorder.tick(); // a window close must not reset what Prometheus sees
  recordLatency(recorder, 1);
  recordLatency(recorder, 1, 'stale');
  const second = parsePrometheusText(await registry.metrics());
  assert.equal(sampleValue(second, 'x_steps_batches_total', { outcome: 'accepted' }), 2);
  assert.equal(sampleValue(second, 'x_steps_batches_total', { outcome: 'stale' }), 1);
  assert.equal(sampleValue(second, 'x_steps_latency_seconds_count'), 3);
  assert.equal(second.has('process_cpu_user_seconds_total'), false);
});

test('the JSON view of the registry carries the recorded histogram too', async () => {
  const recorder = new MetricsRecorder({}, { now: () => 0 });
  recordLatency(recorder, 0.3);
  const registry = createMetricsRegistry(recorder, { defaultMetrics: false });
  const json = await registry.getMetricsAsJSON();
  const latency = json.find((m) => m.name === 'scriptorium_steps_latency_seconds');
  const count = latency?.values.find(
    (v) => (v as { metricName?: string }).metricName === 'scriptorium_steps_latency_seconds_count',
  );
  assert.equal(count?.value, 1);
});

test('the test parser rejects malformed exposition lines', () => {
  const valid = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 3\n';
  assert.equal(parsePrometheusText(valid).get('a_total')?.samples[0].value, 3);
  for (const bad of [
    '# TYPE a counter\na{x=1} 3\n', // unquoted label value
    '# TYPE a counter\na 3 4 5\n', // trailing garbage
    '# TYPE a counter\na three\n', // not a number
    'a 3\n', // no TYPE
    '# TYPE a counter\na 3', // no final newline
    '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\n', // decreasing
  ]) {
    assert.throws(() => parsePrometheusText(bad), Error, JSON.stringify(bad));
  }
});

test('the hold and processing histograms split the latency of held batches', async () => {
  const recorder = new MetricsRecorder({}, { now: () => 0 });
  const registry = createMetricsRegistry(recorder, { defaultMetrics: false });
  // Held 20 ms of 21: applied at 0.5, taken at 20.5, answered at 21.
  recorder.record('doc', 'accepted', 1, 0, 0.5, 20.7, 21, 20.5);
  recorder.record('doc', 'stale', 1, 0, 0.3, NaN, 0.3);
  const families = parsePrometheusText(await registry.metrics());
  assert.equal(families.get('scriptorium_batch_hold_seconds')?.type, 'histogram');
  assert.equal(families.get('scriptorium_steps_processing_seconds')?.type, 'histogram');
  const hold = (le: string): number =>
    sampleValue(families, 'scriptorium_batch_hold_seconds_bucket', { le });
  assert.deepEqual(['0.01', '0.025', '+Inf'].map(hold), [0, 1, 1]);
  const processing = (le: string): number =>
    sampleValue(families, 'scriptorium_steps_processing_seconds_bucket', { le });
  assert.deepEqual(['0.00025', '0.0005', '0.001', '+Inf'].map(processing), [0, 1, 2, 2]);
  const sum = sampleValue(families, 'scriptorium_batch_hold_seconds_sum');
  assert.ok(Math.abs(sum - 0.02) < 1e-9, `hold sum ${sum}`);
  assert.equal(sampleValue(families, 'scriptorium_steps_latency_seconds_count'), 2);
});
