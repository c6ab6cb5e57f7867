import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/// What one slice of the swarm saw in one wall-clock window. Counts are of edits (what a
/// simulated person did) and of `steps` messages (what reached the wire). Plain data plus a
/// histogram, so it crosses `postMessage` as is (Node clones `RecordableHistogram`s).
export interface SliceWindow {
  /// Wall-clock start, ms since the epoch, a multiple of the window length.
  startMs: number;
  /// When the window was closed: its boundary, or earlier for the last window of a run.
  endMs: number;
  /// Closed before its boundary (the run stopped inside it).
  partial: boolean;
  /// Editor sockets joined when the window closed.
  connected: number;
  /// Edits the simulated people made.
  edits: number;
  /// `steps` messages sent, and the steps in them.
  sends: number;
  stepsSent: number;
  /// Edits confirmed by a broadcast on the editor's own socket.
  confirmed: number;
  /// Edits given up (refused for good, or impossible to make on the current document).
  dropped: number;
  /// Refused `steps` messages by error code.
  refusals: Record<string, number>;
  reconnects: number;
  /// Broadcasts received over all editor and observer sockets.
  broadcasts: number;
  /// Edit-to-confirm latency in microseconds, one sample per confirmed edit, from the moment the
  /// edit was due (see `Pace`).
  latencyUs: RecordableHistogram;
}

/// Cumulative counts since the recorder started, to check that the windows add up.
export interface SliceTotals {
  edits: number;
  sends: number;
  confirmed: number;
  dropped: number;
  refusals: number;
  reconnects: number;
}

/// Counts what the editors of one slice do and closes a window at every wall-clock multiple of
/// `windowMs`, handing it to `onWindow`. The hot calls only bump numbers and record into an
/// HDR histogram; nothing is sorted or kept per sample.
export class WindowRecorder {
  readonly totals: SliceTotals = {
    edits: 0,
    sends: 0,
    confirmed: 0,
    dropped: 0,
    refusals: 0,
    reconnects: 0,
  };
  private readonly windowMs: number;
  private readonly onWindow: (window: SliceWindow) => void;
  private readonly connected: () => number;
  private current: SliceWindow;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(windowMs: number, connected: () => number, onWindow: (window: SliceWindow) => void) {
    this.windowMs = windowMs;
    this.connected = connected;
    this.onWindow = onWindow;
    this.current = this.fresh(Math.floor(Date.now() / windowMs) * windowMs);
  }

  /// Starts closing windows at their boundaries.
  start(): void {
    this.current = this.fresh(Math.floor(Date.now() / this.windowMs) * this.windowMs);
    this.arm();
  }

  /// Closes the current window now (marked partial unless at its boundary) and stops.
  stop(): void {
    this.dispose();
    this.close(Math.min(Date.now(), this.current.startMs + this.windowMs));
  }

  /// Stops the timer without closing a window: for a slice torn down without a level's end (its
  /// editors could not join), whose timer would otherwise keep the process alive for ever.
  dispose(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  edit(): void {
    this.current.edits++;
    this.totals.edits++;
  }

  send(steps: number): void {
    this.current.sends++;
    this.current.stepsSent += steps;
    this.totals.sends++;
  }

  /// One edit confirmed `latencyMs` after the person was due to make it.
  confirm(latencyMs: number): void {
    this.current.confirmed++;
    this.totals.confirmed++;
    // The histogram takes integers ≥ 1: microseconds keep sub-millisecond loopback latencies.
    this.current.latencyUs.record(Math.max(1, Math.round(latencyMs * 1000)));
  }

  drop(count: number): void {
    this.current.dropped += count;
    this.totals.dropped += count;
  }

  refuse(code: string): void {
    this.current.refusals[code] = (this.current.refusals[code] ?? 0) + 1;
    this.totals.refusals++;
  }

  reconnect(): void {
    this.current.reconnects++;
    this.totals.reconnects++;
  }

  broadcast(): void {
    this.current.broadcasts++;
  }

  private arm(): void {
    const boundary = this.current.startMs + this.windowMs;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.close(boundary);
        this.current = this.fresh(boundary);
        this.arm();
      },
      Math.max(0, boundary - Date.now()),
    );
  }

  private close(endMs: number): void {
    const window = this.current;
    window.endMs = endMs;
    window.partial = endMs < window.startMs + this.windowMs;
    window.connected = this.connected();
    this.onWindow(window);
  }

  private fresh(startMs: number): SliceWindow {
    return {
      startMs,
      endMs: startMs + this.windowMs,
      partial: false,
      connected: 0,
      edits: 0,
      sends: 0,
      stepsSent: 0,
      confirmed: 0,
      dropped: 0,
      refusals: {},
      reconnects: 0,
      broadcasts: 0,
      latencyUs: createHistogram(),
    };
  }
}
