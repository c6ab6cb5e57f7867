import { cpus, platform, release } from 'node:os';
import type { DocJSON } from '../schema/protocol.js';
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import { validateOptions, workersFor, type SwarmOptions } from './options.js';
import { Random } from './random.js';
import {
  fetchDocument,
  fetchServerWindows,
  probeServer,
  type ServerWindow,
} from './server_http.js';
import type { EditorCheck, SliceEditorSpec, SlicePlan } from './slice.js';
import { SliceHandle } from './slice_handle.js';
import type { SliceTotals, SliceWindow } from './window_recorder.js';

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

/// How a level went: `steady` when at least 90% of the edits made were confirmed within the
/// steady windows and the client p99 stayed under a second; `overloaded` otherwise; `diverged`
/// when any document differs from the server's; `too-short` when no window was left after the
/// warm-up (a duration under `warmup + 1` windows); `generator-limited` when the simulated
/// people made fewer edits than were offered (see `generatorLimited`): the simulator's thread
/// could not keep its own schedule, so the figures describe a lighter load than the level's,
/// whatever the server did with it.
export type LevelState = 'steady' | 'overloaded' | 'diverged' | 'too-short' | 'generator-limited';

/// What the convergence check of a level found: `converged` only when at least one document
/// (a full editor's, or a replica of light editors) was compared with the server's and none
/// differed; `unchecked` when none was compared, which says nothing either way.
export interface Convergence {
  converged: boolean;
  unchecked: boolean;
  checked: number;
  failures: string[];
}

/// Everything measured for one level.
export interface LevelResult {
  editors: number;
  lightEditors: number;
  fullEditors: number;
  observers: number;
  documents: number;
  workers: number;
  rttMs: number;
  ratePerSec: number;
  docIds: string[];
  startedAtMs: number;
  stoppedAtMs: number;
  windows: SwarmWindow[];
  steady: SteadySummary;
  totals: SliceTotals & { refusalsByCode: Record<string, number> };
  /// The windows' counts sum to the slices' running totals.
  windowsAddUp: boolean;
  /// Editors whose edits were still unconfirmed when the drain time ran out.
  undrained: number;
  convergence: Convergence;
  state: LevelState;
}

/// The result of `runSwarm`.
export interface SwarmResult {
  options: SwarmOptions;
  machine: { cpus: number; cpuModel: string; node: string; os: string };
  /// Whether the server offered `/metrics/windows`.
  serverMetrics: boolean;
  levels: LevelResult[];
  converged: boolean;
}

/// Progress of a run, for a progress line.
export interface SwarmProgress {
  level: number;
  levels: number;
  editors: number;
  phase: 'connecting' | 'editing' | 'draining' | 'checking';
  elapsedSec: number;
  durationSec: number;
  /// From the last closed window, null before the first.
  editsPerSec: number | null;
  p99Ms: number | null;
}

/// Runs the swarm: one level after another, each on fresh documents, with light and full
/// editors over `docs` documents, in this thread or in worker threads. Probes the server first.
/// Resolves with every window and summary, and `converged: false` if any document diverged or
/// a level compared none (`convergence.unchecked`; the caller decides the exit code). Throws
/// `OptionError` for invalid options, `ServerUnavailableError` when no server answers, and
/// `Error` when editors cannot connect.
export async function runSwarm(
  input: Partial<SwarmOptions>,
  onProgress: (progress: SwarmProgress) => void = () => {},
): Promise<SwarmResult> {
  const options = validateOptions(input);
  await probeServer(options.url);
  const tag = `${options.seed.toString(36)}${Date.now().toString(36)}`;
  const levels: LevelResult[] = [];
  let serverMetrics = false;
  for (let i = 0; i < options.levels.length; i++) {
    const { level, metrics } = await runLevel(options, i, tag, onProgress);
    serverMetrics ||= metrics;
    levels.push(level);
  }
  const cpuList = cpus();
  return {
    options: { ...options },
    machine: {
      cpus: cpuList.length,
      cpuModel: cpuList[0]?.model.trim() ?? 'unknown',
      node: process.version,
      os: `${platform()} ${release()}`,
    },
    serverMetrics,
    levels,
    converged: levels.every((level) => level.convergence.converged),
  };
}

