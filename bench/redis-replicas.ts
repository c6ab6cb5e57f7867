import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Node } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import { createClient } from 'redis';
import { emptyDoc, schema, schemaVersion } from '../schema/index.js';
import { type StepJSON } from '../schema/events.js';
import { RedisStore } from '../server/stores/redis_store.js';
import type { AppendRequest, Snapshot } from '../server/stores/store.js';

const run = promisify(execFile);

/// A typed history: `docs[v]` is the document at version `v`, `steps[v]` the step after it
/// (one character typed at the end, a new paragraph every 20).
function typingHistory(length: number): { docs: Node[]; steps: StepJSON[] } {
  const docs = [emptyDoc()];
  const steps: StepJSON[] = [];
  for (let v = 0; v < length; v++) {
    const doc = docs[v]!;
    const tr = new Transform(doc);
    if (v > 0 && v % 20 === 0) tr.insert(doc.content.size, schema.node('paragraph'));
    else tr.insert(doc.content.size - 1, schema.text(String.fromCharCode(97 + (v % 26))));
    steps.push(tr.steps[0]!.toJSON() as StepJSON);
    docs.push(tr.doc);
  }
  return { docs, steps };
}

function appendOf(
  h: { steps: StepJSON[] },
  epoch: string,
  from: number,
  to: number,
): AppendRequest {
  const steps = h.steps.slice(from, to);
  return { epoch, baseVersion: from, steps, clientIDs: steps.map(() => 'bench') };
}

function snapshotOf(h: { docs: Node[] }, epoch: string, version: number): Snapshot {
  return { doc: h.docs[version]!.toJSON(), version, epoch, schemaVersion, savedAt: Date.now() };
}

