import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { fixed, measuredRun, median, runLine, type MeasuredRun } from './measured_run.js';

// `npm run bench:journal`: the latency the write-ahead journal adds to a batch, with
// group commit. The same load against a fresh server child with the memory store, Redis and
// the file store, in turn, `--rounds` times. Every run edits new document ids (the simulator
// puts a timestamp in them), so nothing in the shared Redis is flushed or overwritten; the
// file store gets a new temporary directory per run, removed afterwards.

const usage = `Usage: npm run bench:journal -- [options]

  --editors N    editors (default 200)
  --docs D       documents they are spread over (default 20)
  --duration S   editing seconds per run (default 40; the first 10-s window is warm-up)
  --rounds N     rounds of the stores (default 3)
  --stores LIST  which stores, in this order, comma-separated (default memory,redis,file)
  --redis URL    Redis to journal to (default redis://127.0.0.1:6379)
  --seed N       seed (default 1)
  --help         show this text
`;

const known = ['memory', 'redis', 'file'] as const;
type StoreName = (typeof known)[number];

/// One measured run against a fresh server child on `store`; the file store gets a new
/// temporary directory, removed afterwards.
async function storeRun(
  store: StoreName,
  round: number,
  redisUrl: string,
  options: Parameters<typeof measuredRun>[2],
): Promise<MeasuredRun> {
  const dir = store === 'file' ? await mkdtemp(join(tmpdir(), 'scriptorium-bench-')) : null;
  // An empty STORE is ignored by the config, so REDIS_URL or DATA_DIR picks the store.
  const env: Record<string, string> =
    store === 'memory'
      ? { STORE: 'memory', REDIS_URL: '' }
      : store === 'redis'
        ? { STORE: '', REDIS_URL: redisUrl }
        : { STORE: '', REDIS_URL: '', DATA_DIR: dir! };
  try {
    return await measuredRun(`${store}, round ${round + 1}`, env, options);
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

/// The results table's row for `store`: medians over its runs.
function tableRow(store: StoreName, list: readonly MeasuredRun[]): string {
  const m = (pick: (run: MeasuredRun) => number | null, digits: number) =>
    fixed(median(list.map(pick)), digits);
  return `| ${store} | ${m((r) => r.confirmedPerSec, 1)} | ${m((r) => r.serverP50Ms, 2)} | ${m(
    (r) => r.serverP99Ms,
    2,
  )} | ${m((r) => r.persistP99Ms, 2)} | ${m((r) => r.clientP50Ms, 1)} | ${m(
    (r) => r.clientP99Ms,
    1,
  )} | ${m((r) => r.cpuMsPer1000, 0)} | ${list
    .map((r) => (r.state === 'steady' && r.converged ? 'ok' : r.state))
    .join(', ')} |`;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      editors: { type: 'string', default: '200' },
      docs: { type: 'string', default: '20' },
      duration: { type: 'string', default: '40' },
      rounds: { type: 'string', default: '3' },
      stores: { type: 'string', default: 'memory,redis,file' },
      redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
      seed: { type: 'string', default: '1' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const [editors, docs, durationSec, rounds, seed] = [
    values.editors,
    values.docs,
    values.duration,
    values.rounds,
    values.seed,
  ].map(Number) as [number, number, number, number, number];
  if (![editors, docs, durationSec, rounds, seed].every((n) => Number.isInteger(n) && n >= 0)) {
    process.stderr.write('bench:journal: numeric options take whole numbers\n');
    return 1;
  }
  const stores = values.stores!.split(',') as StoreName[];
  if (stores.length === 0 || !stores.every((store) => known.includes(store))) {
    process.stderr.write(`bench:journal: --stores takes some of ${known.join(', ')}\n`);
    return 1;
  }
  const runs: Record<StoreName, MeasuredRun[]> = { memory: [], redis: [], file: [] };
  let converged = true;
  for (let round = 0; round < rounds; round++) {
    for (const store of stores) {
      const run = await storeRun(store, round, values.redis!, {
        levels: [editors],
        docs,
        ratePerSec: 5,
        durationSec,
        seed,
      });
      process.stdout.write(`${runLine(run)}\n`);
      converged &&= run.converged;
      runs[store].push(run);
    }
  }
  const rows = stores.map((store) => tableRow(store, runs[store]));
  process.stdout.write(
    [
      '',
      `${editors} editors over ${docs} documents at 5 edits/s, ${durationSec} s per run, ${rounds} rounds of ${stores.join('/')}; medians over runs (server figures: median over steady windows, then over runs).`,
      '',
      '| Store | Confirmed edits/s | Server p50 (ms) | Server p99 (ms) | Persist p99 (ms) | Client p50 (ms) | Client p99 (ms) | Server CPU ms / 1,000 batches | Runs |',
      '| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |',
      ...rows,
      '',
    ].join('\n'),
  );
  return converged ? 0 : 2;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `bench:journal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
