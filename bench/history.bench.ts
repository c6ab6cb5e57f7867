import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Node } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import { pino } from 'pino';
import { createClient } from 'redis';
import { emptyDoc, schema, schemaVersion } from '../schema/index.js';
import type { StepJSON } from '../schema/events.js';
import { createCollab } from '../server/collab.js';
import { FileStore } from '../server/stores/file/file_store.js';
import { MemoryStore } from '../server/stores/memory_store.js';
import { RedisStore } from '../server/stores/redis_store.js';
import type { Store } from '../server/stores/store.js';

// What version history costs: stored bytes per 1,000 typing steps on each store (journal,
// snapshot and archive, as the rooms write them: entries of two steps, a snapshot every 500),
// and the time to serve a version (`documentAt`) and a diff (`changes`) with 100,000 steps of
// history. Usage: npm run bench:history [-- memory|file|redis] [steps]. REDIS_URL overrides
// redis://127.0.0.1:6379.

const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const only = process.argv[2];
const historySteps = Number(process.argv[3] ?? 100_000);
const bytesSteps = 10_000;
const snapshotEvery = 500;
const samples = 30;
const users = ['ann', 'bob', 'cy'];
const epoch = 'bench';

/// Typing: a character at the end of the last paragraph, a new paragraph every 60; writers
/// take turns every 50 steps; steps 200 ms apart.
function* typing(
  count: number,
): Generator<{ step: StepJSON; doc: Node; user: string; at: number }> {
  let doc = emptyDoc();
  for (let i = 0; i < count; i++) {
    const tr = new Transform(doc);
    if (i > 0 && i % 60 === 0) tr.insert(doc.content.size, schema.node('paragraph'));
    else tr.insert(doc.content.size - 1, schema.text(String.fromCharCode(97 + (i % 26))));
    doc = tr.doc;
    yield {
      step: tr.steps[0]!.toJSON() as StepJSON,
      doc,
      user: users[Math.floor(i / 50) % 3]!,
      at: Date.UTC(2026, 0, 1) + i * 200,
    };
  }
}

/// Writes `count` typing steps into `docId`, `perEntry` steps per append, a snapshot every 500.
async function write(store: Store, docId: string, count: number, perEntry: number): Promise<void> {
  let entry: { steps: StepJSON[]; users: string[]; at: number } | null = null;
  let version = 0;
  let lastDoc: Node = emptyDoc();
  for (const { step, doc, user, at } of typing(count)) {
    entry ??= { steps: [], users: [], at };
    entry.steps.push(step);
    entry.users.push(user);
    lastDoc = doc;
    if (entry.steps.length < perEntry && version + entry.steps.length < count) continue;
    const outcome = await store.append(docId, {
      epoch,
      baseVersion: version,
      steps: entry.steps,
      clientIDs: entry.users.map((u) => `c-${u}`),
      users: entry.users,
      at: entry.at,
    });
    if (!outcome.ok) throw new Error(`append refused at ${version}`);
    const before = version;
    version += entry.steps.length;
    entry = null;
    if (Math.floor(version / snapshotEvery) > Math.floor(before / snapshotEvery)) {
      const snapshot = {
        doc: lastDoc.toJSON(),
        version,
        epoch,
        schemaVersion,
        savedAt: Date.now(),
      };
      const written = await store.snapshot(docId, snapshot);
      if (!written.ok) throw new Error(`snapshot refused at ${version}`);
    }
  }
}

/// The bytes `docId` takes in `store`: its live part (snapshot and journal, as JSON) and its
/// archive (as the store counts it).
async function storedBytes(
  store: Store,
  docId: string,
): Promise<{ live: number; archive: number }> {
  const stored = await store.load(docId);
  const live =
    JSON.stringify(stored?.snapshot ?? null).length + JSON.stringify(stored?.journal ?? []).length;
  const archive = store.archive ? (await store.archive.stats(docId)).bytes : 0;
  return { live, archive };
}

async function directoryBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += (await stat(join(entry.parentPath, entry.name))).size;
  }
  return total;
}

function median(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function p95(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.95))]!;
}

