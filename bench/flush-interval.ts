import { parseArgs } from 'node:util';
import { parseEnvPairs } from '../client-sim/server_process.js';
import { fixed, measuredRun, median, type MeasuredRun } from './measured_run.js';

// `npm run bench:flush`: what the flush interval (FLUSH_INTERVAL_MS) does to a loaded server.
// For each editor count, one run per interval against a fresh server child (memory store),
// the intervals in a rotated order each round so that drift on the shared machine falls on all
// of them; the same seed per round makes the runs the same workload. The CPU figures are read by
// the server process itself (`client-sim/cpu_probe.ts`) over the steady windows:
// - CPU per edit: server CPU / edits confirmed to their authors;
// - CPU per delivery: server CPU / (accepted steps × editors of the document): every step
//   reaches every editor, so this bounds from above what the fan-out costs per delivered step
//   and recipient (it includes receiving, applying and acknowledging too);
// - broadcast frames per edit: `steps` broadcasts the simulated sockets received / edits
//   confirmed. With several intervals, CPU per edit is fitted to a line in it (least squares
//   over every run of an editor count): the slope is what one more frame costs, the intercept
//   what an edit costs with no broadcast frame at all (receiving, applying, acknowledging),
//   i.e. the floor no flush interval goes below.

const usage = `Usage: npm run bench:flush -- [options]

  --editors A,B,...    editor counts (default 30,60)
  --docs D             documents the editors are spread over (default 1)
  --intervals A,B,...  FLUSH_INTERVAL_MS values (default 0,10,20), held whatever the load
                       (FLUSH_BUSY_PERCENT=0 unless --env sets it); add
                       --env FLUSH_US_PER_SOCKET=1000000 for intervals the room size would
                       otherwise shorten (the interval is min(FLUSH_INTERVAL_MS, editors x that))
  --rounds N           rounds (default 2)
  --duration S         editing seconds per run; the first 10-s window is warm-up (default 40)
  --rtt MS             added round trip in the simulator (default 0)
  --seed N             seed (default 1)
  --env KEY=VALUE      extra server environment (repeatable)
`;

interface Row {
  editors: number;
  interval: number;
  run: MeasuredRun;
}

/// The run's settings from the command line.
interface Settings {
  editorCounts: number[];
  intervals: number[];
  docs: number;
  rounds: number;
  duration: number;
  rtt: number;
  seed: number;
  env: Record<string, string>;
}

/// The settings from the command line; null when `--help` was asked (usage printed). Throws
/// for a value out of range.
function parseOptions(): Settings | null {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      editors: { type: 'string', default: '30,60' },
      docs: { type: 'string', default: '1' },
      intervals: { type: 'string', default: '0,10,20' },
      rounds: { type: 'string', default: '2' },
      duration: { type: 'string', default: '40' },
      rtt: { type: 'string', default: '0' },
      seed: { type: 'string', default: '1' },
      env: { type: 'string', multiple: true, default: [] },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return null;
  }
  const list = (name: string, text: string, min: number) =>
    text.split(',').map((part) => {
      const value = Number(part);
      if (!Number.isInteger(value) || value < min) {
        throw new Error(`--${name} takes integers of at least ${min}, got "${part}"`);
      }
      return value;
    });
  const editorCounts = list('editors', values.editors, 1);
  const intervals = list('intervals', values.intervals, 0);
  const [docs] = list('docs', values.docs, 1);
  const [rounds] = list('rounds', values.rounds, 1);
  const [duration] = list('duration', values.duration, 20);
  const [rtt] = list('rtt', values.rtt, 0);
  const [seed] = list('seed', values.seed, 0);
  const env = parseEnvPairs(values.env, '--env');

  return {
    editorCounts,
    intervals,
    docs: docs!,
    rounds: rounds!,
    duration: duration!,
    rtt: rtt!,
    seed: seed!,
    env,
  };
}

