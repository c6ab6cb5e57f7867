import { resolveMetricsConfig, type MetricsConfig } from './config.js';
import { DocumentTable } from './document_activity.js';
import { LatencyHistogram } from './histogram.js';
import { WindowHistory } from './history.js';
import { ProcessSampler } from './process_sampler.js';
import { Totals } from './totals.js';
import { rate } from './rate.js';
import type { MetricsWindow } from './window.js';

/// What the recorder needs from its surroundings, all optional.
export interface MetricsHooks {
  /// Wall clock in ms since the epoch, only for labelling windows (`startMs`, `endMs`); tests
  /// inject a fake one and call `tick()`. Default `Date.now`.
  now?: () => number;
  /// Monotonic clock in ms, for how long windows last and when the timer fires: a wall clock
  /// stepped back would hold windows open, one stepped forward would close a run of empty
  /// ones. Default: `now` when it is given (a fake clock that is never stepped), else
  /// `performance.now`.
  monotonicNow?: () => number;
  /// Connected editors (sockets), read when a window closes and on each Prometheus scrape.
  /// Without it the recorder reports the last value given to `setEditors`.
  editors?: () => number;
  /// Documents loaded on the server, read like `editors`. Without it, the last `setDocuments`.
  documents?: () => number;
  /// Where errors thrown under the window timer go (a listener's, a gauge hook's), as
  /// `logger.error({ err }, message)`: a pino logger fits. Thrown from a timer they would end
  /// the process. A manual `tick()` rethrows instead. Default: `console.error`.
  logger?: MetricsLogger;
}

/// The one method of a logger the recorder uses (pino's signature).
export interface MetricsLogger {
  error(obj: { err: unknown }, msg: string): void;
}

const consoleLogger: MetricsLogger = {
  error: (obj, msg) => console.error(msg, obj.err),
};

/// Called with each closed window, in order. A listener that throws does not stop the others;
/// the first error is rethrown from `tick()` once all have run, and under the window timer
/// each is given to the hooks' `logger`.
export type WindowListener = (window: MetricsWindow) => void;

/// Records the server-side processing of `steps` messages and turns it into 10-second windows
/// aligned to the wall clock, plus counters for Prometheus. Windows last 10 s of the monotonic
/// clock, which the wall clock is checked against as each closes: a few ms of drift move the
/// next window's end back onto the wall clock's boundary; a step forward (NTP correcting a
/// clock, a virtual machine restored) relabels the open window from the new time, which then
/// holds the time from the last window's end to the next boundary, and makes no windows of its
/// own. Labels never go back: after a step back the windows are labelled on from the last one
/// (see `followWallClock`).
/// Recording only: no network, no files; the only timers are the window timer and the
/// event-loop delay monitor, both created by `start()` and removed by `stop()`.
///
/// The per-message path (`record`) increments plain counters, finds the document's entry in a
/// Map, and records into Node's native HDR histograms; reading and resetting them happens once
/// per window in `tick()`. The seven native `RecordableHistogram.record` calls (total, three
/// stages, hold, processing, the document's) are most of its cost;
/// disabled, it costs nothing measurable. bench/metrics-record.ts measures it (figures in
/// bench-results/NOTES.md).
export class MetricsRecorder {
  /// The validated, frozen configuration.
  readonly config: Readonly<MetricsConfig>;
  /// Counters since creation, read by the Prometheus registry.
  readonly totals: Totals;

  // Copied out of config so the hot path reads one own field.
  private readonly enabled: boolean;
  private readonly now: () => number;
  private readonly monotonicNow: () => number;
  private readonly editorsHook: (() => number) | null;
  private readonly documentsHook: (() => number) | null;
  private readonly logger: MetricsLogger;
  private editorsValue = 0;
  private documentsValue = 0;

  private readonly latency: LatencyHistogram;
  private readonly applyStage: LatencyHistogram;
  private readonly persistStage: LatencyHistogram;
  private readonly broadcastStage: LatencyHistogram;
  private readonly holdStage: LatencyHistogram;
  private readonly processing: LatencyHistogram;
  private readonly documentTable: DocumentTable;
  private readonly processSampler: ProcessSampler;
  private readonly history: WindowHistory;
  private readonly listeners: WindowListener[] = [];

  // The open window's labels, on the wall clock.
  private windowStartMs: number;
  private windowEndMs: number;
  // When it ends and since when it counts, on the monotonic clock.
  private windowEndMonotonic: number;
  private coveredFromMonotonic: number;
  // Totals at the start of the current window: the window's counts are the differences.
  private receivedAtStart = 0;
  private acceptedAtStart = 0;
  private stepsReceivedAtStart = 0;
  private stepsAcceptedAtStart = 0;
  private readonly rejectionsAtStart = new Map<string, number>();

