import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MetricsRecorder, type MetricsWindow } from '../../metrics/index.js';

/// A recorder on a fake clock: tests move `clock.ms` and call `tick()` instead of sleeping.
function fakeClockRecorder(
  startMs: number,
  config: ConstructorParameters<typeof MetricsRecorder>[0] = {},
): { recorder: MetricsRecorder; clock: { ms: number }; closed: MetricsWindow[] } {
  const clock = { ms: startMs };
  const recorder = new MetricsRecorder(config, { now: () => clock.ms });
  const closed: MetricsWindow[] = [];
  recorder.onWindow((window) => closed.push(window));
  return { recorder, clock, closed };
}

/// Records one message whose stages take `applyMs`, `persistMs`, `sendMs` from time `at`.
function message(
  recorder: MetricsRecorder,
  documentId: string,
  outcome: string,
  steps: number,
  at = 100,
  applyMs = 0.1,
  persistMs = 0.5,
  sendMs = 0.2,
): void {
  const applied = at + applyMs;
  const persisted = outcome === 'accepted' ? applied + persistMs : NaN;
  const sent = (outcome === 'accepted' ? persisted : applied) + sendMs;
  recorder.record(documentId, outcome, steps, at, applied, persisted, sent);
}

function assertWithin1Percent(actual: number | null, expected: number): void {
  assert.ok(
    actual !== null && Math.abs(actual - expected) <= expected / 100,
    `${actual} is not ${expected} ± 1%`,
  );
}

const base = 1_700_000_000_000; // a multiple of 10 s

test('a window closes exactly at the next 10 s boundary with the counts recorded in it', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base + 3_000);
  for (let i = 0; i < 3; i++) message(recorder, 'alpha', 'accepted', 2);
  message(recorder, 'beta', 'accepted', 5);
  message(recorder, 'beta', 'stale', 1);
  message(recorder, 'beta', 'stale', 4);
  message(recorder, 'gamma', 'invalid-step', 1);

  clock.ms = base + 9_999;
  assert.equal(recorder.tick(), 0, 'no window ends before the boundary');
  assert.deepEqual(recorder.windows(30), []);

  clock.ms = base + 10_000;
  assert.equal(recorder.tick(), 1);
  assert.equal(closed.length, 1);
  const window = closed[0];
  assert.equal(window.startMs, base);
  assert.equal(window.endMs, base + 10_000);
  // The recorder was created 3 s into the window: rates are over the 7 s it saw.
  assert.equal(window.coveredMs, 7_000);
  assert.equal(window.batchesReceived, 7);
  assert.equal(window.batchesAccepted, 4);
  assert.equal(window.stepsReceived, 17);
  assert.equal(window.stepsAccepted, 11);
  assert.equal(window.batchesAcceptedPerSec, 0.571);
  assert.equal(window.batchesReceivedPerSec, 1);
  assert.equal(window.stepsAcceptedPerSec, 1.571);
  assert.deepEqual(window.rejections, { stale: 2, 'invalid-step': 1 });
  // Accepted messages take 0.8 ms, rejected ones 0.3 ms: 4 of 7 at 0.8.
  assert.equal(window.latencyP50Ms, 0.8);
  assert.equal(window.latencyP99Ms, 0.8);
  assert.equal(window.latencyMaxMs, 0.8);
  assert.equal(window.applyP99Ms, 0.1);
  assert.equal(window.persistP99Ms, 0.5);
  // Only accepted messages reach the broadcast stage (rejected ones pass NaN for persisted).
  assert.equal(window.broadcastP99Ms, 0.2);
  assert.deepEqual(
    window.topDocuments.map((d) => [d.documentId, d.acceptedPerSec, d.receivedPerSec]),
    [
      ['alpha', 0.429, 0.429],
      ['beta', 0.143, 0.429],
      ['gamma', 0, 0.143],
    ],
  );
  // Per-document histograms keep two significant figures: within 1%.
  assertWithin1Percent(window.topDocuments[0].p99Ms, 0.8);
  assert.equal(window.topDocuments[0].stepsPerSec, 0.857);
  assert.equal(typeof window.heapUsedBytes, 'number');
  assert.ok(window.rssBytes >= window.heapUsedBytes);

  // The next window starts empty and covers the full 10 s.
  message(recorder, 'alpha', 'accepted', 1);
  clock.ms = base + 20_000;
  assert.equal(recorder.tick(), 1);
  const second = closed[1];
  assert.equal(second.startMs, base + 10_000);
  assert.equal(second.coveredMs, 10_000);
  assert.equal(second.batchesReceived, 1);
  assert.equal(second.batchesAcceptedPerSec, 0.1);
  assert.deepEqual(second.rejections, {});
  assert.deepEqual(
    second.topDocuments.map((d) => d.documentId),
    ['alpha'],
    'documents idle for a window are dropped from the table',
  );
  assert.deepEqual(recorder.windows(30), closed);
  assert.equal(recorder.windows(30)[1], second, 'windows() returns the objects listeners got');
  assert.ok(Object.isFrozen(second));
});

