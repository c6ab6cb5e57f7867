import { createHistogram } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { workersFor } from '../../client-sim/options.js';
import { Random } from '../../client-sim/random.js';
import {
  callSlice,
  YjsSlice,
  type SliceCall,
  type YjsSliceOptions,
  type YjsSliceReport,
} from './yjs_slice.js';

/// How the Yjs swarm of `npm run bench:peers` runs: the same shape of load as the simulator's
/// against Scriptorium (one document, each editor typing at its own pace around `ratePerSec`),
/// on as many worker threads as the simulator takes for as many editors (`workersFor`: none up
/// to 50, two at 60).
export interface YjsSwarmOptions {
  /// The Hocuspocus server's websocket URL, `ws://127.0.0.1:PORT`.
  url: string;
  editors: number;
  docName: string;
  ratePerSec: number;
  /// Editing time, warm-up included.
  durationSec: number;
  /// Editing time at the start left out of the figures.
  warmupSec: number;
  seed: number;
}

/// The figures of one run over its steady span (after the warm-up, to the end of editing).
export interface YjsSwarmResult {
  /// The steady span, wall clock (ms since the epoch), for reading the server's CPU over it.
  steadyFromMs: number;
  steadyToMs: number;
  /// Worker threads the editors ran on (0: this thread).
  workers: number;
  editsMade: number;
  /// Edits the server acknowledged (its SyncStatus message) within the span.
  acknowledged: number;
  /// Edit (from when it was due) to its arrival at another editor of its slice, over the span:
  /// the same moment as Scriptorium's edit-to-confirm, when the broadcast lands.
  p50Ms: number | null;
  p99Ms: number | null;
  /// Edit (from when it was due) to the server's acknowledgement (its SyncStatus message).
  ackP50Ms: number | null;
  ackP99Ms: number | null;
  /// Every editor's document reads the same once all acknowledgements are in.
  converged: boolean;
}

/// The coordinator's end of a slice: `call` runs a `YjsSlice` method here or in its worker.
interface SliceEnd {
  call(method: SliceCall['method'], arg?: unknown): Promise<unknown>;
  end(): Promise<void>;
}

function localSlice(options: YjsSliceOptions): SliceEnd {
  const slice = new YjsSlice(options);
  return {
    call: async (method, arg) => callSlice(slice, method, arg),
    end: async () => {},
  };
}

function workerSlice(options: YjsSliceOptions): SliceEnd {
  const worker = new Worker(new URL('./yjs_worker.js', import.meta.url), { workerData: options });
  const waiting = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (err: Error) => void }
  >();
  let next = 0;
  const failAll = (err: Error) => {
    for (const { reject } of waiting.values()) reject(err);
    waiting.clear();
  };
  worker.on('message', (message: { id: number; value?: unknown; error?: string }) => {
    const waiter = waiting.get(message.id);
    if (!waiter) return;
    waiting.delete(message.id);
    if (message.error !== undefined) waiter.reject(new Error(message.error));
    else waiter.resolve(message.value);
  });
  worker.on('error', failAll);
  worker.on('exit', (code) => failAll(new Error(`a Yjs swarm worker exited with code ${code}`)));
  return {
    call: (method, arg) =>
      new Promise((resolve, reject) => {
        const id = next++;
        waiting.set(id, { resolve, reject });
        worker.postMessage({ id, method, arg } satisfies SliceCall);
      }),
    end: async () => {
      await worker.terminate();
    },
  };
}

/// Connects `editors` Yjs editors to one Hocuspocus document, seeds it, lets every editor type
/// for `durationSec`, waits up to 15 s for the acknowledgements still due and compares the
/// editors' documents. Throws when the editors cannot connect and sync within 30 s.
export async function runYjsSwarm(options: YjsSwarmOptions): Promise<YjsSwarmResult> {
  const seedRandom = new Random(options.seed);
  const seeds = Array.from({ length: options.editors }, () => seedRandom.int(1, 2 ** 31));
  const workers = workersFor(options.editors, 'auto');
  const shares = Math.max(1, workers);
  const slices: SliceEnd[] = [];
  for (let i = 0; i < shares; i++) {
    const sliceOptions: YjsSliceOptions = {
      url: options.url,
      docName: options.docName,
      ratePerSec: options.ratePerSec,
      seeds: seeds.filter((_, editor) => editor % shares === i),
    };
    slices.push(workers === 0 ? localSlice(sliceOptions) : workerSlice(sliceOptions));
  }
  const all = (method: SliceCall['method'], arg?: unknown) =>
    Promise.all(slices.map((slice) => slice.call(method, arg)));
  try {
    await withTimeout(all('synced'), 30_000, 'editors synced');
    await slices[0]!.call('seed', 20);
    await sleep(1000);
    await all('start');
    await sleep(options.warmupSec * 1000);
    await all('count', true);
    const steadyFromMs = Date.now();
    await sleep((options.durationSec - options.warmupSec) * 1000);
    await all('count', false);
    const steadyToMs = Date.now();
    await all('stop');
    await all('drain', 15_000);
    const reports = (await all('report')) as YjsSliceReport[];

    const latencyUs = createHistogram();
    const ackUs = createHistogram();
    for (const report of reports) {
      for (const us of report.latencyUs) latencyUs.record(us);
      for (const us of report.ackUs) ackUs.record(us);
    }
    const texts = reports.flatMap((report) => report.texts);
    return {
      steadyFromMs,
      steadyToMs,
      workers,
      editsMade: reports.reduce((sum, report) => sum + report.editsMade, 0),
      acknowledged: reports.reduce((sum, report) => sum + report.acknowledged, 0),
      p50Ms: latencyUs.count === 0 ? null : latencyUs.percentile(50) / 1000,
      p99Ms: latencyUs.count === 0 ? null : latencyUs.percentile(99) / 1000,
      ackP50Ms: ackUs.count === 0 ? null : ackUs.percentile(50) / 1000,
      ackP99Ms: ackUs.count === 0 ? null : ackUs.percentile(99) / 1000,
      converged: texts.every((text) => text === texts[0]),
    };
  } finally {
    await Promise.allSettled(slices.map((slice) => slice.call('close')));
    await Promise.allSettled(slices.map((slice) => slice.end()));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
