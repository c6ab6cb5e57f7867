import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Node } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import { createClient } from 'redis';
import { schema, schemaVersion } from '../schema/index.js';
import { type StepJSON } from '../schema/events.js';
import { FileStore } from '../server/stores/file/file_store.js';
import { RedisStore } from '../server/stores/redis_store.js';
import type { AppendRequest, Store } from '../server/stores/store.js';

// What a store adds to the path of an edit: append latency (sequential, and 50 documents
// appending in one turn, the group-commit case), and snapshot write and load times by document
// size. Usage: npm run bench:store [-- redis|file]. REDIS_URL overrides redis://127.0.0.1:6379.

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const appendCount = 5000;
const groupDocs = 50;
const epoch = 'bench';

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function summary(samples: number[]): string {
  const sorted = samples.slice().sort((a, b) => a - b);
  return `p50 ${percentile(sorted, 50).toFixed(3)} ms  p99 ${percentile(sorted, 99).toFixed(3)} ms`;
}

function median(samples: number[]): number {
  return percentile(
    samples.slice().sort((a, b) => a - b),
    50,
  );
}

/// A pool of real steps: typing 1–3 characters into a paragraph, the common batch.
function typingBatches(count: number): StepJSON[][] {
  let doc = schema.node('doc', null, [schema.node('paragraph', null, [schema.text('start')])]);
  const batches: StepJSON[][] = [];
  for (let i = 0; i < count; i++) {
    const tr = new Transform(doc);
    const size = 1 + (i % 3);
    for (let j = 0; j < size; j++) tr.insert(tr.doc.content.size - 1, schema.text('x'));
    batches.push(tr.steps.map((step) => step.toJSON() as StepJSON));
    // Keep the paragraph short: the steps' shape is what matters, not where they apply.
    if (doc.content.size > 200) doc = schema.node('doc', null, [schema.node('paragraph')]);
    else doc = tr.doc;
  }
  return batches;
}

/// A document of headings, paragraphs with marks, lists and quotes, about `bytes` of JSON.
function documentOfSize(bytes: number): Node {
  const words = 'the quick brown fox jumps over a lazy dog while editors collaborate'.split(' ');
  const blocks: Node[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const text = Array.from({ length: 12 }, (_, j) => words[(i + j) % words.length]).join(' ');
    let block: Node;
    if (i % 10 === 0) block = schema.node('heading', { level: 2 }, [schema.text(`Section ${i}`)]);
    else if (i % 7 === 0)
      block = schema.node('bullet_list', null, [
        schema.node('list_item', null, [schema.node('paragraph', null, [schema.text(text)])]),
        schema.node('list_item', null, [schema.node('paragraph', null, [schema.text(text)])]),
      ]);
    else
      block = schema.node('paragraph', null, [
        schema.text(text + ' '),
        schema.text('bold words', [schema.marks.strong.create()]),
        schema.text(' and a '),
        schema.text('link', [schema.marks.link.create({ href: `https://example.com/${i}` })]),
      ]);
    blocks.push(block);
    size += JSON.stringify(block.toJSON()).length;
  }
  return schema.node('doc', null, blocks);
}

function request(docId: string, baseVersion: number, steps: StepJSON[]): AppendRequest {
  return { epoch, baseVersion, steps, clientIDs: steps.map(() => docId) };
}

async function benchAppends(store: Store, batches: StepJSON[][]): Promise<void> {
  const docId = `seq-${randomUUID()}`;
  let version = 0;
  const sequential: number[] = [];
  for (let i = 0; i < appendCount; i++) {
    const steps = batches[i]!;
    const start = performance.now();
    const outcome = await store.append(docId, request(docId, version, steps));
    sequential.push(performance.now() - start);
    if (!outcome.ok) throw new Error('unexpected conflict');
    version = outcome.version;
  }
  console.log(`  append, sequential (${appendCount}):            ${summary(sequential)}`);

  const docIds = Array.from({ length: groupDocs }, (_, i) => `group-${i}-${randomUUID()}`);
  const versions = docIds.map(() => 0);
  const grouped: number[] = [];
  const rounds: number[] = [];
  for (let round = 0; round < appendCount / groupDocs; round++) {
    const start = performance.now();
    await Promise.all(
      docIds.map(async (docId, d) => {
        const steps = batches[(round * groupDocs + d) % batches.length]!;
        const outcome = await store.append(docId, request(docId, versions[d]!, steps));
        grouped.push(performance.now() - start);
        if (!outcome.ok) throw new Error('unexpected conflict');
        versions[d] = outcome.version;
      }),
    );
    rounds.push(performance.now() - start);
  }
  console.log(`  append, ${groupDocs} docs in one turn (${appendCount}): ${summary(grouped)}`);
  console.log(`  whole turn of ${groupDocs} appends:               ${summary(rounds)}`);
}

async function benchSnapshots(store: Store): Promise<void> {
  for (const bytes of [10_000, 100_000, 1_000_000]) {
    const doc = documentOfSize(bytes).toJSON();
    const docId = `snap-${bytes}-${randomUUID()}`;
    const iterations = bytes >= 1_000_000 ? 10 : 30;
    const writes: number[] = [];
    const loads: number[] = [];
    let version = 0;
    for (let i = 0; i < iterations; i++) {
      const outcome = await store.append(docId, request(docId, version, typingBatches(1)[0]!));
      if (!outcome.ok) throw new Error('unexpected conflict');
      version = outcome.version;
      let start = performance.now();
      const written = await store.snapshot(docId, {
        doc,
        version,
        epoch,
        schemaVersion,
        savedAt: Date.now(),
      });
      writes.push(performance.now() - start);
      if (!written.ok) throw new Error(`snapshot refused: ${written.reason}`);
      start = performance.now();
      await store.load(docId);
      loads.push(performance.now() - start);
    }
    const kb = Math.round(JSON.stringify(doc).length / 1000);
    console.log(
      `  snapshot ${String(kb).padStart(4)} KB: write median ${median(writes).toFixed(2)} ms, ` +
        `load median ${median(loads).toFixed(2)} ms`,
    );
  }
}

async function main(): Promise<void> {
  const only = process.argv[2];
  const batches = typingBatches(appendCount);
  console.log(`node ${process.version}, ${process.platform} ${process.arch}`);
  if (!only || only === 'redis') {
    const keyPrefix = `scriptorium-bench-${randomUUID()}:`;
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    await store.ready();
    console.log(`redis (${redisUrl})`);
    try {
      await benchAppends(store, batches);
      await benchSnapshots(store);
    } finally {
      await store.close();
      const client = createClient({ url: redisUrl });
      await client.connect();
      for await (const keys of client.scanIterator({ MATCH: `${keyPrefix}*`, COUNT: 1000 }))
        if (keys.length > 0) await client.del(keys);
      await client.close();
    }
  }
  if (!only || only === 'file') {
    const dataDir = await mkdtemp(join(tmpdir(), 'scriptorium-bench-'));
    const store = new FileStore({ dataDir });
    console.log(`file (${dataDir})`);
    try {
      await benchAppends(store, batches);
      await benchSnapshots(store);
    } finally {
      await store.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  }
}

await main();