async function runLevel(
  options: Readonly<SwarmOptions>,
  index: number,
  tag: string,
  onProgress: (progress: SwarmProgress) => void,
): Promise<{ level: LevelResult; metrics: boolean }> {
  const editors = options.levels[index]!;
  const random = new Random(options.seed * 7919 + index);
  const docIds = Array.from({ length: options.docs }, (_, d) => `sim-${tag}-${index}-${d}`);
  const specs: SliceEditorSpec[] = [];
  const perDoc = new Array<number>(options.docs).fill(0);
  let offeredPerSec = 0;
  for (let i = 0; i < editors; i++) {
    const doc = i % options.docs;
    const kind = perDoc[doc]! < options.fullPerDoc ? 'full' : 'light';
    perDoc[doc]!++;
    const ratePerSec = options.ratePerSec * (0.8 + 0.4 * random.next());
    offeredPerSec += ratePerSec;
    specs.push({
      docId: docIds[doc]!,
      clientID: `e${i}-${tag}-${index}`,
      kind,
      ratePerSec,
      seed: (options.seed * 1_000_003 + index * 100_003 + i) >>> 0,
    });
  }
  for (let j = 0; j < options.observers; j++) {
    specs.push({
      docId: docIds[j % options.docs]!,
      clientID: `o${j}-${tag}-${index}`,
      kind: 'observer',
      ratePerSec: 0,
      seed: (options.seed * 31 + j) >>> 0,
    });
  }
  const workers = workersFor(specs.length, options.workers);
  const handles = plan(options, specs, workers).map((slicePlan) =>
    workers === 0 ? SliceHandle.local(slicePlan) : SliceHandle.worker(slicePlan),
  );
  const collected: SliceWindow[] = [];
  let lastWindow: { startMs: number; windows: SliceWindow[] } | null = null;
  for (const handle of handles) {
    handle.onWindow((window) => {
      collected.push(window);
      if (!lastWindow || window.startMs > lastWindow.startMs) {
        lastWindow = { startMs: window.startMs, windows: [window] };
      } else if (window.startMs === lastWindow.startMs) lastWindow.windows.push(window);
    });
  }
  const progress = (phase: SwarmProgress['phase'], elapsedSec: number) => {
    const last = lastWindow as { windows: SliceWindow[] } | null;
    const merged = last ? mergeHistograms(last.windows) : null;
    const edits = last ? last.windows.reduce((sum, w) => sum + w.edits, 0) : 0;
    onProgress({
      level: index + 1,
      levels: options.levels.length,
      editors,
      phase,
      elapsedSec,
      durationSec: options.durationSec,
      editsPerSec: last ? edits / (options.windowMs / 1000) : null,
      p99Ms: merged && merged.count > 0 ? merged.percentile(99) / 1000 : null,
    });
  };

  const checks: EditorCheck[] = [];
  let totals: SliceTotals[] = [];
  let undrained = 0;
  let startedAtMs = 0;
  let stoppedAtMs = 0;
  try {
    progress('connecting', 0);
    const connectTimeoutMs = 30_000 + specs.length * 20;
    for (const handle of handles) handle.send({ type: 'connect', timeoutMs: connectTimeoutMs });
    const connected = await Promise.all(handles.map((handle) => handle.reply('connected')));
    const failures = connected.flatMap((answer) => answer.failures);
    if (failures.length > 0) {
      throw new Error(
        `${failures.length} of ${specs.length} sockets could not join: ${failures
          .slice(0, 3)
          .join('; ')}`,
      );
    }
    startedAtMs = startTime(options);
    for (const handle of handles) handle.send({ type: 'start', atMs: startedAtMs });
    stoppedAtMs = startedAtMs + options.durationSec * 1000;
    const ticker = setInterval(
      () => progress('editing', Math.max(0, (Date.now() - startedAtMs) / 1000)),
      1000,
    );
    await sleepUntil(stoppedAtMs);
    clearInterval(ticker);
    progress('draining', options.durationSec);
    for (const handle of handles) handle.send({ type: 'stop', drainTimeoutMs: 15_000 });
    const stopped = await Promise.all(handles.map((handle) => handle.reply('stopped')));
    totals = stopped.map((answer) => answer.totals);
    undrained = stopped.reduce((sum, answer) => sum + answer.undrained, 0);
    progress('checking', options.durationSec);
    const docs = await settledDocuments(options.url, docIds, undrained > 0 ? 20_000 : 0);
    for (const handle of handles) handle.send({ type: 'check', docs, timeoutMs: 20_000 });
    for (const answer of await Promise.all(handles.map((handle) => handle.reply('checked')))) {
      checks.push(...answer.checks);
    }
  } finally {
    for (const handle of handles) handle.send({ type: 'close' });
    await Promise.all(
      handles.map((handle) =>
        Promise.race([handle.reply('closed').catch(() => undefined), sleep(5000)]),
      ),
    );
    await Promise.all(handles.map((handle) => handle.terminate()));
  }

  const spanMs = Date.now() - startedAtMs;
  const serverWindows = await fetchServerWindows(
    options.url,
    Math.min(360, Math.ceil(spanMs / 10_000) + 6),
  );
  const windows = mergeWindows(collected, options, startedAtMs, stoppedAtMs, serverWindows);
  const sum = (pick: (t: SliceTotals) => number) => totals.reduce((s, t) => s + pick(t), 0);
  const refusalsByCode: Record<string, number> = {};
  for (const window of windows) addInto(refusalsByCode, window.refusals);
  const levelTotals = {
    edits: sum((t) => t.edits),
    sends: sum((t) => t.sends),
    confirmed: sum((t) => t.confirmed),
    dropped: sum((t) => t.dropped),
    refusals: sum((t) => t.refusals),
    reconnects: sum((t) => t.reconnects),
    refusalsByCode,
  };
  const windowSum = (pick: (w: SwarmWindow) => number) => windows.reduce((s, w) => s + pick(w), 0);
  const windowsAddUp =
    windowSum((w) => w.edits) === levelTotals.edits &&
    windowSum((w) => w.sends) === levelTotals.sends &&
    windowSum((w) => w.confirmed) === levelTotals.confirmed &&
    windowSum((w) => w.dropped) === levelTotals.dropped;
  const steady = summarise(windows, collected, options, offeredPerSec);
  const convergence = convergenceOf(checks);
  const fullEditors = specs.filter((spec) => spec.kind === 'full').length;
  const level: LevelResult = {
    editors,
    lightEditors: editors - fullEditors,
    fullEditors,
    observers: options.observers,
    documents: options.docs,
    workers,
    rttMs: options.rttMs,
    ratePerSec: options.ratePerSec,
    docIds,
    startedAtMs,
    stoppedAtMs,
    windows,
    steady,
    totals: levelTotals,
    windowsAddUp,
    undrained,
    convergence,
    state:
      convergence.failures.length > 0
        ? 'diverged'
        : steady.windows === 0
          ? 'too-short'
          : generatorLimited(steady, options.windowMs)
            ? 'generator-limited'
            : steady.confirmedPerSec >= 0.9 * steady.editsPerSec &&
                (steady.latency === null || steady.latency.p99Ms <= 1000)
              ? 'steady'
              : 'overloaded',
  };
  return { level, metrics: serverWindows !== null };
}

