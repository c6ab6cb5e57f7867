import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import type { SwarmOptions } from './options.js';
import type { ServerWindow } from './server_http.js';
import type { SliceWindow } from './window_recorder.js';

// A level's windows: the slices' windows merged by start time, next to the server's, and the
// level's steady figures over them.

/// Latency percentiles in milliseconds, from one merged HDR histogram.
export interface LatencySummary {
  count: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

/// One wall-clock window of a level, all slices merged, next to the server's window with the
/// same start (null when the server has none or offers no metrics).
export interface SwarmWindow {
  startMs: number;
  endMs: number;
  /// Closed early (the level stopped inside it) or begun before editing started.
  partial: boolean;
  /// Counted in the level's steady figures: complete, inside the editing time, after warm-up.
  steady: boolean;
  connected: number;
  edits: number;
  sends: number;
  /// Steps in the `steps` messages sent.
  stepsSent: number;
  confirmed: number;
  dropped: number;
  refusals: Record<string, number>;
  reconnects: number;
  broadcasts: number;
  editsPerSec: number;
  confirmedPerSec: number;
  /// Refused `steps` messages as a share of those sent, 0–1.
  refusalShare: number;
  latency: LatencySummary | null;
  server: Omit<ServerWindow, 'raw'> | null;
}

/// The server's view of a level's steady windows: mean rates, and the median over windows of
/// each window's percentile (the server sends percentiles, which cannot be merged exactly).
export interface ServerSteady {
  windows: number;
  acceptedPerSec: number | null;
  receivedPerSec: number | null;
  p90Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  /// Medians of the windows' processing p90/p99 and hold p99 (null from a server without them).
  processingP90Ms: number | null;
  processingP99Ms: number | null;
  holdP99Ms: number | null;
  rejections: Record<string, number>;
}

/// The figures of a level over its steady windows.
export interface SteadySummary {
  windows: number;
  /// Edits offered: editors times their drawn rates.
  offeredPerSec: number;
  /// Edits made (the people's timers fired and they edited); below `offeredPerSec` when the
  /// simulator could not keep up with its own schedule.
  editsPerSec: number;
  sendsPerSec: number;
  confirmedPerSec: number;
  latency: LatencySummary | null;
  refusalShare: number;
  refusalShares: Record<string, number>;
  reconnects: number;
  server: ServerSteady | null;
}

/// Merges the slices' windows of a level by start time into the level's windows, marks which
/// are steady (complete, inside the editing time, after `warmupWindows`), and pairs each with
/// the server's window of the same start. Windows that ended before editing began and saw no
/// edit are left out.
export function mergeWindows(
  collected: readonly SliceWindow[],
  options: Readonly<SwarmOptions>,
  startedAtMs: number,
  stoppedAtMs: number,
  serverWindows: ServerWindow[] | null,
): SwarmWindow[] {
  const groups = new Map<number, SliceWindow[]>();
  for (const window of collected) {
    // Windows that ended before editing began saw nothing but connecting sockets.
    if (window.endMs <= startedAtMs && window.edits === 0 && window.dropped === 0) continue;
    const group = groups.get(window.startMs);
    if (group) group.push(window);
    else groups.set(window.startMs, [window]);
  }
  const server = new Map<number, ServerWindow>();
  for (const window of serverWindows ?? []) server.set(window.startMs, window);
  const starts = [...groups.keys()].sort((a, b) => a - b);
  let complete = 0;
  return starts.map((startMs) => {
    const group = groups.get(startMs)!;
    const endMs = Math.max(...group.map((w) => w.endMs));
    const partial = group.some((w) => w.partial) || startMs < startedAtMs;
    let steady = false;
    if (!partial && endMs <= stoppedAtMs) {
      complete++;
      steady = complete > options.warmupWindows;
    }
    const seconds = Math.max(0.001, (endMs - startMs) / 1000);
    const sum = (pick: (w: SliceWindow) => number) => group.reduce((s, w) => s + pick(w), 0);
    const refusals: Record<string, number> = {};
    for (const window of group) addInto(refusals, window.refusals);
    const sends = sum((w) => w.sends);
    const refused = Object.values(refusals).reduce((s, n) => s + n, 0);
    const matched = server.get(startMs);
    let serverView: Omit<ServerWindow, 'raw'> | null = null;
    if (matched) {
      const { raw: _raw, ...rest } = matched;
      serverView = rest;
    }
    return {
      startMs,
      endMs,
      partial,
      steady,
      connected: sum((w) => w.connected),
      edits: sum((w) => w.edits),
      sends,
      stepsSent: sum((w) => w.stepsSent),
      confirmed: sum((w) => w.confirmed),
      dropped: sum((w) => w.dropped),
      refusals,
      reconnects: sum((w) => w.reconnects),
      broadcasts: sum((w) => w.broadcasts),
      editsPerSec: round(sum((w) => w.edits) / seconds),
      confirmedPerSec: round(sum((w) => w.confirmed) / seconds),
      refusalShare: sends === 0 ? 0 : round(refused / sends, 4),
      latency: latencyOf(mergeHistograms(group)),
      server: serverView,
    };
  });
}

/// The figures of a level over its steady windows, latency from the merged raw histograms of
/// the slices' windows with those starts.
export function summarise(
  windows: readonly SwarmWindow[],
  collected: readonly SliceWindow[],
  options: Readonly<SwarmOptions>,
  offeredPerSec: number,
): SteadySummary {
  const steady = windows.filter((window) => window.steady);
  const starts = new Set(steady.map((window) => window.startMs));
  const seconds = Math.max(0.001, (steady.length * options.windowMs) / 1000);
  const sum = (pick: (w: SwarmWindow) => number) => steady.reduce((s, w) => s + pick(w), 0);
  const refusals: Record<string, number> = {};
  for (const window of steady) addInto(refusals, window.refusals);
  const sends = sum((w) => w.sends);
  const refusalShares: Record<string, number> = {};
  for (const [code, count] of Object.entries(refusals)) {
    refusalShares[code] = sends === 0 ? 0 : round(count / sends, 4);
  }
  const refused = Object.values(refusals).reduce((s, n) => s + n, 0);
  return {
    windows: steady.length,
    offeredPerSec: round(offeredPerSec),
    editsPerSec: round(sum((w) => w.edits) / seconds),
    sendsPerSec: round(sends / seconds),
    confirmedPerSec: round(sum((w) => w.confirmed) / seconds),
    // Merge the raw histograms of the steady windows: percentiles of percentiles would lie.
    latency: latencyOf(mergeHistograms(collected.filter((w) => starts.has(w.startMs)))),
    refusalShare: sends === 0 ? 0 : round(refused / sends, 4),
    refusalShares,
    reconnects: sum((w) => w.reconnects),
    server: serverSteady(steady),
  };
}

function serverSteady(steady: readonly SwarmWindow[]): ServerSteady | null {
  const matched = steady.map((window) => window.server).filter((w) => w !== null);
  if (matched.length === 0) return null;
  const values = (pick: (w: Omit<ServerWindow, 'raw'>) => number | null) =>
    matched.map(pick).filter((value): value is number => value !== null);
  const mean = (list: number[]) =>
    list.length === 0 ? null : round(list.reduce((s, v) => s + v, 0) / list.length);
  const rejections: Record<string, number> = {};
  for (const window of matched) addInto(rejections, window.rejections);
  const maxes = values((w) => w.maxMs);
  return {
    windows: matched.length,
    acceptedPerSec: mean(values((w) => w.acceptedPerSec)),
    receivedPerSec: mean(values((w) => w.receivedPerSec)),
    p90Ms: median(values((w) => w.p90Ms)),
    p99Ms: median(values((w) => w.p99Ms)),
    maxMs: maxes.length === 0 ? null : Math.max(...maxes),
    processingP90Ms: median(values((w) => w.processingP90Ms)),
    processingP99Ms: median(values((w) => w.processingP99Ms)),
    holdP99Ms: median(values((w) => w.holdP99Ms)),
    rejections,
  };
}

/// One histogram holding every latency of `windows`.
export function mergeHistograms(windows: readonly SliceWindow[]): RecordableHistogram {
  const merged = createHistogram();
  for (const window of windows) merged.add(window.latencyUs);
  return merged;
}

function latencyOf(histogram: RecordableHistogram): LatencySummary | null {
  if (histogram.count === 0) return null;
  return {
    count: histogram.count,
    p50Ms: round(histogram.percentile(50) / 1000, 3),
    p90Ms: round(histogram.percentile(90) / 1000, 3),
    p99Ms: round(histogram.percentile(99) / 1000, 3),
    maxMs: round(histogram.max / 1000, 3),
  };
}

/// The median of a few per-window values (at most a few hundred: sorting them is fine).
function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : round((sorted[mid - 1]! + sorted[mid]!) / 2, 3);
}

/// Adds each count of `source` into `target`, key by key.
export function addInto(target: Record<string, number>, source: Record<string, number>): void {
  for (const [key, value] of Object.entries(source)) target[key] = (target[key] ?? 0) + value;
}

function round(value: number, digits = 2): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
