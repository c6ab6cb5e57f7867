import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  cpuProbeArgs,
  freePort,
  parseEnvPairs,
  ProbeCpuSamples,
} from '../client-sim/server_process.js';
import { fixed, measuredRun, median } from './measured_run.js';
import { curveOf, curveSvg, curveTable, type PeerRun } from './peers/curve.js';
import { runYjsSwarm } from './peers/yjs_swarm.js';

// `npm run bench:peers`: Scriptorium and Hocuspocus side by side under the same load, one
// document, editors typing at 5 edits/s each, on loopback. Each server runs in its own child
// process with `client-sim/cpu_probe.ts` preloaded, so the CPU figure is what the server
// process reads of itself, the same way for both; the simulated editors run in this process,
// on as many worker threads for both (`workersFor`: none up to 50 editors, two at 60).
// Runs alternate (round 1: Scriptorium then Hocuspocus, round 2 the other way round, ...) so
// that drift on the shared machine falls on both; the table gives medians over the rounds and
// the median of the per-round ratios.
//
// What is compared:
// - Scriptorium: `dist/server/main.js`, memory store, default settings; the simulator's light
//   and full editors (`client-sim`), latency from an edit to the broadcast that confirms it to
//   its author (after the authority, the journal and the fan-out).
// - Hocuspocus (`@hocuspocus/server`, its defaults, no extension): one Y.Doc and one
//   HocuspocusProvider per editor (`bench/peers/yjs_swarm.ts`), latency from an edit to its
//   arrival at another editor of its thread (the broadcast landing, as with Scriptorium's
//   figure). Both count an edit's latency from when it was due, not when a busy thread got to
//   make it.
// CPU per edit is the server's CPU over the steady span divided by the edits it confirmed
// (Scriptorium) or acknowledged (Hocuspocus) in that span.

const usage = `Usage: npm run bench:peers -- [options]

  --editors A,B,...   editor counts, one document (default 30,60)
  --rounds N          alternating rounds per count (default 2; an even number balances the order)
  --duration S        editing time per run, warm-up included (default 100)
  --warmup S          seconds at the start of each run left out, a multiple of 10 (default 60):
                      V8 is still optimising both servers for the first minute or so (a
                      Scriptorium server at 30 editors spends ~600 µs/edit at 12–27 s and
                      ~365 µs/edit after two minutes): servers are judged warm
  --rate R            edits per second per editor (default 5)
  --seed N            simulator seed (default 1)
  --env KEY=VALUE     extra environment for the Scriptorium server (repeatable)
  --curve A,B,...     run both servers at each of these editor counts (replaces --editors) and
                      print the curve: CPU per edit, client p50/p99 and edits/s for both with
                      the ratios, and each server's capacity at client p99 < 100 ms
  --svg PATH          where --curve draws the curve (default bench-results/peers-curve.svg)
`;

const hocuspocusEntry = fileURLToPath(new URL('./peers/hocuspocus_server.js', import.meta.url));

async function runScriptorium(editors: number, round: number, options: Options): Promise<PeerRun> {
  const run = await measuredRun(`scriptorium ${editors} editors`, options.env, {
    levels: [editors],
    docs: 1,
    ratePerSec: options.rate,
    durationSec: options.duration,
    warmupWindows: options.warmup / 10,
    seed: options.seed + round,
  });
  return {
    server: 'scriptorium',
    editors,
    round,
    editsPerSec: run.steadySec > 0 ? run.confirmedEdits / run.steadySec : 0,
    cpuUsPerEdit:
      run.cpuMs === null || run.confirmedEdits === 0
        ? null
        : (run.cpuMs * 1000) / run.confirmedEdits,
    p50Ms: run.clientP50Ms,
    p99Ms: run.clientP99Ms,
    converged: run.converged,
  };
}

