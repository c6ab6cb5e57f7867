import type { ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { parseEnvPairs, startServerProcess } from '../client-sim/server_process.js';
import { loadConfig, type Config } from '../server/config.js';
import { allCases } from './hostile_cases.js';
import { growDocs, sleep, type Case, type CaseContext } from './hostile_docs.js';
import type { ProbeReading } from './loop_probe.js';
import { median } from './measured_run.js';

// `npm run bench:hostile`: the longest event-loop block each worst-case message causes in a
// real server child at its limits (the defaults, or `--server-env` overrides). The server runs
// `node --import dist/bench/loop_probe.js dist/server/main.js`: the probe measures the server's
// own loop and reports over IPC, so no server code changes. Each repetition starts a fresh
// server, grows the documents the selected cases need (by pastes, as a hostile client would),
// then runs the cases in order; the table gives, per case, the median and the spread over
// repetitions of the longest block, and the outcome the server answered.

const usage = `Usage: npm run bench:hostile -- [options]

  --reps N          repetitions, each against a fresh server child (default 5)
  --cases LIST      comma-separated case names (default all; --list shows them)
  --server-env K=V  environment for every server child, repeatable (e.g. MAX_DOC_BYTES=4194304)
  --variant L=K=V,… a configuration to measure, labelled L, with its own environment
                    (repeatable; \`defaults=\` for none); variants take turns within each
                    repetition (default: one variant, "defaults")
  --passes N        runs of the case list per repetition, on the same server child and new
                    documents: the first in cold code, later ones warm (default 1)
  --out FILE        also write every sample as JSON to FILE
  --list            list the cases and exit
  --help            show this text
`;

/// What the bench sets for every server child, under `--server-env`. Neither limits what one
/// message may cost: they keep timers out of the measurements and make the reload case quick.
const benchEnv: Record<string, string> = {
  STORE: 'memory',
  REDIS_URL: '',
  // A loaded document is unloaded this long after its last socket left (default 30 s).
  IDLE_UNLOAD_MS: '1000',
  // The 30-s snapshot timer would serialise a grown document in the middle of some case; the
  // same serialisation is measured on its own by `leave-snapshot`.
  SNAPSHOT_EVERY_MS: '86400000',
};

/// A server configuration to measure: its label and its environment over `benchEnv`.
interface Variant {
  label: string;
  env: Record<string, string>;
  config: Readonly<Config>;
}

/// One measurement of one case.
interface Sample {
  variant: string;
  rep: number;
  name: string;
  outcome: string;
  longestBlockMs: number;
  longestBlockCpuMs: number;
  histogramMaxMs: number;
  blocksOver5Ms: number;
  clientMs: number;
  /// The 1-minute load average when the repetition of this variant started.
  load: number;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      reps: { type: 'string', default: '5' },
      cases: { type: 'string' },
      'server-env': { type: 'string', multiple: true },
      variant: { type: 'string', multiple: true },
      passes: { type: 'string', default: '1' },
      out: { type: 'string' },
      list: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const every = allCases();
  if (values.list) {
    for (const c of every) process.stdout.write(`${c.name.padEnd(18)} ${c.what}\n`);
    return 0;
  }
  const reps = Number(values.reps);
  if (!Number.isInteger(reps) || reps < 1) throw new Error('--reps takes a whole number ≥ 1');
  const passes = Number(values.passes);
  if (!Number.isInteger(passes) || passes < 1) throw new Error('--passes takes a whole number ≥ 1');
  const names = values.cases?.split(',').map((name) => name.trim());
  const unknown = names?.filter((name) => !every.some((c) => c.name === name)) ?? [];
  if (unknown.length > 0) throw new Error(`unknown case(s): ${unknown.join(', ')}`);
  const cases = names ? every.filter((c) => names.includes(c.name)) : every;
  const common = { ...benchEnv, ...parseEnvPairs(values['server-env'] ?? []) };
  const variants = (values.variant ?? ['defaults=']).map((spec) => parseVariant(spec, common));

  const log = (line: string) => process.stdout.write(`${line}\n`);
  log(
    `Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB; server env ${JSON.stringify(common)}`,
  );
  for (const { label, env, config } of variants) {
    log(
      `${label} (${JSON.stringify(env)}): maxMessageBytes ${config.maxMessageBytes}, maxJsonDepth ${config.maxJsonDepth}, maxDocBytes ${config.maxDocBytes}, maxDocSize ${config.maxDocSize}, maxAttributeBytes ${config.maxAttributeBytes}, maxStepsPerBatch ${config.maxStepsPerBatch}, maxApplyMs ${config.maxApplyMs}`,
    );
  }
  const samples: Sample[] = [];
  // Variants take turns within each repetition, so that the load other processes put on the
  // machine falls on all of them alike.
  for (let rep = 1; rep <= reps; rep++) {
    for (const variant of variants) {
      const load = loadavg();
      log(
        `repetition ${rep}/${reps}, ${variant.label}, load average ${load.map((l) => l.toFixed(2)).join(' ')}`,
      );
      for (const sample of await runRepetition(variant, cases, rep, passes, log)) {
        samples.push({ ...sample, load: load[0]! });
      }
    }
  }
  log('');
  printResults(variants, cases, samples, { reps, passes }, log);
  if (values.out) {
    await writeFile(
      values.out,
      JSON.stringify({ node: process.version, common, variants, samples }, null, 1),
    );
  }
  return 0;
}

/// Logs a table per variant and pass, then the comparison of them when there are several.
function printResults(
  variants: readonly Variant[],
  cases: readonly Case[],
  samples: readonly Sample[],
  { reps, passes }: { reps: number; passes: number },
  log: (line: string) => void,
): void {
  const labels = variants.flatMap((variant) =>
    Array.from({ length: passes }, (_, i) => ({
      ...variant,
      label: passLabel(variant, i + 1, passes),
    })),
  );
  for (const variant of labels) {
    const own = samples.filter((s) => s.variant === variant.label);
    const loads = own.filter((s) => s.name === cases[0]!.name).map((s) => s.load.toFixed(2));
    log(
      `${variant.label}: ${reps} repetitions, server env ${JSON.stringify(variant.env)}; 1-minute load average at the start of each: ${loads.join(', ')}`,
    );
    log('');
    log(table(cases, own));
    log('');
  }
  if (labels.length > 1) log(comparison(cases, labels, samples));
}

/// Parses `LABEL=KEY=VALUE,KEY=VALUE` (the environment may be empty: `defaults=`).
function parseVariant(spec: string, common: Record<string, string>): Variant {
  const at = spec.indexOf('=');
  if (at <= 0) throw new Error(`--variant takes LABEL=KEY=VALUE,…, got "${spec}"`);
  const rest = spec.slice(at + 1);
  const env = parseEnvPairs(rest === '' ? [] : rest.split(','));
  // The server's own configuration code: the limits the cases aim at are exactly its own.
  return { label: spec.slice(0, at), env, config: loadConfig({}, { ...common, ...env }) };
}

/// A variant's label in the tables: with several passes, which one.
function passLabel(variant: Variant, pass: number, passes: number): string {
  if (passes === 1) return variant.label;
  return `${variant.label}, ${pass === 1 ? 'cold' : `warm${passes > 2 ? ` ${pass - 1}` : ''}`}`;
}

/// One repetition of every case against a fresh server child configured as `variant`, `passes`
/// times over: the first pass runs each case in code the server has not run (or optimised)
/// yet, as right after a restart; later ones, on new documents, in code the earlier passes
/// warmed up, as in a server that has been serving for a while.
async function runRepetition(
  variant: Variant,
  cases: readonly Case[],
  rep: number,
  passes: number,
  log: (line: string) => void,
): Promise<Omit<Sample, 'load'>[]> {
  const server = await startServerProcess(
    { ...benchEnv, ...variant.env },
    { nodeArgs: ['--import', new URL('./loop_probe.js', import.meta.url).href], ipc: true },
  );
  const probe = new Probe(server.child);
  const samples: Omit<Sample, 'load'>[] = [];
  try {
    for (let pass = 1; pass <= passes; pass++) {
      const label = passLabel(variant, pass, passes);
      if (passes > 1) log(`  pass ${pass} (${label})`);
      const ctx: CaseContext = {
        url: server.url,
        config: variant.config,
        docs: {},
        sockets: [],
        documentsBeforeLeave: null,
        touched: false,
        pass,
      };
      try {
        for (const c of cases) {
          await growDocs(ctx, c.needs, (line) => log(`  ${line}`));
          const sample = { variant: label, ...(await measure(probe, c, ctx, rep)) };
          samples.push(sample);
          log(
            `  ${c.name.padEnd(18)} block ${sample.longestBlockMs.toFixed(1).padStart(8)} ms (CPU ${sample.longestBlockCpuMs.toFixed(1)}, histogram ${sample.histogramMaxMs.toFixed(1)}, ${sample.blocksOver5Ms} over 5 ms), client ${sample.clientMs.toFixed(1)} ms, ${sample.outcome}`,
          );
        }
      } finally {
        for (const doc of Object.values(ctx.docs)) doc.close();
        for (const socket of ctx.sockets) socket.close();
      }
      // The documents of this pass are unloaded (and snapshotted) a moment after their last
      // socket left: that must not land in the next pass's measurements.
      if (pass < passes) await waitUnloaded(server.url, variant.config.idleUnloadMs + 15_000);
    }
  } finally {
    await server.stop();
  }
  return samples;
}

/// Waits until the server holds no document, or `timeoutMs`.
async function waitUnloaded(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const response = await fetch(new URL('/healthz', url));
    const { documents } = (await response.json()) as { documents: number };
    if (documents === 0) break;
    await sleep(250);
  }
  // And the garbage of what was unloaded.
  await sleep(1000);
}

