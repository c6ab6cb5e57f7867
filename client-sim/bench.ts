import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { latencyChart } from './chart.js';
import type { SwarmOptions } from './options.js';
import { progressLine, runDescription, summaryTable } from './report.js';
import { parseEnvPairs, serverEntry, startServerProcess } from './server_process.js';
import { runSwarm, type SwarmResult } from './swarm.js';

// `npm run bench`: the reference method (with the default server and with MAX_REBASE_STEPS=0,
// the strict rule of prosemirror-collab's reference design) and the scale runs, each against a
// fresh server child process on loopback with the memory store, then bench-results/*.json, the
// charts, and the tables of BENCHMARKS.md between its markers. Exit codes as for the simulator.

const usage = `Usage: npm run bench -- [options]

  --duration S       editing seconds per level (default 60; the reference method uses 60)
  --scale-duration S editing seconds per level of the single, single-rtt50 and many runs
                     (default: --duration)
  --warmup W         windows excluded at the start of each level (default 1)
  --many-editors N   editors of the many-documents run (default 1000)
  --many-docs D      documents of the many-documents run (default 100)
  --only LIST        runs to make, of reference,reference-strict,single,single-rtt50,many
                     (default all)
  --server-env K=V   extra environment for every server child, repeatable (after each run's
                     own, e.g. MAX_REBASE_STEPS=0 for reference-strict); K must be a setting
                     the server reads (docs/configuration.md) or NODE_OPTIONS and the like
  --seed N           seed (default 1)
  --help             show this text
`;

interface BenchRun {
  name: string;
  title: string;
  options: Partial<SwarmOptions>;
  /// The run's own server environment, under `--server-env`.
  serverEnv: Record<string, string>;
}

const root = fileURLToPath(new URL('../../', import.meta.url));
const startMarker = '<!-- bench:start -->';
const endMarker = '<!-- bench:end -->';

/// The bench's settings from the command line.
interface BenchSettings {
  durationSec: number;
  scaleDurationSec: number;
  warmupWindows: number;
  manyEditors: number;
  manyDocs: number;
  seed: number;
  extraEnv: Record<string, string>;
  /// The runs `--only` names; undefined for all.
  only: string[] | undefined;
}