  private timer: NodeJS.Timeout | null = null;
  private running = false;

  /// Throws a RangeError from `resolveMetricsConfig` when `config` is out of range.
  constructor(config: Partial<MetricsConfig> = {}, hooks: MetricsHooks = {}) {
    this.config = resolveMetricsConfig(config);
    this.enabled = this.config.enabled;
    this.now = hooks.now ?? Date.now;
    this.monotonicNow = hooks.monotonicNow ?? hooks.now ?? (() => performance.now());
    this.editorsHook = hooks.editors ?? null;
    this.documentsHook = hooks.documents ?? null;
    this.logger = hooks.logger ?? consoleLogger;
    this.totals = new Totals(this.config.latencyBucketsSeconds);
    const highest = this.config.highestLatencyMs;
    this.latency = new LatencyHistogram(highest, 3);
    this.applyStage = new LatencyHistogram(highest, 3);
    this.persistStage = new LatencyHistogram(highest, 3);
    this.broadcastStage = new LatencyHistogram(highest, 3);
    this.holdStage = new LatencyHistogram(highest, 3);
    this.processing = new LatencyHistogram(highest, 3);
    this.documentTable = new DocumentTable(highest, this.config.documentHistogramsMax);
    this.processSampler = new ProcessSampler(this.config.eventLoopResolutionMs);
    this.history = new WindowHistory(this.config.windowsKept);
    const wall = this.now();
    const monotonic = this.monotonicNow();
    this.windowStartMs = wall - (wall % this.config.windowMs);
    this.windowEndMs = this.windowStartMs + this.config.windowMs;
    this.windowEndMonotonic = monotonic + (this.windowEndMs - wall);
    this.coveredFromMonotonic = monotonic;
  }

  /// Records one `steps` message. Timestamps are `performance.now()` readings taken by the
  /// caller: when the message arrived, when validation and apply finished, when the journal
  /// append finished, and when the outcome (ack, and broadcast if accepted) was sent. Pass NaN
  /// for a stage the message never reached (a stale batch is never persisted): that stage is
  /// not recorded, the others are. `outcome` is 'accepted' or the error code sent back.
  /// `takenMs`, when the batch's flush took it, splits the latency into the hold (applied →
  /// taken: waiting on purpose to go with others) and processing (the rest); without it (NaN,
  /// as for refusals, answered without a flush) the whole latency is processing.
  /// Returns at once when metrics are disabled. Never throws.
  record(
    documentId: string,
    outcome: string,
    steps: number,
    receivedMs: number,
    appliedMs: number,
    persistedMs: number,
    sentMs: number,
    takenMs = NaN,
  ): void {
    if (!this.enabled) return;
    const totals = this.totals;
    const doc = this.documentTable.entry(documentId);
    totals.batchesReceived++;
    totals.stepsReceived += steps;
    doc.received++;
    if (outcome === 'accepted') {
      totals.batchesAccepted++;
      totals.stepsAccepted += steps;
      doc.accepted++;
      doc.steps += steps;
    } else {
      totals.reject(outcome);
    }
    // `x === x` is false only for NaN: cheaper than Number.isNaN and allocation-free.
    const totalMs = sentMs - receivedMs;
    if (totalMs === totalMs) {
      this.latency.recordMs(totalMs);
      totals.recordLatencyMs(totalMs);
      if (doc.latency !== null) doc.latency.recordMs(totalMs);
    }
    const holdMs = takenMs - appliedMs;
    if (holdMs === holdMs) {
      this.holdStage.recordMs(holdMs);
      totals.hold.recordMs(holdMs);
    }
    const processingMs = holdMs === holdMs ? totalMs - holdMs : totalMs;
    if (processingMs === processingMs) {
      this.processing.recordMs(processingMs);
      totals.processing.recordMs(processingMs);
    }
    const applyMs = appliedMs - receivedMs;
    if (applyMs === applyMs) this.applyStage.recordMs(applyMs);
    const persistMs = persistedMs - appliedMs;
    if (persistMs === persistMs) this.persistStage.recordMs(persistMs);
    const broadcastMs = sentMs - persistedMs;
    if (broadcastMs === broadcastMs) this.broadcastStage.recordMs(broadcastMs);
  }

  /// Sets the connected-editors gauge (ignored when an `editors` hook was given).
  setEditors(count: number): void {
    this.editorsValue = count;
  }

  /// Sets the active-documents gauge (ignored when a `documents` hook was given).
  setDocuments(count: number): void {
    this.documentsValue = count;
  }

  /// Connected editors now: the hook's answer or the last `setEditors` value.
  editors(): number {
    return this.editorsHook === null ? this.editorsValue : this.editorsHook();
  }