test('a late tick closes every elapsed window, empty ones included, in order', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base);
  message(recorder, 'alpha', 'accepted', 1);
  clock.ms = base + 35_000;
  assert.equal(recorder.tick(), 3);
  assert.deepEqual(
    closed.map((w) => [w.startMs - base, w.batchesReceived, w.latencyP99Ms]),
    [
      [0, 1, 0.8],
      [10_000, 0, null],
      [20_000, 0, null],
    ],
  );
  assert.equal(recorder.tick(), 0, 'the window open at 35 s is not over');
});

test('only the last windowsKept windows are kept, and windows(last) returns the newest', () => {
  const { recorder, clock } = fakeClockRecorder(base, { windowsKept: 5 });
  for (let i = 1; i <= 8; i++) {
    for (let j = 0; j < i; j++) message(recorder, 'alpha', 'accepted', 1);
    clock.ms = base + i * 10_000;
    recorder.tick();
  }
  assert.deepEqual(
    recorder.windows(360).map((w) => w.batchesReceived),
    [4, 5, 6, 7, 8],
  );
  assert.deepEqual(
    recorder.windows(2).map((w) => w.batchesReceived),
    [7, 8],
  );
  assert.deepEqual(recorder.windows(0), []);
});

test('after a long stall only windowsKept empty windows are produced', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base, { windowsKept: 4 });
  message(recorder, 'alpha', 'accepted', 1);
  clock.ms = base + 3_600_000 + 5_000;
  const count = recorder.tick();
  assert.equal(closed[0].batchesReceived, 1);
  assert.equal(count, 1 + 4);
  assert.deepEqual(
    recorder.windows(10).map((w) => w.endMs - base),
    [3_570_000, 3_580_000, 3_590_000, 3_600_000],
  );
});

/// A recorder on two fake clocks: `advance` moves both (time passing), `step` only the wall
/// clock (NTP correcting it, a virtual machine restored).
function twoClockRecorder(startMs: number): {
  recorder: MetricsRecorder;
  closed: MetricsWindow[];
  advance(ms: number): number;
  step(ms: number): void;
} {
  const clock = { wall: startMs, monotonic: 5_000 };
  const recorder = new MetricsRecorder(
    {},
    { now: () => clock.wall, monotonicNow: () => clock.monotonic },
  );
  const closed: MetricsWindow[] = [];
  recorder.onWindow((window) => closed.push(window));
  return {
    recorder,
    closed,
    advance(ms) {
      clock.wall += ms;
      clock.monotonic += ms;
      return recorder.tick();
    },
    step(ms) {
      clock.wall += ms;
    },
  };
}

