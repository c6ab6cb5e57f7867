import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LatencyHistogram } from '../../metrics/index.js';

test('percentiles of a uniform 1 µs–100 ms distribution are within 0.1%', () => {
  const histogram = new LatencyHistogram(60_000, 3);
  // Every whole microsecond from 1 µs to 100 ms, in a scrambled order (the order must not matter).
  const n = 100_000;
  for (let i = 0; i < n; i++) histogram.recordMs((((i * 7919) % n) + 1) / 1000);
  assert.equal(histogram.count, n);
  for (const [percentile, expectedMs] of [
    [50, 50],
    [90, 90],
    [99, 99],
    [99.9, 99.9],
  ]) {
    const actual = histogram.percentileMs(percentile);
    assert.ok(actual !== null);
    assert.ok(
      Math.abs(actual - expectedMs) / expectedMs <= 0.001,
      `p${percentile} = ${actual} ms, expected ${expectedMs} ms ± 0.1%`,
    );
  }
  const max = histogram.maxMs();
  assert.ok(max !== null && Math.abs(max - 100) / 100 <= 0.001, `max ${max}`);
});

test('small latencies keep microsecond precision exactly', () => {
  const histogram = new LatencyHistogram(60_000, 3);
  // 98 fast messages and two slow ones: p50 is the fast value, p99 the slow one.
  for (let i = 0; i < 98; i++) histogram.recordMs(0.137);
  histogram.recordMs(1.234);
  histogram.recordMs(1.234);
  assert.equal(histogram.percentileMs(50), 0.137);
  assert.equal(histogram.percentileMs(99), 1.234);
  assert.equal(histogram.maxMs(), 1.234);
});

test('values outside the range are clamped, not lost, and reset forgets everything', () => {
  const histogram = new LatencyHistogram(1000, 3);
  histogram.recordMs(0);
  histogram.recordMs(-5);
  histogram.recordMs(1e9);
  assert.equal(histogram.count, 3);
  assert.equal(histogram.percentileMs(1), 0.001);
  assert.ok(Math.abs((histogram.maxMs() ?? 0) - 1000) / 1000 <= 0.001);
  histogram.reset();
  assert.equal(histogram.count, 0);
  assert.equal(histogram.percentileMs(50), null);
  assert.equal(histogram.maxMs(), null);
});