/// Runs one case: its preparation, then a reset of the probe, the case, a pause for the work
/// the server does after answering, and a reading.
async function measure(
  probe: Probe,
  c: Case,
  ctx: CaseContext,
  rep: number,
): Promise<Omit<Sample, 'variant' | 'load'>> {
  let outcome: string;
  let clientMs = NaN;
  let reading: ProbeReading;
  try {
    try {
      if (c.prepare) await c.prepare(ctx);
    } catch (err) {
      // Recorded without figures; the other cases still run.
      const failed = `setup failed: ${(err as Error).message}`;
      return {
        rep,
        name: c.name,
        outcome: failed,
        longestBlockMs: NaN,
        longestBlockCpuMs: NaN,
        histogramMaxMs: NaN,
        blocksOver5Ms: 0,
        clientMs,
      };
    }
    // Let the preparation's own work (and the collection of its garbage) end first.
    await sleep(300);
    await probe.reset();
    // monitorEventLoopDelay records nothing for the first interval after a reset: give it a
    // few, so that it sees the case's block too and can cross-check the drift probe.
    await sleep(20);
    const started = performance.now();
    try {
      outcome = await c.run(ctx);
    } catch (err) {
      outcome = `error: ${(err as Error).message}`;
    }
    clientMs = performance.now() - started;
    await sleep(c.settleMs ?? 300);
    reading = await probe.read();
  } finally {
    for (const socket of ctx.sockets) socket.close();
    ctx.sockets = [];
  }
  return {
    rep,
    name: c.name,
    outcome,
    longestBlockMs: reading.longestBlockMs,
    longestBlockCpuMs: reading.longestBlockCpuMs,
    histogramMaxMs: reading.histogramMaxMs,
    blocksOver5Ms: reading.blocksOver5Ms,
    clientMs,
  };
}

