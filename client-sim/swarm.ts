import { cpus, platform, release } from 'node:os';
import type { DocJSON } from '../schema/protocol.js';
import { validateOptions, workersFor, type SwarmOptions } from './options.js';
import { Random } from './random.js';
import { fetchDocument, fetchServerWindows, probeServer } from './server_http.js';
import type { EditorCheck, SliceEditorSpec, SlicePlan } from './slice.js';
import {
  addInto,
  mergeHistograms,
  mergeWindows,
  summarise,
  type LatencySummary,
  type ServerSteady,
  type SteadySummary,
  type SwarmWindow,
} from './level_windows.js';
import { SliceHandle } from './slice_handle.js';
import type { SliceTotals, SliceWindow } from './window_recorder.js';

export type { LatencySummary, ServerSteady, SteadySummary, SwarmWindow };

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

/// Runs level `index`: connects its sockets, lets them edit for the duration, drains and checks
/// them, then merges their windows with the server's. Throws when sockets cannot join.
async function runLevel(
  options: Readonly<SwarmOptions>,
  index: number,
  tag: string,
  onProgress: (progress: SwarmProgress) => void,
): Promise<{ level: LevelResult; metrics: boolean }> {
  const editors = options.levels[index]!;
  const { docIds, specs, offeredPerSec } = levelSpecs(options, index, tag);
  const workers = workersFor(specs.length, options.workers);
  const handles = plan(options, specs, workers).map((slicePlan) =>
    workers === 0 ? SliceHandle.local(slicePlan) : SliceHandle.worker(slicePlan),
  );
  const collected: SliceWindow[] = [];
  const progress = progressReporter(handles, collected, options, index, onProgress);
  const run = await driveLevel(handles, options, specs.length, docIds, progress);

  const spanMs = Date.now() - run.startedAtMs;
  const serverWindows = await fetchServerWindows(
    options.url,
    Math.min(360, Math.ceil(spanMs / 10_000) + 6),
  );
  const windows = mergeWindows(collected, options, run.startedAtMs, run.stoppedAtMs, serverWindows);
  const levelTotals = totalsOf(run.totals, windows);
  const steady = summarise(windows, collected, options, offeredPerSec);
  const convergence = convergenceOf(run.checks);
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
    startedAtMs: run.startedAtMs,
    stoppedAtMs: run.stoppedAtMs,
    windows,
    steady,
    totals: levelTotals,
    windowsAddUp: windowsAddUp(windows, levelTotals),
    undrained: run.undrained,
    convergence,
    state: levelState(convergence, steady, options.windowMs),
  };
  return { level, metrics: serverWindows !== null };
}

/// The sockets of level `index`: `levels[index]` editors dealt over fresh documents, the
/// first `fullPerDoc` of each document full editors, each with a rate drawn within ±20% of
/// `ratePerSec`, then the observers. `offeredPerSec` is the sum of the drawn rates.
function levelSpecs(
  options: Readonly<SwarmOptions>,
  index: number,
  tag: string,
): { docIds: string[]; specs: SliceEditorSpec[]; offeredPerSec: number } {
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
  return { docIds, specs, offeredPerSec };
}

type Progress = (phase: SwarmProgress['phase'], elapsedSec: number) => void;

/// Collects every window the slices send into `collected`, and returns a function that
/// reports a phase to `onProgress` with the rates of the last window all slices closed.
function progressReporter(
  handles: readonly SliceHandle[],
  collected: SliceWindow[],
  options: Readonly<SwarmOptions>,
  index: number,
  onProgress: (progress: SwarmProgress) => void,
): Progress {
  let lastWindow: { startMs: number; windows: SliceWindow[] } | null = null;
  for (const handle of handles) {
    handle.onWindow((window) => {
      collected.push(window);
      if (!lastWindow || window.startMs > lastWindow.startMs) {
        lastWindow = { startMs: window.startMs, windows: [window] };
      } else if (window.startMs === lastWindow.startMs) lastWindow.windows.push(window);
    });
  }
  return (phase, elapsedSec) => {
    const last = lastWindow as { windows: SliceWindow[] } | null;
    const merged = last ? mergeHistograms(last.windows) : null;
    const edits = last ? last.windows.reduce((sum, w) => sum + w.edits, 0) : 0;
    onProgress({
      level: index + 1,
      levels: options.levels.length,
      editors: options.levels[index]!,
      phase,
      elapsedSec,
      durationSec: options.durationSec,
      editsPerSec: last ? edits / (options.windowMs / 1000) : null,
      p99Ms: merged && merged.count > 0 ? merged.percentile(99) / 1000 : null,
    });
  };
}

