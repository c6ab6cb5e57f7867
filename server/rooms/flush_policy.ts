import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/// When a room flushes its accepted batches (one journal append, one broadcast, the acks):
/// at once while the process has headroom, gathering only under pressure. Design and figures:
/// docs/operations.md, "Durability".

/// What the policy looks at when a batch finds no flush scheduled.
export interface FlushSignals {
  /// Since the room's last flush started (ms).
  sinceLastFlushMs: number;
  /// What one of the room's flushes has cost lately (ms of the event loop: broadcast, acks),
  /// smoothed; it grows with the room's sockets.
  flushCostMs: number;
  /// The room's joined sockets.
  sockets: number;
  /// Share of the recent past the event loop was busy, 0–1 (`LoadGauge`).
  utilisation: number;
}

/// The settings the policy obeys (`RoomOptions`).
export interface FlushLimits {
  /// The hard ceiling: a batch never waits longer than this for its flush; 0 flushes every
  /// event-loop turn whatever the load.
  flushIntervalMs: number;
  /// Under pressure, the gathering time per joined socket (µs), up to the ceiling.
  flushUsPerSocket: number;
  /// The event loop busy (%) past which the process is under pressure and rooms gather at
  /// `flushUsPerSocket`: below it the loop has time for a flush per batch, and latency is what
  /// there is to win. 0: always under pressure (a fixed hold).
  flushBusyPercent: number;
}

/// The share of the event loop one room's flushes may take before it gathers, whatever the
/// process's load: a big room flushing per batch would spend the loop on broadcasts alone
/// (its flush cost grows with its sockets, its batch rate with its editors).
export const flushDutyMax = 0.25;

/// How long to wait before flushing (ms): 0 to flush after this turn's I/O callbacks (every
/// batch of the turn goes together), more to gather the batches of that time into one flush.
/// The wait keeps the time between two flush starts at least at the larger of what pressure
/// asks (`flushUsPerSocket` per socket, when `utilisation` reaches `flushBusyPercent`) and
/// what keeps this room's flushes under `flushDutyMax` of the loop; never more than
/// `flushIntervalMs`. Pure.
export function flushWaitMs(signals: FlushSignals, limits: FlushLimits): number {
  const ceiling = limits.flushIntervalMs;
  if (ceiling <= 0) return 0;
  let gapMs = signals.flushCostMs / flushDutyMax;
  if (signals.utilisation * 100 >= limits.flushBusyPercent) {
    const gatherMs = (signals.sockets * limits.flushUsPerSocket) / 1000;
    if (gatherMs > gapMs) gapMs = gatherMs;
  }
  if (gapMs > ceiling) gapMs = ceiling;
  const wait = gapMs - signals.sinceLastFlushMs;
  return wait > 0 ? wait : 0;
}

/// How much a new flush cost moves the smoothed one (`smoothFlushCost`): a room's cost follows
/// its sockets within a few flushes, and one slow flush (a GC pause) does not make it gather.
const costWeight = 0.25;

/// The smoothed flush cost after a flush that took `costMs`; the first flush sets it. A flush
/// the OS preempted (or a GC paused) reads long though it cost no more, and on a shared
/// machine that is common: one sample counts as at most twice the smoothed cost, so an outlier
/// moves it by a quarter at most, while a room that grew catches up within a few flushes.
export function smoothFlushCost(previousMs: number, costMs: number): number {
  if (!(previousMs > 0)) return costMs;
  const sample = costMs > previousMs * 2 ? previousMs * 2 : costMs;
  return previousMs + (sample - previousMs) * costWeight;
}

/// One room's side of the policy: when its last flush started and what its flushes cost.
export class FlushPacer {
  /// When the last flush started (ms, `performance.now()`): the batches it took were held
  /// from when they were applied until then.
  startedAt = -Infinity;
  /// What a flush's broadcast and acknowledgements have cost lately (ms, smoothed).
  costMs = 0;

  constructor(private readonly load: LoadGauge) {}

  /// How long a batch that finds no flush scheduled waits for one (`flushWaitMs`), as of now.
  waitMs(sockets: number, limits: FlushLimits): number {
    const now = performance.now();
    return flushWaitMs(
      {
        sinceLastFlushMs: now - this.startedAt,
        flushCostMs: this.costMs,
        sockets,
        utilisation: this.load.utilisation(now),
      },
      limits,
    );
  }

  /// A flush's broadcast and acknowledgements took `costMs`.
  published(costMs: number): void {
    this.costMs = smoothFlushCost(this.costMs, costMs);
  }
}

/// The event loop's recent utilisation for the whole process, shared by every room: sampled
/// from `performance.eventLoopUtilization()` at most every `sampleMs`, and smoothed over about
/// `spanMs`, so reading it per flush costs a clock read and, now and then, one small object.
export class LoadGauge {
  private last: EventLoopUtilization;
  private lastAt: number;
  private smoothed = 0;

  constructor(
    private readonly sampleMs = 5,
    private readonly spanMs = 100,
  ) {
    this.last = performance.eventLoopUtilization();
    this.lastAt = performance.now();
  }

  /// The smoothed share of the event loop busy (0–1), as of `now` (ms, `performance.now()`).
  utilisation(now: number): number {
    const elapsed = now - this.lastAt;
    if (elapsed < this.sampleMs) return this.smoothed;
    const current = performance.eventLoopUtilization();
    const delta = performance.eventLoopUtilization(current, this.last).utilization;
    this.last = current;
    this.lastAt = now;
    // A sample covering a whole span (the loop idle a while) replaces the past outright.
    const weight = elapsed >= this.spanMs ? 1 : elapsed / this.spanMs;
    this.smoothed += (delta - this.smoothed) * weight;
    return this.smoothed;
  }
}

/// The process's gauge: utilisation is a property of the process, not of a room.
export const processLoad = new LoadGauge();