test('a wall clock stepped back: windows still close every 10 s, and their labels never go back', () => {
  const { recorder, closed, advance, step } = twoClockRecorder(base);
  for (let i = 0; i < 100; i++) message(recorder, 'alpha', 'accepted', 1);
  assert.equal(advance(10_000), 1);
  step(-3_600_000);
  for (let window = 0; window < 3; window++) {
    for (let i = 0; i < 100; i++) message(recorder, 'alpha', 'accepted', 1);
    assert.equal(advance(10_000), 1, 'a window closes 10 s after the last');
  }
  // Labelled by the new time, the windows after the step went an hour back, and the
  // dashboard's chart and the JSON's readers saw time run backwards. They are labelled on
  // from the last instead, an hour ahead of the wall clock.
  assert.deepEqual(
    closed.map((w) => [w.startMs - base, w.endMs - base, w.coveredMs, w.batchesAcceptedPerSec]),
    [
      [0, 10_000, 10_000, 10],
      [10_000, 20_000, 10_000, 10],
      [20_000, 30_000, 10_000, 10],
      [30_000, 40_000, 10_000, 10],
    ],
  );
  // Stepped forward past the labels, the windows are labelled by the wall clock again.
  step(7_200_000);
  assert.equal(advance(10_000), 1);
  assert.equal(advance(10_000), 1);
  assert.deepEqual(
    closed.slice(-2).map((w) => [w.startMs - base, w.endMs - base, w.coveredMs]),
    [
      [40_000, 50_000, 10_000],
      [3_650_000, 3_660_000, 10_000],
    ],
  );
  for (let i = 1; i < closed.length; i++) {
    assert.ok(closed[i]!.startMs >= closed[i - 1]!.endMs, `window ${i} starts after the last`);
  }
});

test('a wall clock stepped forward makes no run of empty windows', () => {
  const { recorder, closed, advance, step } = twoClockRecorder(base);
  for (let window = 0; window < 180; window++) {
    message(recorder, 'alpha', 'accepted', 1);
    advance(10_000);
  }
  message(recorder, 'alpha', 'accepted', 1);
  step(86_400_000);
  assert.equal(advance(3_000), 0, 'only 3 s went by');
  assert.equal(advance(7_000), 1);
  message(recorder, 'alpha', 'accepted', 1);
  assert.equal(advance(10_000), 1);
  assert.equal(closed.length, 182);
  assert.ok(
    closed.every((w) => w.batchesAccepted === 1 && w.coveredMs === 10_000),
    'every window has its traffic and its 10 s',
  );
  assert.deepEqual(
    closed.slice(-2).map((w) => w.endMs - base),
    [1_810_000, 1_820_000 + 86_400_000],
  );
  assert.equal(recorder.windows(360).length, 182, 'the history before the step is kept');
});

test('the window timer runs on the monotonic clock: a step back does not hold it', async () => {
  let offset = 0;
  const recorder = new MetricsRecorder(
    { windowMs: 200 },
    { now: () => Date.now() + offset, monotonicNow: () => performance.now() },
  );
  const ends: number[] = [];
  const twoWindows = new Promise<void>((resolve) =>
    recorder.onWindow((w) => {
      ends.push(w.endMs);
      // Stepped back an hour once the first window closed.
      offset = -3_600_000;
      if (ends.length === 2) resolve();
    }),
  );
  const keepAlive = setTimeout(() => {}, 5_000);
  const timeout = new Promise<void>((_, reject) =>
    setTimeout(() => reject(new Error('no second window within 2 s')), 2_000).unref(),
  );
  recorder.start();
  try {
    await Promise.race([twoWindows, timeout]);
  } finally {
    recorder.stop();
    clearTimeout(keepAlive);
  }
  // Closed within 2 s rather than an hour, and labelled on from the first, not an hour back.
  assert.equal(ends[1] - ends[0], 200);
});

test('top documents are the busiest by accepted batches, limited to topDocuments', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base, { topDocuments: 3 });
  // doc-k gets k accepted batches; doc-0 gets only rejections.
  for (let k = 0; k < 6; k++) {
    for (let j = 0; j < k; j++) message(recorder, `doc-${k}`, 'accepted', 1);
  }
  message(recorder, 'doc-0', 'stale', 1);
  clock.ms = base + 10_000;
  recorder.tick();
  assert.deepEqual(
    closed[0].topDocuments.map((d) => [d.documentId, d.acceptedPerSec]),
    [
      ['doc-5', 0.5],
      ['doc-4', 0.4],
      ['doc-3', 0.3],
    ],
  );
});