/// What the slices answered over one level.
interface LevelRun {
  checks: EditorCheck[];
  totals: SliceTotals[];
  undrained: number;
  startedAtMs: number;
  stoppedAtMs: number;
}

/// Takes the slices through a level: connect, start at a common time, stop after the
/// duration and drain, check every document against the server's settled one, and close them
/// whatever happened. Throws when any socket cannot join.
async function driveLevel(
  handles: readonly SliceHandle[],
  options: Readonly<SwarmOptions>,
  sockets: number,
  docIds: readonly string[],
  progress: Progress,
): Promise<LevelRun> {
  const run: LevelRun = { checks: [], totals: [], undrained: 0, startedAtMs: 0, stoppedAtMs: 0 };
  try {
    progress('connecting', 0);
    const connectTimeoutMs = 30_000 + sockets * 20;
    for (const handle of handles) handle.send({ type: 'connect', timeoutMs: connectTimeoutMs });
    const connected = await Promise.all(handles.map((handle) => handle.reply('connected')));
    const failures = connected.flatMap((answer) => answer.failures);
    if (failures.length > 0) {
      throw new Error(
        `${failures.length} of ${sockets} sockets could not join: ${failures
          .slice(0, 3)
          .join('; ')}`,
      );
    }
    run.startedAtMs = startTime(options);
    for (const handle of handles) handle.send({ type: 'start', atMs: run.startedAtMs });
    run.stoppedAtMs = run.startedAtMs + options.durationSec * 1000;
    const ticker = setInterval(
      () => progress('editing', Math.max(0, (Date.now() - run.startedAtMs) / 1000)),
      1000,
    );
    await sleepUntil(run.stoppedAtMs);
    clearInterval(ticker);
    progress('draining', options.durationSec);
    for (const handle of handles) handle.send({ type: 'stop', drainTimeoutMs: 15_000 });
    const stopped = await Promise.all(handles.map((handle) => handle.reply('stopped')));
    run.totals = stopped.map((answer) => answer.totals);
    run.undrained = stopped.reduce((sum, answer) => sum + answer.undrained, 0);
    progress('checking', options.durationSec);
    const docs = await settledDocuments(options.url, docIds, run.undrained > 0 ? 20_000 : 0);
    for (const handle of handles) handle.send({ type: 'check', docs, timeoutMs: 20_000 });
    for (const answer of await Promise.all(handles.map((handle) => handle.reply('checked')))) {
      run.checks.push(...answer.checks);
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
  return run;
}

/// The slices' running totals summed, with the refusals by code summed over `windows`.
function totalsOf(totals: readonly SliceTotals[], windows: readonly SwarmWindow[]) {
  const sum = (pick: (t: SliceTotals) => number) => totals.reduce((s, t) => s + pick(t), 0);
  const refusalsByCode: Record<string, number> = {};
  for (const window of windows) addInto(refusalsByCode, window.refusals);
  return {
    edits: sum((t) => t.edits),
    sends: sum((t) => t.sends),
    confirmed: sum((t) => t.confirmed),
    dropped: sum((t) => t.dropped),
    refusals: sum((t) => t.refusals),
    reconnects: sum((t) => t.reconnects),
    refusalsByCode,
  };
}

/// Whether the windows' edits, sends, confirmations and drops sum to the slices' totals.
function windowsAddUp(windows: readonly SwarmWindow[], totals: SliceTotals): boolean {
  const windowSum = (pick: (w: SwarmWindow) => number) => windows.reduce((s, w) => s + pick(w), 0);
  return (
    windowSum((w) => w.edits) === totals.edits &&
    windowSum((w) => w.sends) === totals.sends &&
    windowSum((w) => w.confirmed) === totals.confirmed &&
    windowSum((w) => w.dropped) === totals.dropped
  );
}

/// The level's state from its checks and steady figures, as `LevelState` describes.
function levelState(
  convergence: Convergence,
  steady: Readonly<SteadySummary>,
  windowMs: number,
): LevelState {
  if (convergence.failures.length > 0) return 'diverged';
  if (steady.windows === 0) return 'too-short';
  if (generatorLimited(steady, windowMs)) return 'generator-limited';
  const keptUp = steady.confirmedPerSec >= 0.9 * steady.editsPerSec;
  const fast = steady.latency === null || steady.latency.p99Ms <= 1000;
  return keptUp && fast ? 'steady' : 'overloaded';
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