/// The server's documents, read once their versions stop moving: when the drain gave up with
/// batches still in flight (`waitMs` > 0, an overloaded run), those land after it, and a
/// document read before them is behind the editors that sent them, which the check would take
/// for a divergence. Read again every half second until two reads agree, for `waitMs` at most.
async function settledDocuments(
  url: string,
  docIds: readonly string[],
  waitMs: number,
): Promise<{ docId: string; version: number; doc: DocJSON }[]> {
  const read = () =>
    Promise.all(docIds.map(async (docId) => ({ docId, ...(await fetchDocument(url, docId)) })));
  let docs = await read();
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    await sleep(500);
    const again = await read();
    const moved = again.some((doc, i) => doc.version !== docs[i]!.version);
    docs = again;
    if (!moved) break;
  }
  return docs;
}

/// Sums up a level's checks. No check at all is `unchecked` and not `converged`: a level that
/// compared nothing must not read as one that compared everything and found it equal.
export function convergenceOf(checks: readonly EditorCheck[]): Convergence {
  const failures = checks
    .filter((check) => !check.converged)
    .map((check) => `${check.docId} ${check.clientID}: ${check.detail}`);
  return {
    converged: checks.length > 0 && failures.length === 0,
    unchecked: checks.length === 0,
    checked: checks.length,
    failures,
  };
}

