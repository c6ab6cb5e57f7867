import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runSwarm } from '../client-sim/swarm.js';
import { createServer } from 'node:net';

// `npm run bench:cluster`: aggregate throughput over many documents with 1, 2 and 3 nodes
// behind the nginx gateway (`npm run cluster`), and the latency the gateway adds (one node
// reached directly against the same node through the gateway). Configurations alternate in
// every round; medians and ranges are reported. Needs REDIS_URL (the nodes share it) and
// nginx. The simulator runs in this process (with its worker threads) on the same machine as
// the nodes: on 2 cores the nodes and the load generator compete, which the report says.

const usage = `Usage: REDIS_URL=redis://127.0.0.1:6379 npm run bench:cluster -- [options]

  --editors N     editors in all, spread over the documents (default 400)
  --docs N        documents (default 80)
  --rate R        edits per second per editor (default 5)
  --duration S    seconds per run (default 30)
  --rounds N      alternating rounds of every configuration (default 3)
  --nodes A,B,... node counts behind the gateway (default 1,2,3)
  --json FILE     where the runs are written (default bench-results/cluster.json)

Needs nginx and a Redis the nodes share (REDIS_URL, default redis://127.0.0.1:6379).
`;

function options(): {
  editors: number;
  docs: number;
  ratePerSec: number;
  durationSec: number;
  rounds: number;
  nodeCounts: number[];
  json: string;
} {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        editors: { type: 'string', default: '400' },
        docs: { type: 'string', default: '80' },
        rate: { type: 'string', default: '5' },
        duration: { type: 'string', default: '30' },
        rounds: { type: 'string', default: '3' },
        nodes: { type: 'string', default: '1,2,3' },
        json: { type: 'string', default: 'bench-results/cluster.json' },
        help: { type: 'boolean', default: false },
      },
    }));
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
  const whole = (name: string, text: string, min = 1): number => {
    const value = Number(text);
    if (!/^\d+$/.test(text) || value < min)
      fail(`--${name} takes a whole number of at least ${min}, got "${text}"`);
    return value;
  };
  const rate = Number(values.rate);
  if (!(rate > 0)) fail(`--rate takes a number above 0, got "${values.rate}"`);
  return {
    editors: whole('editors', values.editors),
    docs: whole('docs', values.docs),
    ratePerSec: rate,
    durationSec: whole('duration', values.duration),
    rounds: whole('rounds', values.rounds),
    nodeCounts: values.nodes.split(',').map((text) => whole('nodes', text)),
    json: values.json,
  };
}

function fail(message: string): never {
  process.stderr.write(`bench:cluster: ${message}\n${usage}`);
  process.exit(1);
}

const { editors, docs, ratePerSec, durationSec, rounds, nodeCounts, json } = options();
const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const clusterEntry = fileURLToPath(new URL('../deploy/cluster.js', import.meta.url));

/// The first of `count` consecutive ports free now, below Linux's ephemeral range: the swarm's
/// own outgoing connections take ephemeral ports by the hundred.
async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (12_000 - count));
    const servers: ReturnType<typeof createServer>[] = [];
    try {
      for (let i = 0; i < count; i++) {
        const server = createServer();
        servers.push(server);
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(base + i, '127.0.0.1', () => resolve());
        });
      }
      return base;
    } catch {
      // Taken: another range.
    } finally {
      await Promise.all(
        servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
      );
    }
  }
  throw new Error(`no ${count} consecutive free ports`);
}

interface Figures {
  label: string;
  round: number;
  load: number;
  /// Offered by the editors' drawn rates, and made: less when the simulator, on the same
  /// cores as the nodes, could not keep its own schedule (state `generator-limited`).
  offeredPerSec: number;
  madePerSec: number;
  state: string;
  confirmedPerSec: number;
  p50Ms: number | null;
  p99Ms: number | null;
  refused: number;
  converged: boolean;
  /// Documents compared with the server's (one per light editors' replica): 0 is unchecked.
  checked: number;
  /// The first few checks that failed, with what each found.
  failures: string[];
}