  /// Active documents now: the hook's answer or the last `setDocuments` value.
  documents(): number {
    return this.documentsHook === null ? this.documentsValue : this.documentsHook();
  }

  /// Closes every window whose end has passed on the monotonic clock (`monotonicNow()`), then
  /// checks the labels against the wall clock (see the class); oldest first, storing each and
  /// calling the listeners. Messages are counted in the window open when they were recorded,
  /// so a late tick attributes a few milliseconds of traffic to the closing window rather than
  /// checking the clock per message. Returns the number of windows closed (0 when disabled).
  /// Rethrows the first listener error, after every window is stored.
  tick(): number {
    const errors: unknown[] = [];
    const closed = this.closeElapsed(errors);
    if (errors.length > 0) throw errors[0];
    return closed;
  }

  /// `tick()`, collecting the listeners' errors in `errors` instead of throwing them.
  private closeElapsed(errors: unknown[]): number {
    if (!this.enabled) return 0;
    const monotonic = this.monotonicNow();
    const windowMs = this.config.windowMs;
    let closed = 0;
    while (monotonic >= this.windowEndMonotonic) {
      this.closeWindow(errors);
      closed++;
      // After a long stall (the event loop blocked; a suspended machine's monotonic clock
      // stops), skip the empty windows nobody keeps: windowsKept of them remain to close.
      const sinceStartMs = monotonic - this.coveredFromMonotonic;
      if (sinceStartMs > (this.config.windowsKept + 1) * windowMs) {
        const skipMs = (Math.floor(sinceStartMs / windowMs) - this.config.windowsKept) * windowMs;
        this.windowStartMs += skipMs;
        this.windowEndMs += skipMs;
        this.windowEndMonotonic += skipMs;
        this.coveredFromMonotonic = this.windowEndMonotonic - windowMs;
      }
    }
    if (closed > 0) this.followWallClock(monotonic);
    return closed;
  }

  /// Keeps the open window's labels on the wall clock (see the class): how far the wall clock
  /// is from where it would be had it run with the monotonic clock since the labels were set.
  private followWallClock(monotonic: number): void {
    const windowMs = this.config.windowMs;
    const wall = this.now();
    const offsetMs = wall - (this.windowEndMs - (this.windowEndMonotonic - monotonic));
    if (Math.abs(offsetMs) < windowMs / 2) {
      // Drift: the window ends when the wall clock reaches its label.
      this.windowEndMonotonic = monotonic + (this.windowEndMs - wall);
    } else {
      // A step: relabelled from the new time, it still counts since the last window's end.
      // Never earlier than that end, though (a label is the later of the wall clock's boundary
      // and the last window's end plus a window): the dashboard's chart and every reader of
      // the windows take them to be in order, and a step back made the next window's label an
      // hour (or whatever the step was) before the last one's. So after a step back the
      // windows keep their 10 s and are labelled on from the last, ahead of the wall clock by
      // the step, until a step forward catches them up (or the process restarts). Stretching
      // windows until the wall clock caught up would hold them open for the whole step.
      const startMs = wall - (wall % windowMs);
      if (startMs < this.windowStartMs) return;
      this.windowStartMs = startMs;
      this.windowEndMs = this.windowStartMs + windowMs;
      this.windowEndMonotonic = monotonic + (this.windowEndMs - wall);
    }
  }

  /// Starts the window timer (firing just after each window's end) and the event-loop
  /// delay monitor. Both are unref'd so they never keep the process alive. Does nothing when
  /// disabled or already started.
  start(): void {
    if (!this.enabled || this.running) return;
    this.running = true;
    this.processSampler.start();
    this.schedule();
  }

  /// Stops the timer and the event-loop delay monitor; the server calls it on shutdown. Closed
  /// windows stay readable. Safe to call twice.
  stop(): void {
    this.running = false;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.processSampler.stop();
  }

  /// Adds a listener for closed windows and returns a function that removes it.
  onWindow(listener: WindowListener): () => void {
    this.listeners.push(listener);
    return () => {
      const at = this.listeners.indexOf(listener);
      if (at >= 0) this.listeners.splice(at, 1);
    };
  }

  /// The last `last` closed windows (at most `windowsKept`), oldest first, as frozen plain
  /// objects: the same objects the listeners received.
  windows(last: number): MetricsWindow[] {
    return this.history.last(last);
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    const errors: unknown[] = [];
    try {
      this.closeElapsed(errors);
    } catch (err) {
      // Neither a listener's nor a gauge hook's (both are caught where they run): tried again
      // a second later at the soonest, so that an error that recurs cannot spin the timer.
      this.log(err, 'closing a metrics window failed');
      if (this.running) this.schedule(1000);
      return;
    }
    for (const err of errors) this.log(err, 'a metrics window listener failed');
    if (this.running) this.schedule();
  };