/// The settings from the command line, or the exit code when it asks for help (0, usage
/// printed) or is wrong (1, the reason on stderr).
function parseSettings(): BenchSettings | number {
  let values;
  try {
    values = parseArgs({
      args: process.argv.slice(2),
      strict: true,
      options: {
        duration: { type: 'string' },
        'scale-duration': { type: 'string' },
        'server-env': { type: 'string', multiple: true },
        warmup: { type: 'string' },
        'many-editors': { type: 'string' },
        'many-docs': { type: 'string' },
        only: { type: 'string' },
        seed: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n${usage}`);
    return 1;
  }
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const number = (name: string, raw: string | undefined, fallback: number, min: number) => {
    if (raw === undefined) return fallback;
    if (!/^\d+$/.test(raw) || Number(raw) < min) {
      throw new Error(`--${name} must be a whole number ≥ ${min}, got "${raw}"`);
    }
    return Number(raw);
  };
  try {
    const durationSec = number('duration', values.duration, 60, 1);
    return {
      durationSec,
      scaleDurationSec: number('scale-duration', values['scale-duration'], durationSec, 1),
      extraEnv: parseEnvPairs(values['server-env'] ?? []),
      warmupWindows: number('warmup', values.warmup, 1, 0),
      manyEditors: number('many-editors', values['many-editors'], 1000, 1),
      manyDocs: number('many-docs', values['many-docs'], 100, 1),
      seed: number('seed', values.seed, 1, 0),
      only: values.only?.split(',').map((name) => name.trim()),
    };
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n`);
    return 1;
  }
}

/// The runs, in the order they are made.
function benchRuns(settings: BenchSettings): BenchRun[] {
  const { durationSec, scaleDurationSec, warmupWindows, seed, manyEditors, manyDocs } = settings;
  const common = { durationSec, warmupWindows, seed, ratePerSec: 5 };
  const scale = { ...common, durationSec: scaleDurationSec };
  const referenceLevels = [10, 15, 20, 25, 30];
  return [
    {
      name: 'reference',
      title: 'Reference method: one document, 10–30 editors at 4–6 edits/s',
      options: { ...common, docs: 1, levels: referenceLevels },
      serverEnv: {},
    },
    {
      // The published reference server refuses every batch made at an old version; ours
      // rebases up to MAX_REBASE_STEPS steps, and 0 restores the strict rule.
      name: 'reference-strict',
      title: 'Reference method, strict (MAX_REBASE_STEPS=0: no server-side rebase)',
      options: { ...common, docs: 1, levels: referenceLevels },
      serverEnv: { MAX_REBASE_STEPS: '0' },
    },
    {
      name: 'single',
      title: 'One document, 50–200 editors, no added latency',
      options: { ...scale, docs: 1, levels: [50, 100, 200] },
      serverEnv: {},
    },
    {
      name: 'single-rtt50',
      title: 'One document, 50–200 editors, 50 ms round trip',
      options: { ...scale, docs: 1, levels: [50, 100, 200], rttMs: 50 },
      serverEnv: {},
    },
    {
      name: 'many',
      title: `Many documents: ${manyEditors} editors over ${manyDocs} documents`,
      options: { ...scale, docs: manyDocs, levels: [manyEditors] },
      serverEnv: {},
    },
  ];
}

/// Makes one run against a fresh server child, prints its tables, and writes its JSON and
/// chart into `outDir`.
async function makeRun(
  run: BenchRun,
  extraEnv: Record<string, string>,
  outDir: string,
): Promise<SwarmResult> {
  process.stdout.write(`\n== ${run.title}\n`);
  const server = await startServerProcess({ ...run.serverEnv, ...extraEnv });
  let result: SwarmResult;
  try {
    result = await runSwarm({ ...run.options, url: server.url }, (progress) => {
      if (process.stdout.isTTY) process.stdout.write(`\r${progressLine(progress)}\x1b[K`);
    });
  } finally {
    if (process.stdout.isTTY) process.stdout.write('\n');
    await server.stop();
  }
  process.stdout.write(`${summaryTable(result)}\n\n${runDescription(result)}\n`);
  await writeFile(`${outDir}/${run.name}.json`, JSON.stringify(result, null, 2) + '\n');
  await writeFile(`${outDir}/${chartFile(run)}`, latencyChart(result.levels, run.title));
  return result;
}

async function main(): Promise<number> {
  const settings = parseSettings();
  if (typeof settings === 'number') return settings;
  if (!existsSync(serverEntry)) {
    process.stderr.write(
      `bench: ${serverEntry} does not exist: the server's entry point (server/main.ts) must be built first\n`,
    );
    return 1;
  }
  const runs = benchRuns(settings);
  const only = settings.only;
  const unknown = only?.filter((name) => !runs.some((run) => run.name === name)) ?? [];
  if (unknown.length > 0) {
    process.stderr.write(`bench: unknown run(s) ${unknown.join(', ')}\n`);
    return 1;
  }
  const selected = runs.filter((run) => !only || only.includes(run.name));
  const outDir = `${root}bench-results`;
  await mkdir(outDir, { recursive: true });
  const results: { run: BenchRun; result: SwarmResult }[] = [];
  let converged = true;
  for (const run of selected) {
    const result = await makeRun(run, settings.extraEnv, outDir);
    converged &&= result.converged;
    results.push({ run, result });
  }
  await updateBenchmarks(results, process.argv.slice(2), settings.extraEnv);
  return converged ? 0 : 2;
}

/// The chart's file name in bench-results/, which BENCHMARKS.md links to.
function chartFile(run: BenchRun): string {
  return `${run.name === 'reference' ? 'chart' : `chart-${run.name}`}.svg`;
}

/// Rewrites the part of BENCHMARKS.md between the bench markers (creating the file, or
/// appending the markers, when they are missing) with this run's command, machine and tables:
/// per run its server environment, duration, table and chart, and, when both reference runs
/// were made, the two side by side.
async function updateBenchmarks(
  results: { run: BenchRun; result: SwarmResult }[],
  args: string[],
  extraEnv: Record<string, string>,
): Promise<void> {
  if (results.length === 0) return;
  const file = `${root}BENCHMARKS.md`;
  const machine = results[0]!.result.machine;
  const lines = [
    startMarker,
    '',
    `Generated by \`npm run bench${args.length ? ` -- ${args.join(' ')}` : ''}\` on ${new Date().toISOString()}.`,
    `Machine: ${machine.cpus} × ${machine.cpuModel}; Node ${machine.node}; ${machine.os}. Server: \`node dist/server/main.js\`, STORE=memory, on loopback in the same machine as the simulator.`,
    '',
    'Server columns are the server’s own steady windows (accepted batches per second; the median over windows of its p90/p99 per message). Client columns are edit-to-confirm: from the moment a simulated person was due to make the edit (by their schedule, so that a busy simulator’s own lateness counts) to the broadcast that confirmed it, with every refusal and resend in between, percentiles of the merged histograms of the steady windows. “Refused” is the share of `steps` messages refused (almost all `stale`).',
    '',
  ];
  for (const { run, result } of results) {
    const env = Object.entries({ STORE: 'memory', ...run.serverEnv, ...extraEnv })
      .map(([key, value]) => `${key}=${value}`)
      .join(' ');
    lines.push(
      `### ${run.title}`,
      '',
      `Server env: \`${env}\`; ${result.options.durationSec} s per level, ${result.options.warmupWindows} warm-up window(s) left out, rate ${result.options.ratePerSec} edits/s per editor, seed ${result.options.seed}. Chart: [bench-results/${chartFile(run)}](bench-results/${chartFile(run)}).`,
      '',
      summaryTable(result),
      '',
      `![${run.title}](bench-results/${chartFile(run)})`,
      '',
      runDescription(result),
      '',
    );
  }
  const loose = results.find(({ run }) => run.name === 'reference')?.result;
  const strict = results.find(({ run }) => run.name === 'reference-strict')?.result;
  if (loose && strict) lines.push(rebaseTable(loose, strict), '');
  lines.push(endMarker);
  const section = lines.join('\n');
  let text = existsSync(file)
    ? await readFile(file, 'utf8')
    : '# Benchmarks\n\nResults of `npm run bench` (client-sim/bench.ts).\n\n';
  const start = text.indexOf(startMarker);
  const end = text.indexOf(endMarker);
  if (start >= 0 && end > start) {
    text = text.slice(0, start) + section + text.slice(end + endMarker.length);
  } else {
    text = text.replace(/\n*$/, '\n\n') + section + '\n';
  }
  await writeFile(file, text);
}

/// The two reference runs side by side, level by level: default server / MAX_REBASE_STEPS=0.
function rebaseTable(loose: SwarmResult, strict: SwarmResult): string {
  const cell = (a: number | null | undefined, b: number | null | undefined, digits: number) =>
    `${a == null ? '–' : a.toFixed(digits)} / ${b == null ? '–' : b.toFixed(digits)}`;
  const rows = [
    '### Server-side rebasing: default / strict (MAX_REBASE_STEPS=0)',
    '',
    '| Editors | Steady RPS | Server p90 (ms) | Server p99 (ms) | Confirmed edits/s | Client p90 (ms) | Client p99 (ms) | Refused | State |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |',
  ];
  for (const a of loose.levels) {
    const b = strict.levels.find((level) => level.editors === a.editors);
    if (!b) continue;
    rows.push(
      `| ${a.editors} | ${cell(a.steady.server?.acceptedPerSec, b.steady.server?.acceptedPerSec, 1)} | ${cell(
        a.steady.server?.p90Ms,
        b.steady.server?.p90Ms,
        2,
      )} | ${cell(a.steady.server?.p99Ms, b.steady.server?.p99Ms, 2)} | ${cell(
        a.steady.confirmedPerSec,
        b.steady.confirmedPerSec,
        1,
      )} | ${cell(a.steady.latency?.p90Ms, b.steady.latency?.p90Ms, 1)} | ${cell(
        a.steady.latency?.p99Ms,
        b.steady.latency?.p99Ms,
        1,
      )} | ${cell(a.steady.refusalShare * 100, b.steady.refusalShare * 100, 1)} % | ${a.state} / ${b.state} |`,
    );
  }
  return rows.join('\n');
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
