import {
  monitorEventLoopDelay,
  performance,
  type EventLoopUtilization,
  type IntervalHistogram,
} from 'node:perf_hooks';

/// Process health for one window.
export interface ProcessSample {
  eventLoopDelayP99Ms: number | null;
  eventLoopUtilization: number | null;
  heapUsedBytes: number;
  rssBytes: number;
}

/// Samples event-loop delay, event-loop utilisation and memory once per window. The delay
/// monitor runs its own libuv timer, so it only exists between `start` and `stop`; utilisation
/// and memory need no timer and are sampled whether or not the sampler was started.
export class ProcessSampler {
  private delay: IntervalHistogram | null = null;
  private utilization: EventLoopUtilization;

  constructor(private readonly resolutionMs: number) {
    this.utilization = performance.eventLoopUtilization();
  }

  /// Starts the event-loop delay monitor; calling it again while started does nothing.
  start(): void {
    if (this.delay !== null) return;
    this.delay = monitorEventLoopDelay({ resolution: this.resolutionMs });
    this.delay.enable();
  }

  /// Stops and forgets the event-loop delay monitor, so nothing keeps a timer running.
  stop(): void {
    if (this.delay === null) return;
    this.delay.disable();
    this.delay = null;
  }

  /// Returns the sample for the window that ends now and starts the next one: the delay
  /// histogram is reset and utilisation is measured from here on.
  sample(): ProcessSample {
    let eventLoopDelayP99Ms: number | null = null;
    if (this.delay !== null && this.delay.count > 0) {
      // The delay histogram records nanoseconds; round to whole microseconds like our own.
      // The monitor records whole intervals between its timer's ticks, so an idle loop reads
      // `resolutionMs`: only what lies beyond it is delay.
      const p99Ns = Math.max(0, this.delay.percentile(99) - this.resolutionMs * 1e6);
      eventLoopDelayP99Ms = Math.round(p99Ns / 1000) / 1000;
      this.delay.reset();
    }
    const now = performance.eventLoopUtilization();
    const delta = performance.eventLoopUtilization(now, this.utilization);
    this.utilization = now;
    const memory = process.memoryUsage();
    return {
      eventLoopDelayP99Ms,
      // Utilisation of an interval with no time in it (two closes in one turn) is 0/0.
      eventLoopUtilization: Number.isFinite(delta.utilization)
        ? Math.round(delta.utilization * 1000) / 1000
        : null,
      heapUsedBytes: memory.heapUsed,
      rssBytes: memory.rss,
    };
  }
}