/// Every run, editor count by editor count, each round with the intervals rotated; logs a
/// line per run as it ends.
async function runAll(settings: Settings): Promise<Row[]> {
  const { editorCounts, intervals, docs, rounds, duration, rtt, seed, env } = settings;
  const rows: Row[] = [];
  for (const editors of editorCounts) {
    for (let round = 0; round < rounds; round++) {
      // Rotate the order each round: 0,10,20 then 10,20,0 then 20,0,10 ...
      const order = intervals.map((_, i) => intervals[(i + round) % intervals.length]!);
      for (const interval of order) {
        const run = await measuredRun(
          `${editors} editors, FLUSH_INTERVAL_MS=${interval}, round ${round + 1}`,
          // The fixed hold this benchmark compares, not the flush policy's choice.
          { FLUSH_BUSY_PERCENT: '0', ...env, FLUSH_INTERVAL_MS: String(interval) },
          {
            levels: [editors],
            docs,
            ratePerSec: 5,
            durationSec: duration,
            warmupWindows: 1,
            rttMs: rtt,
            seed: seed + round,
          },
        );
        rows.push({ editors, interval, run });
        console.log(
          `${run.label}: ${fixed(perEdit(run), 0)} µs/edit, ${fixed(
            perDelivery(run, editors / docs),
            2,
          )} µs/delivery, ${fixed(framesPerEdit(run), 2)} frames/edit, ${fixed(
            run.confirmedEdits / run.steadySec,
            1,
          )} edits/s, client p50/p99 ${fixed(
            run.clientP50Ms,
            1,
          )}/${fixed(run.clientP99Ms, 1)} ms, server p99 ${fixed(run.serverP99Ms, 2)} ms, refused ${(
            run.refusalShare * 100
          ).toFixed(2)}%, ${run.state}, ${run.converged ? 'converged' : 'DIVERGED'}`,
        );
      }
    }
  }
  return rows;
}

/// The table of medians over the rounds, one row per editor count and interval.
function printTable(rows: readonly Row[], settings: Settings): void {
  const { editorCounts, intervals, docs } = settings;
  console.log('');
  console.log(
    '| Editors | FLUSH_INTERVAL_MS | CPU per edit | CPU per delivery | Broadcast frames per edit | Edits/s | Client p50 | Client p99 | Refused |',
  );
  console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const editors of editorCounts) {
    for (const interval of intervals) {
      const runs = rows
        .filter((row) => row.editors === editors && row.interval === interval)
        .map((row) => row.run);
      const med = (pick: (run: MeasuredRun) => number | null) => median(runs.map(pick));
      console.log(
        `| ${editors} | ${interval} | ${fixed(med(perEdit), 0)} µs | ${fixed(
          med((run) => perDelivery(run, editors / docs)),
          2,
        )} µs | ${fixed(med(framesPerEdit), 2)} | ${fixed(
          med((run) => run.confirmedEdits / run.steadySec),
          0,
        )} | ${fixed(
          med((run) => run.clientP50Ms),
          1,
        )} ms | ${fixed(
          med((run) => run.clientP99Ms),
          1,
        )} ms | ${fixed(
          med((run) => run.refusalShare * 100),
          2,
        )}% |`,
      );
    }
  }
}

/// Per editor count, CPU per edit fitted to a line in broadcast frames per edit.
function printFits(rows: readonly Row[], editorCounts: readonly number[]): void {
  for (const editors of editorCounts) {
    const points = rows
      .filter((row) => row.editors === editors)
      .map((row) => [framesPerEdit(row.run), perEdit(row.run)] as const)
      .filter(
        (point): point is readonly [number, number] => point[0] !== null && point[1] !== null,
      );
    const line = fitLine(points);
    if (line) {
      console.log('');
      console.log(
        `${editors} editors, least squares over ${points.length} runs: CPU per edit ≈ ${fixed(
          line.intercept,
          0,
        )} µs + ${fixed(line.slope, 2)} µs × broadcast frames per edit (r² ${fixed(line.r2, 3)})`,
      );
    }
  }
}

async function main(): Promise<number> {
  const settings = parseOptions();
  if (!settings) return 0;
  const rows = await runAll(settings);
  printTable(rows, settings);
  printFits(rows, settings.editorCounts);
  return rows.some((row) => !row.run.converged) ? 1 : 0;
}

/// The least-squares line through `points` (x, y), or null when the x values do not spread
/// (one interval, or intervals the room size made equal).
function fitLine(
  points: readonly (readonly [number, number])[],
): { slope: number; intercept: number; r2: number } | null {
  const n = points.length;
  if (n < 3) return null;
  let sx = 0;
  let sy = 0;
  for (const [x, y] of points) {
    sx += x;
    sy += y;
  }
  const mx = sx / n;
  const my = sy / n;
  let sxx = 0;
  let sxy = 0;
  let syy = 0;
  for (const [x, y] of points) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
    syy += (y - my) * (y - my);
  }
  if (sxx < 1e-9 * n) return null;
  const slope = sxy / sxx;
  return { slope, intercept: my - slope * mx, r2: syy === 0 ? 1 : (sxy * sxy) / (sxx * syy) };
}

function framesPerEdit(run: MeasuredRun): number | null {
  return run.confirmedEdits === 0 ? null : run.broadcasts / run.confirmedEdits;
}

function perEdit(run: MeasuredRun): number | null {
  return run.cpuMs === null || run.confirmedEdits === 0
    ? null
    : (run.cpuMs * 1000) / run.confirmedEdits;
}

function perDelivery(run: MeasuredRun, recipients: number): number | null {
  return run.cpuMs === null || run.acceptedSteps === 0
    ? null
    : (run.cpuMs * 1000) / (run.acceptedSteps * recipients);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  },
);