async function bench(
  name: string,
  open: () => Promise<{ store: Store; dir?: string; done(): Promise<void> }>,
): Promise<void> {
  const { store, dir, done } = await open();
  try {
    // Bytes: realistic entries (two steps per flush).
    const small = `bytes-${Date.now()}`;
    await write(store, small, bytesSteps, 2);
    const bytes = await storedBytes(store, small);
    const per1000 = (bytes.live + bytes.archive) / (bytesSteps / 1000);
    const finalDoc = JSON.stringify((await store.load(small))!.snapshot!.doc).length;
    let line = `${name}: ${bytesSteps} typing steps (document ends at ${finalDoc} bytes of JSON): ${Math.round(per1000)} bytes stored per 1,000 steps (archive ${bytes.archive}, live ${bytes.live})`;
    if (dir)
      line += `; on disk ${Math.round((await directoryBytes(dir)) / (bytesSteps / 1000))} bytes per 1,000 steps (write-ahead log included)`;
    console.log(line);

    // Reads at 100,000 steps: entries of 20 steps to build it faster; reads see the same.
    const big = `reads-${Date.now()}`;
    const started = performance.now();
    await write(store, big, historySteps, 20);
    console.log(
      `${name}: wrote ${historySteps} steps in ${((performance.now() - started) / 1000).toFixed(1)} s`,
    );
    const collab = createCollab({ store, logger: pino({ level: 'silent' }) });
    const versionMs: number[] = [];
    const diffMs: number[] = [];
    const wholeMs: number[] = [];
    for (let i = 0; i < samples; i++) {
      const v = Math.floor(((i + 0.5) / samples) * historySteps);
      let t = performance.now();
      await collab.documentAt(big, v);
      versionMs.push(performance.now() - t);
      // A session's diff: the 1,000 steps before v.
      t = performance.now();
      await collab.changes(big, Math.max(0, v - 1000), v);
      diffMs.push(performance.now() - t);
    }
    const pageMs: number[] = [];
    for (let i = 0; i < 3; i++) {
      let t = performance.now();
      await collab.changes(big, 0, historySteps);
      wholeMs.push(performance.now() - t);
      // One session of 100,000 steps (200 ms apart): the page reads back to its start.
      t = performance.now();
      await collab.history(big);
      pageMs.push(performance.now() - t);
    }
    console.log(
      `${name}: at ${historySteps} steps: documentAt median ${median(versionMs).toFixed(1)} ms (p95 ${p95(versionMs).toFixed(1)}); ` +
        `changes over 1,000 steps median ${median(diffMs).toFixed(1)} ms (p95 ${p95(diffMs).toFixed(1)}); ` +
        `changes 0→${historySteps} median ${median(wholeMs).toFixed(0)} ms; ` +
        `history (one session of all of it) median ${median(pageMs).toFixed(0)} ms`,
    );
  } finally {
    await done();
  }
}

const kinds: Record<string, () => Promise<{ store: Store; dir?: string; done(): Promise<void> }>> =
  {
    memory: async () => {
      const store = new MemoryStore();
      return { store, done: () => store.close() };
    },
    file: async () => {
      const dir = await mkdtemp(join(tmpdir(), 'scriptorium-history-bench-'));
      const store = new FileStore({ dataDir: dir });
      return {
        store,
        dir,
        done: async () => {
          await store.close();
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
    redis: async () => {
      const keyPrefix = `scriptorium-history-bench-${Date.now()}:`;
      const store = new RedisStore({ url: redisUrl, keyPrefix, commandTimeoutMs: 10_000 });
      await store.ready();
      return {
        store,
        done: async () => {
          await store.close();
          const client = createClient({ url: redisUrl });
          await client.connect();
          for await (const keys of client.scanIterator({ MATCH: `${keyPrefix}*`, COUNT: 1000 }))
            if (keys.length > 0) await client.del(keys);
          await client.close();
        },
      };
    },
  };

console.log(`node ${process.version}; ${historySteps} steps of history; the machine may be shared`);
for (const [name, open] of Object.entries(kinds)) {
  if (only && only !== name) continue;
  await bench(name, open);
}