/// A 3+3 cluster from deploy/redis-cluster.sh, in a temp dir on ports from `base`.
async function startCluster(
  base: number,
): Promise<{ rootNodes: { url: string }[]; stop(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-bench-cluster-'));
  // No AOF: what is measured is replication, not the disk.
  const env = {
    ...process.env,
    REDIS_CLUSTER_PORT: String(base),
    REDIS_CLUSTER_DIR: dir,
    REDIS_CLUSTER_APPENDONLY: 'no',
  };
  await run('deploy/redis-cluster.sh', ['start'], { env });
  // The replicas' first sync: WAIT answers 0 until it is done.
  for (let i = 0; i < 100; i++) {
    const { stdout } = await run('redis-cli', ['-p', String(base), 'WAIT', '1', '100']).catch(
      () => ({ stdout: '0' }),
    );
    if (stdout.trim() !== '0') break;
  }
  return {
    rootNodes: [0, 1, 2].map((i) => ({ url: `redis://127.0.0.1:${base + i}` })),
    stop: async () => {
      await run('deploy/redis-cluster.sh', ['stop'], { env });
      await new Promise((resolve) => setTimeout(resolve, 500));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

// What REDIS_MIN_REPLICAS_ACKED costs and what a document costs in Redis memory.
// Usage: npm run bench:replicas. Starts its own Redis Cluster (3 masters, 3 replicas, on this
// machine, deploy/redis-cluster.sh on ports 17200-17205, REDIS_CLUSTER_PORT to move them) and
// its own redis-server (port 17300, REDIS_BENCH_PORT); needs redis-server and redis-cli.
//
// 1. Append latency on the cluster, minReplicasAcked 0 against 1, runs alternated (A B A B …)
//    so that load from elsewhere on the machine falls on both: one append of one step at a
//    time on one document (each waits for the last), and 20 documents appending at once.
// 2. Redis memory per document (INFO used_memory before and after writing many documents of
//    one shape, divided by their count): a snapshot, a journal, the meta hash, and a lease
//    with its fencing counter and home, at a few sizes.

const rounds = Number(process.env['ROUNDS'] ?? 5);
const appendsPerRun = Number(process.env['APPENDS'] ?? 1000);
const concurrentDocs = 20;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function median(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const history = typingHistory(appendsPerRun + 1);

/// One run: p50 and p99 (ms) of sequential appends, and of appends of `concurrentDocs`
/// documents at once.
async function latencyRun(
  rootNodes: { url: string }[],
  minReplicasAcked: number,
): Promise<{ seq: [number, number]; par: [number, number] }> {
  const store = new RedisStore({
    cluster: { rootNodes },
    keyPrefix: `bench-${randomUUID()}:`,
    minReplicasAcked,
    commandTimeoutMs: 5000,
  });
  await store.ready(10_000);
  const seq: number[] = [];
  const docId = `doc-${randomUUID()}`;
  for (let v = 0; v < appendsPerRun; v++) {
    const start = performance.now();
    const outcome = await store.append(docId, appendOf(history, 'e', v, v + 1));
    seq.push(performance.now() - start);
    if (!outcome.ok) throw new Error('append refused');
  }
  const par: number[] = [];
  const docs = Array.from({ length: concurrentDocs }, () => `doc-${randomUUID()}`);
  for (let v = 0; v < appendsPerRun / concurrentDocs; v++) {
    await Promise.all(
      docs.map(async (id) => {
        const start = performance.now();
        await store.append(id, appendOf(history, 'e', v, v + 1));
        par.push(performance.now() - start);
      }),
    );
  }
  await store.close();
  const s = seq.sort((a, b) => a - b);
  const p = par.sort((a, b) => a - b);
  return {
    seq: [percentile(s, 50), percentile(s, 99)],
    par: [percentile(p, 50), percentile(p, 99)],
  };
}

async function latency(): Promise<void> {
  const cluster = await startCluster(Number(process.env['REDIS_CLUSTER_PORT'] ?? 17_200));
  try {
    const results: Record<number, { seq: [number, number]; par: [number, number] }[]> = {
      0: [],
      1: [],
    };
    for (let round = 0; round < rounds; round++) {
      for (const min of [0, 1]) results[min]!.push(await latencyRun(cluster.rootNodes, min));
    }
    console.log(`append latency on a 3+3 cluster, ${rounds} alternated runs, medians (ms):`);
    console.log('min replicas | seq p50 | seq p99 | 20 docs p50 | 20 docs p99');
    for (const min of [0, 1]) {
      const r = results[min]!;
      const m = (pick: (x: (typeof r)[number]) => number) => median(r.map(pick)).toFixed(3);
      console.log(
        `${min} | ${m((x) => x.seq[0])} | ${m((x) => x.seq[1])} | ${m((x) => x.par[0])} | ${m((x) => x.par[1])}`,
      );
    }
  } finally {
    await cluster.stop();
  }
}

interface Shape {
  name: string;
  /// Steps before the snapshot (typed characters) and steps after it, in the journal.
  snapshotAt: number;
  journal: number;
}

const shapes: Shape[] = [
  { name: 'new, 50 steps, no snapshot', snapshotAt: 0, journal: 50 },
  { name: '1k chars + 100-step journal', snapshotAt: 1000, journal: 100 },
  { name: '10k chars + 500-step journal', snapshotAt: 10_000, journal: 500 },
  { name: '20k chars + 1000-step journal', snapshotAt: 20_000, journal: 1000 },
];

async function memory(): Promise<void> {
  const port = Number(process.env['REDIS_BENCH_PORT'] ?? 17_300);
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${port}`;
  await new Promise((resolve) => setTimeout(resolve, 500));
  const client = createClient({ url });
  await client.connect();
  const used = async (): Promise<number> =>
    Number(/used_memory:(\d+)/.exec(await client.info('memory'))![1]);
  const store = new RedisStore({ url, commandTimeoutMs: 10_000 });
  await store.ready(10_000);
  console.log('\nRedis memory per document (used_memory delta / documents):');
  console.log('document | documents | bytes per document | snapshot JSON bytes');
  try {
    for (const shape of shapes) {
      const length = shape.snapshotAt + shape.journal;
      const h = typingHistory(length);
      const snapshot = snapshotOf(h, 'e', shape.snapshotAt);
      const count = length > 20_000 ? 50 : 200;
      const before = await used();
      for (let i = 0; i < count; i++) {
        const docId = `doc-${shape.snapshotAt}-${i}`;
        const lease = await store.leases.acquire(docId, 'node-1/bench', 60_000);
        const token = lease.ok ? lease.lease.token : undefined;
        if (shape.snapshotAt > 0) {
          await store.reset(docId, snapshot, { epoch: null, version: 0 }, token);
        }
        // The journal in batches of 10 steps, as a busy room's flushes would write it.
        for (let v = shape.snapshotAt; v < length; v += 10) {
          const to = Math.min(length, v + 10);
          await store.append(docId, { ...appendOf(h, 'e', v, to), lease: token });
        }
      }
      const perDoc = ((await used()) - before) / count;
      console.log(
        `${shape.name} | ${count} | ${Math.round(perDoc)} | ${JSON.stringify(snapshot).length}`,
      );
      await client.flushAll();
    }
  } finally {
    await store.close();
    await client.close();
    child.kill('SIGKILL');
  }
}

console.log(`node ${process.version}, ${new Date().toISOString()}`);
if (process.argv[2] !== 'memory') await latency();
if (process.argv[2] !== 'latency') await memory();