async function runHocuspocus(editors: number, round: number, options: Options): Promise<PeerRun> {
  const port = await freePort();
  const child = spawn(process.execPath, [...cpuProbeArgs, hocuspocusEntry], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const samples = new ProbeCpuSamples(child);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('Hocuspocus did not start in 15 s')), 15_000);
      child.on('message', (message: { ready?: boolean }) => {
        if (message?.ready) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => reject(new Error(`Hocuspocus exited with ${code}`)));
    });
    const result = await runYjsSwarm({
      url: `ws://127.0.0.1:${port}`,
      editors,
      docName: `peers-${round}`,
      ratePerSec: options.rate,
      durationSec: options.duration,
      warmupSec: options.warmup,
      seed: options.seed + round,
    });
    const cpuMs = samples.cpuMsBetween(result.steadyFromMs, result.steadyToMs);
    const steadySec = (result.steadyToMs - result.steadyFromMs) / 1000;
    return {
      server: 'hocuspocus',
      editors,
      round,
      editsPerSec: result.acknowledged / steadySec,
      cpuUsPerEdit:
        cpuMs === null || result.acknowledged === 0 ? null : (cpuMs * 1000) / result.acknowledged,
      p50Ms: result.p50Ms,
      p99Ms: result.p99Ms,
      converged: result.converged,
    };
  } finally {
    await samples.stop();
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

interface Options {
  editors: number[];
  rounds: number;
  duration: number;
  warmup: number;
  rate: number;
  seed: number;
  env: Record<string, string>;
  curve: boolean;
  svg: string;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      editors: { type: 'string', default: '30,60' },
      rounds: { type: 'string', default: '2' },
      duration: { type: 'string', default: '100' },
      warmup: { type: 'string', default: '60' },
      rate: { type: 'string', default: '5' },
      seed: { type: 'string', default: '1' },
      env: { type: 'string', multiple: true, default: [] },
      curve: { type: 'string' },
      svg: { type: 'string', default: 'bench-results/peers-curve.svg' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
  const positive = (name: string, text: string, min = 1) => {
    const value = Number(text);
    if (!Number.isInteger(value) || value < min) {
      throw new Error(`--${name} takes an integer of at least ${min}, got "${text}"`);
    }
    return value;
  };
  const warmup = positive('warmup', values.warmup, 10);
  if (warmup % 10 !== 0) throw new Error(`--warmup takes a multiple of 10 s, got ${warmup}`);
  const env = parseEnvPairs(values.env, '--env');
  return {
    editors: (values.curve ?? values.editors).split(',').map((text) => positive('editors', text)),
    rounds: positive('rounds', values.rounds),
    duration: positive('duration', values.duration, warmup + 10),
    warmup,
    rate: Number(values.rate) > 0 ? Number(values.rate) : positive('rate', values.rate),
    seed: positive('seed', values.seed, 0),
    env,
    curve: values.curve !== undefined,
    svg: values.svg,
  };
}

function line(run: PeerRun): string {
  return `${run.server} ${run.editors} editors, round ${run.round}: ${fixed(
    run.editsPerSec,
    1,
  )} edits/s, server CPU ${fixed(run.cpuUsPerEdit, 0)} µs/edit, client p50/p99 ${fixed(
    run.p50Ms,
    1,
  )}/${fixed(run.p99Ms, 1)} ms, ${run.converged ? 'converged' : 'DIVERGED'}`;
}

async function main(): Promise<void> {
  const options = parseOptions();
  const runs: PeerRun[] = [];
  for (const editors of options.editors) {
    for (let round = 1; round <= options.rounds; round++) {
      const order =
        round % 2 === 1 ? [runScriptorium, runHocuspocus] : [runHocuspocus, runScriptorium];
      for (const run of order) {
        const result = await run(editors, round, options);
        runs.push(result);
        console.log(line(result));
      }
    }
  }

  console.log('');
  console.log(
    '| Editors | Scriptorium CPU/edit | Hocuspocus CPU/edit | Ratio (median of rounds) | Scriptorium p99 | Hocuspocus p99 | Edits/s (S / H) |',
  );
  console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const editors of options.editors) {
    const of = (server: PeerRun['server']) =>
      runs.filter((run) => run.editors === editors && run.server === server);
    const ours = of('scriptorium');
    const theirs = of('hocuspocus');
    const ratios = ours.map((run, i) =>
      run.cpuUsPerEdit !== null && theirs[i]?.cpuUsPerEdit
        ? run.cpuUsPerEdit / theirs[i]!.cpuUsPerEdit!
        : null,
    );
    const med = (list: PeerRun[], pick: (run: PeerRun) => number | null) => median(list.map(pick));
    console.log(
      `| ${editors} | ${fixed(
        med(ours, (r) => r.cpuUsPerEdit),
        0,
      )} µs | ${fixed(
        med(theirs, (r) => r.cpuUsPerEdit),
        0,
      )} µs | ${fixed(median(ratios), 2)}× | ${fixed(
        med(ours, (r) => r.p99Ms),
        1,
      )} ms | ${fixed(
        med(theirs, (r) => r.p99Ms),
        1,
      )} ms | ${fixed(
        med(ours, (r) => r.editsPerSec),
        0,
      )} / ${fixed(
        med(theirs, (r) => r.editsPerSec),
        0,
      )} |`,
    );
  }
  const cpu = cpus();
  const caption = `${options.rounds} alternating rounds; ${options.duration} s of editing per run, the first ${options.warmup} s left out; ${options.rate} edits/s per editor; ${cpu.length} × ${cpu[0]?.model ?? 'cpu'}, Node ${process.version}.`;
  console.log(`\n${caption}`);
  if (options.curve) {
    const curve = curveOf(runs, options.editors);
    console.log(['', ...curveTable(curve)].join('\n'));
    mkdirSync(dirname(options.svg), { recursive: true });
    writeFileSync(options.svg, curveSvg(curve, caption));
    console.log(`\nCurve drawn in ${options.svg}`);
  }
  const diverged = runs.filter((run) => !run.converged);
  if (diverged.length > 0) {
    console.error(`${diverged.length} run(s) did not converge`);
    process.exitCode = 1;
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
