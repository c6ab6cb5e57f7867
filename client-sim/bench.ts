import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { latencyChart } from './chart.js';
import type { SwarmOptions } from './options.js';
import { progressLine, runDescription, summaryTable } from './report.js';
import { probeServer } from './server_http.js';
import { runSwarm, type SwarmResult } from './swarm.js';

// `npm run bench`: the reference method and the scale runs, each against a fresh server child
// process on loopback with the memory store, then bench-results/*.json, the charts, and the
// tables of BENCHMARKS.md between its markers. Exit codes as for the simulator.

const usage = `Usage: npm run bench -- [options]

  --duration S       editing seconds per level (default 60; the reference method uses 60)
  --warmup W         windows excluded at the start of each level (default 1)
  --many-editors N   editors of the many-documents run (default 1000)
  --many-docs D      documents of the many-documents run (default 100)
  --only LIST        runs to make, of reference,single,single-rtt50,many (default all)
  --seed N           seed (default 1)
  --help             show this text
`;

interface BenchRun {
  name: string;
  title: string;
  options: Partial<SwarmOptions>;
}

const root = fileURLToPath(new URL('../../', import.meta.url));
const serverEntry = fileURLToPath(new URL('../server/main.js', import.meta.url));
const startMarker = '<!-- bench:start -->';
const endMarker = '<!-- bench:end -->';

async function main(): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: process.argv.slice(2),
      strict: true,
      options: {
        duration: { type: 'string' },
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
  let durationSec: number, warmupWindows: number, manyEditors: number, manyDocs: number;
  let seed: number;
  try {
    durationSec = number('duration', values.duration, 60, 1);
    warmupWindows = number('warmup', values.warmup, 1, 0);
    manyEditors = number('many-editors', values['many-editors'], 1000, 1);
    manyDocs = number('many-docs', values['many-docs'], 100, 1);
    seed = number('seed', values.seed, 1, 0);
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n`);
    return 1;
  }
  if (!existsSync(serverEntry)) {
    process.stderr.write(
      `bench: ${serverEntry} does not exist: the server's entry point (server/main.ts) must be built first\n`,
    );
    return 1;
  }
  const common = { durationSec, warmupWindows, seed, ratePerSec: 5 };
  const runs: BenchRun[] = [
    {
      name: 'reference',
      title: 'Reference method: one document, 10–30 editors at 4–6 edits/s',
      options: { ...common, docs: 1, levels: [10, 15, 20, 25, 30] },
    },
    {
      name: 'single',
      title: 'One document, 50–200 editors, no added latency',
      options: { ...common, docs: 1, levels: [50, 100, 200] },
    },
    {
      name: 'single-rtt50',
      title: 'One document, 50–200 editors, 50 ms round trip',
      options: { ...common, docs: 1, levels: [50, 100, 200], rttMs: 50 },
    },
    {
      name: 'many',
      title: `Many documents: ${manyEditors} editors over ${manyDocs} documents`,
      options: { ...common, docs: manyDocs, levels: [manyEditors] },
    },
  ];
  const only = values.only?.split(',').map((name) => name.trim());
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
    process.stdout.write(`\n== ${run.title}\n`);
    const server = await startServerProcess();
    let result: SwarmResult;
    try {
      result = await runSwarm({ ...run.options, url: server.url }, (progress) => {
        if (process.stdout.isTTY) process.stdout.write(`\r${progressLine(progress)}\x1b[K`);
      });
    } finally {
      if (process.stdout.isTTY) process.stdout.write('\n');
      await server.stop();
    }
    converged &&= result.converged;
    results.push({ run, result });
    process.stdout.write(`${summaryTable(result)}\n\n${runDescription(result)}\n`);
    await writeFile(`${outDir}/${run.name}.json`, JSON.stringify(result, null, 2) + '\n');
    const chart = latencyChart(result.levels, run.title);
    await writeFile(
      `${outDir}/${run.name === 'reference' ? 'chart' : `chart-${run.name}`}.svg`,
      chart,
    );
  }
  await updateBenchmarks(results, process.argv.slice(2));
  return converged ? 0 : 2;
}

/// Starts `node dist/server/main.js` with the memory store on a free loopback port and waits
/// for `/healthz`. Its output goes to this process's stderr (LOG_LEVEL=warn keeps it quiet).
async function startServerProcess(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [serverEntry], {
    env: {
      ...process.env,
      STORE: 'memory',
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      await probeServer(url, 1000);
      break;
    } catch (err) {
      if (child.exitCode !== null || Date.now() > deadline) {
        child.kill();
        throw new Error(`the server child did not come up on ${url}: ${(err as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    url,
    stop: async () => {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/// Rewrites the part of BENCHMARKS.md between the bench markers (creating the file, or
/// appending the markers, when they are missing) with this run's command, machine and tables.
async function updateBenchmarks(
  results: { run: BenchRun; result: SwarmResult }[],
  args: string[],
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
    'Server columns are the server’s own steady windows (accepted batches per second; the median over windows of its p90/p99 per message). Client columns are edit-to-confirm: from the moment a simulated person made the edit to the broadcast that confirmed it, with every refusal and resend in between, percentiles of the merged histograms of the steady windows. “Refused” is the share of `steps` messages refused (almost all `stale`).',
    '',
  ];
  for (const { run, result } of results) {
    lines.push(`### ${run.title}`, '', summaryTable(result), '', runDescription(result), '');
  }
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
