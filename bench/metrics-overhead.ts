import { parseArgs } from 'node:util';
import { fixed, measuredRun, median, runLine, type MeasuredRun } from './measured_run.js';

// `npm run bench:overhead`: what recording metrics costs a loaded server. Each load
// runs against a fresh server child with METRICS=on and METRICS=off, in ABBA order, `--pairs`
// times; the same seed makes every run the same workload. Prints each run and a markdown table
// of medians, with the median of the per-pair off/on ratios. The goal: under 2% throughput
// difference and no visible p99 change.

const usage = `Usage: npm run bench:overhead -- [options]

  --duration S   editing seconds per run (default 40; the first 10-s window is warm-up)
  --pairs N      on/off pairs per load (default 3)
  --seed N       seed (default 1)
  --help         show this text
`;

const loads = [
  { name: '60 editors, 1 doc', editors: 60, docs: 1 },
  { name: '200 editors, 20 docs', editors: 200, docs: 20 },
];

type Load = (typeof loads)[number];

/// `pairs` pairs of runs of `load`, one with METRICS=on and one with METRICS=off each, in ABBA
/// order; logs each run as it ends.
async function measurePairs(
  load: Load,
  pairs: number,
  durationSec: number,
  seed: number,
): Promise<{ on: MeasuredRun[]; off: MeasuredRun[]; allConverged: boolean }> {
  let allConverged = true;
  const on: MeasuredRun[] = [];
  const off: MeasuredRun[] = [];
  for (let pair = 0; pair < pairs; pair++) {
    // ABBA order (on, off, off, on, …): whatever favours the first or the second run of a
    // pair (a cooler machine, the previous child's teardown) falls on both settings alike.
    // With on always first, the order's own effect would read as a cost of metrics.
    const order = pair % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const);
    for (const metrics of order) {
      const run = await measuredRun(
        `${load.name}, METRICS=${metrics}, pair ${pair + 1}`,
        { METRICS: metrics },
        { levels: [load.editors], docs: load.docs, ratePerSec: 5, durationSec, seed },
      );
      process.stdout.write(`${runLine(run)}\n`);
      allConverged &&= run.converged;
      (metrics === 'on' ? on : off).push(run);
    }
  }
  return { on, off, allConverged };
}

/// The table rows of `load`: medians with metrics on and off, then the median of the pairs'
/// on/off ratios.
function loadRows(load: Load, on: readonly MeasuredRun[], off: readonly MeasuredRun[]): string[] {
  const ratio = (pick: (run: MeasuredRun) => number | null) =>
    median(
      on.map((a, i) => {
        const x = pick(a);
        const y = pick(off[i]!);
        return x === null || y === null || y === 0 ? null : x / y;
      }),
    );
  const row = (label: string, runs: readonly MeasuredRun[]) =>
    `| ${load.name} | ${label} | ${fixed(median(runs.map((r) => r.confirmedPerSec)), 1)} | ${fixed(
      median(runs.map((r) => r.clientP50Ms)),
      1,
    )} | ${fixed(median(runs.map((r) => r.clientP99Ms)), 1)} | ${fixed(
      median(runs.map((r) => r.cpuMsPer1000)),
      0,
    )} | ${runs.map((r) => (r.state === 'steady' && r.converged ? 'ok' : r.state)).join(', ')} |`;
  const rows = [row('on', on), row('off', off)];
  const percent = (value: number | null) =>
    value === null ? '–' : `${value >= 1 ? '+' : ''}${((value - 1) * 100).toFixed(1)}%`;
  rows.push(
    `| ${load.name} | on/off, median of pairs | ${percent(
      ratio((r) => r.confirmedPerSec),
    )} | ${percent(ratio((r) => r.clientP50Ms))} | ${percent(
      ratio((r) => r.clientP99Ms),
    )} | ${percent(ratio((r) => r.cpuMsPer1000))} | |`,
  );
  return rows;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      duration: { type: 'string', default: '40' },
      pairs: { type: 'string', default: '3' },
      seed: { type: 'string', default: '1' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const durationSec = Number(values.duration);
  const pairs = Number(values.pairs);
  const seed = Number(values.seed);
  if (![durationSec, pairs, seed].every((n) => Number.isInteger(n) && n >= 0) || pairs < 1) {
    process.stderr.write(`bench:overhead: --duration, --pairs and --seed take whole numbers\n`);
    return 1;
  }
  const rows: string[] = [];
  let converged = true;
  for (const load of loads) {
    const { on, off, allConverged } = await measurePairs(load, pairs, durationSec, seed);
    converged &&= allConverged;
    rows.push(...loadRows(load, on, off));
  }
  process.stdout.write(
    [
      '',
      `${pairs} pairs per load, ${durationSec} s each, first window left out; medians over runs.`,
      '',
      '| Load | METRICS | Confirmed edits/s | Client p50 (ms) | Client p99 (ms) | Server CPU ms / 1,000 batches | Runs |',
      '| :--- | :--- | ---: | ---: | ---: | ---: | :--- |',
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
      `bench:overhead: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