/// True when the people made fewer edits over the steady windows than they were offered: more
/// than 2% fewer, and more than the count's own chance spread (three standard deviations; with
/// gaps drawn uniformly between half and one and a half of the mean, a schedule's count over a
/// span varies as `expected / 12`), so that a short run of few editors is not flagged for the
/// luck of its draws. Edits made are counted when the timers fire, so a simulator thread too
/// busy to fire them on time shows here even though its latencies include the lateness.
export function generatorLimited(steady: Readonly<SteadySummary>, windowMs: number): boolean {
  const seconds = (steady.windows * windowMs) / 1000;
  const offered = steady.offeredPerSec * seconds;
  const shortfall = offered - steady.editsPerSec * seconds;
  return shortfall > Math.max(0.02 * offered, 3 * Math.sqrt(offered / 12));
}

/// Splits the sockets over `workers` slices (one slice in this thread when 0). With at least
/// as many documents as slices, each document lives in one slice, so that its light editors
/// share one replica; otherwise editors are dealt round-robin and each slice keeps its own
/// replica of the document.
function plan(
  options: Readonly<SwarmOptions>,
  specs: readonly SliceEditorSpec[],
  workers: number,
): SlicePlan[] {
  const count = Math.max(1, workers);
  const plans: SlicePlan[] = Array.from({ length: count }, () => ({
    url: options.url,
    schemaModule: options.schemaModule,
    rttMs: options.rttMs,
    windowMs: options.windowMs,
    editors: [],
  }));
  const byDoc = options.docs >= count;
  const docIndex = new Map<string, number>();
  specs.forEach((spec, i) => {
    if (!docIndex.has(spec.docId)) docIndex.set(spec.docId, docIndex.size);
    const slice = byDoc ? docIndex.get(spec.docId)! % count : i % count;
    plans[slice]!.editors.push(spec);
  });
  return plans.filter((slicePlan) => slicePlan.editors.length > 0);
}

/// When editing starts: at the next window boundary (at least half a second away, so that
/// every slice hears of it in time) when aligned, else in a moment.
function startTime(options: Readonly<SwarmOptions>): number {
  const now = Date.now();
  if (!options.alignStart) return now + 100;
  let boundary = Math.ceil(now / options.windowMs) * options.windowMs;
  if (boundary - now < 500) boundary += options.windowMs;
  return boundary;
}

function mergeWindows(
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

function summarise(
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
    rejections,
  };
}

function mergeHistograms(windows: readonly SliceWindow[]): RecordableHistogram {
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

function addInto(target: Record<string, number>, source: Record<string, number>): void {
  for (const [key, value] of Object.entries(source)) target[key] = (target[key] ?? 0) + value;
}

function round(value: number, digits = 2): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

/// Resolves once `Date.now()` has reached `atMs`. A timer set for `atMs - Date.now()` can fire
/// a millisecond before it does (the timer runs on a monotonic clock, the wall clock is read
/// later and rounded): stopping a level then closes its last window a moment early, and the
/// recorder marks it partial and leaves it out of the steady figures.
export async function sleepUntil(atMs: number): Promise<void> {
  while (Date.now() < atMs) await sleep(atMs - Date.now());
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