/// Starts `npm run cluster`'s script with `nodes` nodes; resolves with the gateway's and the
/// first node's URLs and a stop function.
async function startCluster(
  nodes: number,
): Promise<{ gateway: string; firstNode: string; stop(): Promise<void> }> {
  const port = await freePortRange(nodes + 1);
  const basePort = port + 1;
  const child: ChildProcess = spawn(
    process.execPath,
    [
      clusterEntry,
      '--nodes',
      String(nodes),
      '--port',
      String(port),
      '--base-port',
      String(basePort),
    ],
    {
      env: {
        ...process.env,
        REDIS_URL: redisUrl,
        LOG_LEVEL: 'warn',
        // Load testing from one address: the per-address caps and rates are for the internet.
        MAX_CONNECTIONS_PER_IP: '0',
        NEW_DOCUMENTS_PER_MINUTE: '0',
        MAX_DOCUMENTS_PER_USER: '0',
        BATCHES_PER_SECOND: '0',
        PULLS_PER_SECOND: '0',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => lines.push(line));
  const deadline = Date.now() + 60_000;
  while (!lines.some((line) => line.startsWith('gateway '))) {
    if (Date.now() > deadline || child.exitCode !== null)
      throw new Error('the cluster did not start');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const gateway = lines.find((line) => line.startsWith('gateway '))!.split(' ')[1]!;
  const firstNode = lines.find((line) => line.startsWith('node '))!.split(' ')[4]!;
  return {
    gateway,
    firstNode,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

async function measure(label: string, url: string, round: number, run: number): Promise<Figures> {
  const load = loadavg()[0]!;
  const result = await runSwarm({
    url,
    levels: [editors],
    docs,
    ratePerSec,
    durationSec,
    warmupWindows: 1,
    fullPerDoc: 0,
    // Documents of this run only: earlier runs' documents stay in Redis.
    seed: 1000 * round + run,
  });
  const level = result.levels[0]!;
  const steady = level.steady;
  return {
    label,
    round,
    load,
    offeredPerSec: steady.offeredPerSec,
    madePerSec: steady.editsPerSec,
    state: level.state,
    confirmedPerSec: steady.confirmedPerSec,
    p50Ms: steady.latency?.p50Ms ?? null,
    p99Ms: steady.latency?.p99Ms ?? null,
    refused: steady.refusalShare,
    converged: result.converged,
    checked: level.convergence.checked,
    failures: level.convergence.failures.slice(0, 3),
  };
}

/// `yes (N checks)`, `NO`, or `unchecked` when a run compared no document with the server's.
function convergedCell(runs: readonly Figures[]): string {
  if (runs.some((f) => f.checked > 0 && !f.converged)) return 'NO';
  if (runs.some((f) => f.checked === 0)) return 'unchecked';
  return `yes (${runs.reduce((sum, f) => sum + f.checked, 0)} checks)`;
}

const all: Figures[] = [];
for (let round = 1; round <= rounds; round++) {
  let run = 0;
  for (const nodes of nodeCounts) {
    const cluster = await startCluster(nodes);
    try {
      if (nodes === 1) {
        all.push(await measure('1 node, direct', cluster.firstNode, round, run++));
      }
      all.push(await measure(`${nodes} node(s), gateway`, cluster.gateway, round, run++));
    } finally {
      await cluster.stop();
    }
    console.log(JSON.stringify(all.slice(-2)));
  }
}

// With an even count, the mean of the middle two (two rounds gave the lower one before).
const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  if (sorted.length === 0) return NaN;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const range = (xs: number[]) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
const labels = [...new Set(all.map((f) => f.label))];
const rows = labels.map((label) => {
  const runs = all.filter((f) => f.label === label);
  const pick = (key: 'confirmedPerSec' | 'madePerSec' | 'offeredPerSec' | 'p50Ms' | 'p99Ms') =>
    runs.map((f) => f[key]).filter((v): v is number => v !== null);
  return `| ${label} | ${median(pick('confirmedPerSec')).toFixed(0)} (${range(pick('confirmedPerSec'))}) | ${median(pick('p50Ms')).toFixed(1)} (${range(pick('p50Ms'))}) | ${median(pick('p99Ms')).toFixed(1)} (${range(pick('p99Ms'))}) | ${(100 * median(runs.map((f) => f.refused))).toFixed(2)}% | ${convergedCell(runs)} | ${median(pick('madePerSec')).toFixed(0)} of ${median(pick('offeredPerSec')).toFixed(0)} | ${[...new Set(runs.map((f) => f.state))].join(', ')} |`;
});
console.log(
  [
    `${editors} editors over ${docs} documents at ${ratePerSec} edits/s (${editors * ratePerSec} offered), ${durationSec} s per run, ${rounds} rounds alternating; ${cpus().length} × ${cpus()[0]?.model}, Node ${process.version}; load ${all.map((f) => f.load.toFixed(2)).join(', ')}`,
    '',
    '| Configuration | Confirmed edits/s | Client p50 (ms) | Client p99 (ms) | Refused | Converged | Made of offered edits/s | State |',
    '| :--- | ---: | ---: | ---: | ---: | :--- | ---: | :--- |',
    ...rows,
    // A NO says what the check found, for each run that failed it.
    ...all
      .filter((f) => f.failures.length > 0)
      .map((f) => `\n- ${f.label}, round ${f.round}: ${f.failures.join('; ')}`),
  ].join('\n'),
);
await writeFile(
  json,
  JSON.stringify({ editors, docs, ratePerSec, durationSec, runs: all }, null, 2),
);