test('documents beyond documentHistogramsMax are counted but report no p99', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base, { documentHistogramsMax: 1 });
  message(recorder, 'first', 'accepted', 1);
  message(recorder, 'second', 'accepted', 1);
  message(recorder, 'second', 'accepted', 1);
  clock.ms = base + 10_000;
  recorder.tick();
  assert.deepEqual(
    closed[0].topDocuments.map((d) => [d.documentId, d.acceptedPerSec, d.p99Ms === null]),
    [
      ['second', 0.2, true],
      ['first', 0.1, false],
    ],
  );
  assertWithin1Percent(closed[0].topDocuments[1].p99Ms, 0.8);
});

test('gauges come from the hooks when given, else from the setters', () => {
  let editors = 7;
  const clock = { ms: base };
  const hooked = new MetricsRecorder(
    {},
    { now: () => clock.ms, editors: () => editors, documents: () => 3 },
  );
  hooked.setEditors(100); // ignored: the hook wins
  const set = new MetricsRecorder({}, { now: () => clock.ms });
  set.setEditors(12);
  set.setDocuments(4);
  editors = 9;
  clock.ms = base + 10_000;
  hooked.tick();
  set.tick();
  assert.deepEqual([hooked.windows(1)[0].editors, hooked.windows(1)[0].documents], [9, 3]);
  assert.deepEqual([set.windows(1)[0].editors, set.windows(1)[0].documents], [12, 4]);
});

test('METRICS=off: record, tick and start do nothing', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base, { enabled: false });
  message(recorder, 'alpha', 'accepted', 1);
  recorder.start(); // must not create a timer: the test process would not care, but stop() does
  clock.ms = base + 30_000;
  assert.equal(recorder.tick(), 0);
  assert.equal(recorder.totals.batchesReceived, 0);
  assert.deepEqual(closed, []);
  recorder.stop();
});

test('a throwing listener does not stop other listeners, and tick rethrows its error', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base);
  const failure = new Error('listener bug');
  const unsubscribe = recorder.onWindow(() => {
    throw failure;
  });
  const after: number[] = [];
  recorder.onWindow((w) => after.push(w.startMs));
  clock.ms = base + 10_000;
  assert.throws(() => recorder.tick(), failure);
  assert.equal(closed.length, 1);
  assert.deepEqual(after, [base]);
  assert.equal(recorder.windows(1).length, 1);
  unsubscribe();
  clock.ms = base + 20_000;
  assert.equal(recorder.tick(), 1);
});

test('start() closes windows on the real clock and stop() removes the timers', async () => {
  // A 1 s window keeps this test short; the timer logic does not depend on the length.
  const recorder = new MetricsRecorder({ windowMs: 1_000 });
  const closedWindow = new Promise<MetricsWindow>((resolve) => recorder.onWindow(resolve));
  // The recorder's timers are unref'd, so something else must keep the test's loop alive.
  const keepAlive = setTimeout(() => {}, 5_000);
  recorder.start();
  recorder.record('alpha', 'accepted', 1, 0, 0.1, 0.2, 0.3);
  const window = await closedWindow;
  recorder.stop();
  clearTimeout(keepAlive);
  assert.equal(window.endMs % 1_000, 0);
  assert.equal(window.batchesReceived, 1);
  assert.ok(Date.now() >= window.endMs);
  assert.ok(window.eventLoopUtilization !== null && window.eventLoopUtilization >= 0);
});

/// Starts `recorder`'s own timer and resolves with the first two windows it closes, then stops
/// it (the timer is unref'd: the test keeps the process alive meanwhile).
async function twoWindowsUnderTheTimer(recorder: MetricsRecorder): Promise<MetricsWindow[]> {
  const seen: MetricsWindow[] = [];
  const twoWindows = new Promise<void>((resolve) =>
    recorder.onWindow((w) => {
      seen.push(w);
      if (seen.length === 2) resolve();
    }),
  );
  const keepAlive = setTimeout(() => {}, 5_000);
  recorder.start();
  await twoWindows;
  recorder.stop();
  clearTimeout(keepAlive);
  return seen;
}