  /// A gauge hook's answer for a closing window, or 0 when it throws: the error is logged, and
  /// the window is still built, so a hook that always fails costs a line per window instead
  /// of stopping the windows (and retrying every millisecond).
  private gauge(read: () => number): number {
    try {
      return read.call(this);
    } catch (err) {
      this.log(err, 'a metrics gauge hook failed');
      return 0;
    }
  }

  private log(err: unknown, message: string): void {
    try {
      this.logger.error({ err }, message);
    } catch {
      // A logger that throws must not stop the timer either.
    }
  }

  private schedule(atLeastMs = 0): void {
    // One millisecond late on purpose: timers may fire up to a millisecond early relative to
    // the clock, and an early tick would close nothing and spin once more.
    const delayMs = Math.max(atLeastMs, this.windowEndMonotonic - this.monotonicNow()) + 1;
    this.timer = setTimeout(this.onTimer, delayMs);
    this.timer.unref();
  }

  /// Builds, stores and announces the current window, then opens the next. Adds the errors the
  /// listeners threw to `errors`.
  private closeWindow(errors: unknown[]): void {
    const totals = this.totals;
    const coveredMs = this.windowEndMonotonic - this.coveredFromMonotonic;
    const seconds = coveredMs / 1000;
    const received = totals.batchesReceived - this.receivedAtStart;
    const accepted = totals.batchesAccepted - this.acceptedAtStart;
    const stepsReceived = totals.stepsReceived - this.stepsReceivedAtStart;
    const stepsAccepted = totals.stepsAccepted - this.stepsAcceptedAtStart;
    const rejections: Record<string, number> = {};
    for (const [code, count] of totals.rejections) {
      const inWindow = count - (this.rejectionsAtStart.get(code) ?? 0);
      if (inWindow > 0) rejections[code] = inWindow;
      this.rejectionsAtStart.set(code, count);
    }
    const sample = this.processSampler.sample();
    const window: MetricsWindow = {
      startMs: this.windowStartMs,
      endMs: this.windowEndMs,
      coveredMs: Math.round(coveredMs),
      editors: this.gauge(this.editors),
      documents: this.gauge(this.documents),
      batchesReceived: received,
      batchesAccepted: accepted,
      stepsReceived,
      stepsAccepted,
      batchesReceivedPerSec: rate(received, seconds),
      batchesAcceptedPerSec: rate(accepted, seconds),
      stepsAcceptedPerSec: rate(stepsAccepted, seconds),
      rejections: Object.freeze(rejections),
      latencyP50Ms: this.latency.percentileMs(50),
      latencyP90Ms: this.latency.percentileMs(90),
      latencyP99Ms: this.latency.percentileMs(99),
      latencyMaxMs: this.latency.maxMs(),
      applyP99Ms: this.applyStage.percentileMs(99),
      persistP99Ms: this.persistStage.percentileMs(99),
      broadcastP99Ms: this.broadcastStage.percentileMs(99),
      holdP50Ms: this.holdStage.percentileMs(50),
      holdP90Ms: this.holdStage.percentileMs(90),
      holdP99Ms: this.holdStage.percentileMs(99),
      processingP50Ms: this.processing.percentileMs(50),
      processingP90Ms: this.processing.percentileMs(90),
      processingP99Ms: this.processing.percentileMs(99),
      eventLoopDelayP99Ms: sample.eventLoopDelayP99Ms,
      eventLoopUtilization: sample.eventLoopUtilization,
      heapUsedBytes: sample.heapUsedBytes,
      rssBytes: sample.rssBytes,
      topDocuments: this.documentTable
        .close(seconds, this.config.topDocuments)
        .map((doc) => Object.freeze(doc)),
    };
    Object.freeze(window.topDocuments);
    Object.freeze(window);

    this.latency.reset();
    this.applyStage.reset();
    this.persistStage.reset();
    this.broadcastStage.reset();
    this.holdStage.reset();
    this.processing.reset();
    this.receivedAtStart = totals.batchesReceived;
    this.acceptedAtStart = totals.batchesAccepted;
    this.stepsReceivedAtStart = totals.stepsReceived;
    this.stepsAcceptedAtStart = totals.stepsAccepted;
    this.windowStartMs = this.windowEndMs;
    this.windowEndMs += this.config.windowMs;
    this.coveredFromMonotonic = this.windowEndMonotonic;
    this.windowEndMonotonic += this.config.windowMs;

    this.history.add(window);
    // A copy, so a listener that unsubscribes itself does not make the loop skip the next one.
    for (const listener of [...this.listeners]) {
      try {
        listener(window);
      } catch (error) {
        errors.push(error);
      }
    }
  }
}