/// The markdown table of one variant: per case, the median and range over repetitions.
function table(cases: readonly Case[], samples: readonly Sample[]): string {
  const rows = cases.map((c) => {
    const list = samples.filter((s) => s.name === c.name);
    const blocks = finite(list.map((s) => s.longestBlockMs));
    const outcomes = [...new Set(list.map((s) => s.outcome))].join(', ');
    const med = median(blocks);
    return `| ${c.name} | ${c.what} | ${ms(med)} | ${ms(Math.min(...blocks))}–${ms(Math.max(...blocks))} | ${ms(median(finite(list.map((s) => s.longestBlockCpuMs))))} | ${ms(median(finite(list.map((s) => s.histogramMaxMs))))} | ${ms(median(finite(list.map((s) => s.clientMs))))} | ${outcomes} | ${med !== null && med > 50 ? '**over**' : 'ok'} |`;
  });
  return [
    '| Case | Message | Longest block, median (ms) | min–max (ms) | CPU in it, median (ms) | ELD histogram max, median (ms) | Client round trip, median (ms) | Answer | 50 ms |',
    '| :--- | :--- | ---: | ---: | ---: | ---: | ---: | :--- | :--- |',
    ...rows,
  ].join('\n');
}

/// Variants side by side: per case, each one's median longest block, its range and answer.
function comparison(
  cases: readonly Case[],
  variants: readonly Variant[],
  samples: readonly Sample[],
): string {
  const rows = cases.map((c) => {
    const cells = variants.map((variant) => {
      const list = samples.filter((s) => s.name === c.name && s.variant === variant.label);
      const blocks = finite(list.map((s) => s.longestBlockMs));
      const outcomes = [...new Set(list.map((s) => s.outcome))].join(', ');
      return `${ms(median(blocks))} (${ms(Math.min(...blocks))}–${ms(Math.max(...blocks))}) ${outcomes}`;
    });
    return `| ${c.name} | ${cells.join(' | ')} |`;
  });
  return [
    `| Case | ${variants.map((v) => `${v.label}: median (min–max) ms, answer`).join(' | ')} |`,
    `| :--- | ${variants.map(() => ':---').join(' | ')} |`,
    ...rows,
  ].join('\n');
}

function ms(value: number | null): string {
  if (value === null || !Number.isFinite(value)) return '–';
  return value < 10 ? value.toFixed(1) : value.toFixed(0);
}

/// The numbers that are measurements (a case whose setup failed has none).
function finite(values: readonly number[]): number[] {
  return values.filter((v) => Number.isFinite(v));
}

/// The parent's end of `loop_probe.ts`'s IPC channel.
class Probe {
  private nextId = 1;
  private readonly waiting = new Map<number, (message: ProbeReading) => void>();
  private readonly child: ChildProcess;

  constructor(child: ChildProcess) {
    this.child = child;
    child.on('message', (message: ProbeReading) => {
      const resolve = this.waiting.get(message.id);
      if (resolve) {
        this.waiting.delete(message.id);
        resolve(message);
      }
    });
  }

  async reset(): Promise<void> {
    await this.call('reset');
  }

  read(): Promise<ProbeReading> {
    return this.call('read');
  }

  private call(probe: 'reset' | 'read'): Promise<ProbeReading> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`probe ${probe}: no answer`)), 120_000);
      this.waiting.set(id, (message) => {
        clearTimeout(timer);
        resolve(message);
      });
      this.child.send({ probe, id });
    });
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `bench:hostile: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