test('a listener that throws under the timer is logged, and the timer goes on', async () => {
  // Thrown from the timer, the error would be uncaught and end the process (and this test).
  const logged: { obj: object; msg: string }[] = [];
  const logger = { error: (obj: object, msg: string) => logged.push({ obj, msg }) };
  const recorder = new MetricsRecorder({ windowMs: 200 }, { logger });
  const failure = new Error('a host listener failed');
  recorder.onWindow(() => {
    throw failure;
  });
  const seen = await twoWindowsUnderTheTimer(recorder);
  assert.ok(logged.length >= 2, "each window's failure is logged");
  assert.deepEqual(logged[0], { obj: { err: failure }, msg: 'a metrics window listener failed' });
  assert.equal(seen[1]!.endMs - seen[0]!.endMs, 200, 'the next window closed on time');
});

test('a gauge hook that throws is logged once per window, and the windows go on', async () => {
  // Before, the window could not be built, the timer came back a millisecond later, and the
  // error was logged about a thousand times a second.
  const logged: { obj: object; msg: string }[] = [];
  const logger = { error: (obj: object, msg: string) => logged.push({ obj, msg }) };
  const failure = new Error('the editors hook failed');
  const recorder = new MetricsRecorder(
    { windowMs: 200 },
    {
      logger,
      editors: () => {
        throw failure;
      },
      documents: () => 3,
    },
  );
  const seen = await twoWindowsUnderTheTimer(recorder);
  assert.equal(logged.length, 2, 'one line per window');
  assert.deepEqual(logged[0], { obj: { err: failure }, msg: 'a metrics gauge hook failed' });
  assert.equal(seen[0]!.editors, 0);
  assert.equal(seen[0]!.documents, 3);
  assert.equal(seen[1]!.endMs - seen[0]!.endMs, 200);
});

test('out-of-range configuration is refused', () => {
  assert.throws(() => new MetricsRecorder({ windowMs: 0 }), RangeError);
  assert.throws(() => new MetricsRecorder({ windowsKept: 1.5 }), RangeError);
  assert.throws(() => new MetricsRecorder({ latencyBucketsSeconds: [0.1, 0.01] }), RangeError);
  assert.throws(() => new MetricsRecorder({ latencyBucketsSeconds: [] }), RangeError);
});

test('a batch held for its flush counts the hold apart from the time spent on it', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base);
  // Received at 100, applied at 100.2, taken by a flush at 130.2 (held 30 ms), persisted at
  // 130.7 and answered at 131: 31 ms in all, 1 ms of it work.
  for (let i = 0; i < 10; i++)
    recorder.record('alpha', 'accepted', 1, 100, 100.2, 130.7, 131, 130.2);
  // A refusal is answered without a flush: all processing, no hold.
  recorder.record('alpha', 'stale', 1, 200, 200.5, NaN, 200.5);
  clock.ms = base + 10_000;
  recorder.tick();
  const window = closed[0]!;
  assertWithin1Percent(window.latencyP99Ms, 31);
  assertWithin1Percent(window.holdP50Ms, 30);
  assertWithin1Percent(window.holdP99Ms, 30);
  assertWithin1Percent(window.processingP50Ms, 1);
  assertWithin1Percent(window.processingP99Ms, 1);
  // The persist stage keeps its meaning (applied → persisted, the hold included).
  assertWithin1Percent(window.persistP99Ms, 30.5);
  const totals = recorder.totals;
  assert.equal(
    totals.hold.counts.reduce((a, b) => a + b, 0),
    10,
  );
  assert.equal(
    totals.processing.counts.reduce((a, b) => a + b, 0),
    11,
  );
  assert.ok(Math.abs(totals.hold.sumMs - 300) < 1e-6, `hold sum ${totals.hold.sumMs}`);
  assert.ok(
    Math.abs(totals.processing.sumMs - 10.5) < 1e-6,
    `processing ${totals.processing.sumMs}`,
  );
});

test('a window without flushed batches reports no hold, and a record without taken none', () => {
  const { recorder, clock, closed } = fakeClockRecorder(base);
  message(recorder, 'alpha', 'accepted', 1); // the seven-argument call of older callers
  clock.ms = base + 10_000;
  recorder.tick();
  const window = closed[0]!;
  assert.equal(window.holdP99Ms, null);
  assertWithin1Percent(window.processingP99Ms, 0.8);
  assertWithin1Percent(window.latencyP99Ms, 0.8);
});
