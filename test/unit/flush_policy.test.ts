import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  flushDutyMax,
  flushWaitMs,
  LoadGauge,
  smoothFlushCost,
  type FlushSignals,
} from '../../server/rooms/flush_policy.js';

const defaults = { flushIntervalMs: 40, flushUsPerSocket: 500, flushBusyPercent: 50 };

/// A room of `sockets` whose last flush started `sinceLastFlushMs` ago and cost `flushCostMs`.
function signals(overrides: Partial<FlushSignals>): FlushSignals {
  return { sinceLastFlushMs: 1, flushCostMs: 0.1, sockets: 10, utilisation: 0.1, ...overrides };
}

describe('flushWaitMs', () => {
  it('flushes at once while the process has headroom, even right after a flush', () => {
    // The fixed hold would have been 5 ms here (10 sockets × 500 µs).
    assert.equal(flushWaitMs(signals({ sinceLastFlushMs: 0.5 }), defaults), 0);
    assert.equal(flushWaitMs(signals({ sockets: 30, utilisation: 0.49 }), defaults), 0);
  });

  it('gathers at the per-socket rate under pressure, counting from the last flush', () => {
    const busy = signals({ sockets: 30, utilisation: 0.7, sinceLastFlushMs: 4 });
    assert.equal(flushWaitMs(busy, defaults), 30 * 0.5 - 4);
    assert.equal(flushWaitMs({ ...busy, sinceLastFlushMs: 20 }, defaults), 0, 'already waited');
  });

  it('never waits past the ceiling', () => {
    const huge = signals({ sockets: 1000, utilisation: 1, sinceLastFlushMs: 0 });
    assert.equal(flushWaitMs(huge, defaults), 40);
    const costly = signals({ flushCostMs: 100, sinceLastFlushMs: 0 });
    assert.equal(flushWaitMs(costly, defaults), 40);
  });

  it('gathers for a room whose flushes would take too much of the loop, however idle', () => {
    // 3 ms a flush: flushing every 12 ms at the most keeps it to a quarter of the loop.
    const big = signals({ sockets: 300, flushCostMs: 3, sinceLastFlushMs: 2, utilisation: 0 });
    assert.equal(flushWaitMs(big, defaults), 3 / flushDutyMax - 2);
  });

  it('holds every time at busy 0 (the fixed hold) and never at interval 0', () => {
    const idle = signals({ utilisation: 0, sinceLastFlushMs: 1 });
    assert.equal(flushWaitMs(idle, { ...defaults, flushBusyPercent: 0 }), 10 * 0.5 - 1);
    const busy = signals({ utilisation: 1, sockets: 100, flushCostMs: 5, sinceLastFlushMs: 0 });
    assert.equal(flushWaitMs(busy, { ...defaults, flushIntervalMs: 0 }), 0);
  });
});

describe('smoothFlushCost', () => {
  it('takes the first cost, then moves a quarter of the way to each new one', () => {
    assert.equal(smoothFlushCost(0, 2), 2);
    assert.equal(smoothFlushCost(2, 3), 2.25);
    assert.equal(smoothFlushCost(2, 1), 1.75);
    let cost = 1;
    for (let i = 0; i < 30; i++) cost = smoothFlushCost(cost, 4);
    assert.ok(Math.abs(cost - 4) < 0.01, `${cost} follows a lasting change`);
  });

  it('lets one preempted flush move the cost by a quarter at most', () => {
    // A 0.2 ms flush descheduled for 20 ms: at face value the room would gather for 20 ms.
    assert.equal(smoothFlushCost(0.2, 20), 0.25);
  });
});

describe('LoadGauge', () => {
  it('reads a busy loop as busy and an idle one as idle', async () => {
    const gauge = new LoadGauge(5, 50);
    const busyUntil = performance.now() + 120;
    while (performance.now() < busyUntil) {
      // Busy: sampled as a flush would, between bits of work.
      gauge.utilisation(performance.now());
    }
    const busy = gauge.utilisation(performance.now());
    assert.ok(busy > 0.8, `busy loop read as ${busy}`);
    // Idle for six spans: on a loaded machine a timer's callback may still start late, which
    // counts as busy, so only "well below pressure" is asserted.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const idle = gauge.utilisation(performance.now());
    assert.ok(idle < 0.4, `idle loop read as ${idle}`);
  });
});
