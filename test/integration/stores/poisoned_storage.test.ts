import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { access, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import { createClient } from 'redis';
import { emptyDoc, schema, schemaVersion } from '../../../schema/index.js';
import { type StepJSON } from '../../../schema/events.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import type { Store } from '../../../server/stores/store.js';
import {
  assertCoded,
  deepText,
  noAdmissionEnv,
  readServed,
  wrapSteps,
} from '../../support/hostile.js';
import { startServerProcess, type ServerProcess } from '../../support/process.js';
import { ask, rawSocket } from '../../support/socket.js';

// Poisoned storage: entries written straight into the file store's files and into Redis keys
// that cannot be parsed or cannot be applied. The server (a child process, so that a crash is
// a crash) must start, serve every other document, answer each poisoned document's join with
// `corrupt` (not retryable) every time, log an error once per document (it is quarantined,
// not re-read on every join), and do all of it again after a restart: no crash, no loop.

const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const epoch = 'poisoned-epoch';

/// A stored document as text, the way the stores keep it: an optional snapshot and journal
/// entries, each as JSON text (which may be torn on purpose).
interface Poison {
  name: string;
  snapshot: string | null;
  journal: string[];
  /// The version the store records: Redis keeps it in the meta hash; the file store works it
  /// out from the journal.
  version: number;
  only?: 'file' | 'redis';
  /// Redis only: write the keys with this function instead.
  writeRedis?: (client: RedisClient, keys: ReturnType<typeof docKeys>) => Promise<void>;
}

type RedisClient = ReturnType<typeof createClient>;

function entry(baseVersion: number, steps: unknown[], clientIDs?: unknown[]): string {
  return JSON.stringify({
    baseVersion,
    steps,
    clientIDs: clientIDs ?? steps.map(() => 'old-server'),
  });
}

function snapshot(docText: string, version: number, schema = schemaVersion): string {
  return `{"doc":${docText},"version":${version},"epoch":"${epoch}","schemaVersion":${schema},"savedAt":0}`;
}

/// The steps of typing `text` into an empty document, and the document they make.
function typed(text: string): { steps: StepJSON[]; size: number } {
  const tr = new Transform(emptyDoc()).insert(1, schema.text(text));
  return { steps: tr.steps.map((step) => step.toJSON() as StepJSON), size: tr.doc.content.size };
}

/// `count` wrap steps as `tr.wrap` makes them, by formula (a Transform overflows the stack
/// building a few thousand): the k-th wraps the paragraph of size `paragraph`, which sits at
/// depth k, in one more blockquote.
function wrapJournal(count: number, paragraph: number): StepJSON[] {
  return Array.from({ length: count }, (_, k) => ({
    stepType: 'replaceAround',
    from: k,
    to: k + paragraph,
    gapFrom: k,
    gapTo: k + paragraph,
    insert: 1,
    slice: { content: [{ type: 'blockquote' }] },
    structure: true,
  }));
}

/// Splits steps into journal entries of `size` steps, as group commits would.
function entries(steps: readonly unknown[], size: number, base = 0): string[] {
  const out: string[] = [];
  for (let i = 0; i < steps.length; i += size) out.push(entry(base + i, steps.slice(i, i + size)));
  return out;
}

const deep = typed('deep');
const oldWraps = wrapJournal(2000, deep.size);
// A doubling step: `replace` with from > to inserts the range between them a second time. On
// an old server each one doubled the document; 40 of them are 10 × 2^40 positions.
const doubling = Array.from({ length: 40 }, (_, k) => ({
  stepType: 'replace',
  from: 10 * 2 ** k,
  to: 0,
}));
const paragraph = '{"type":"paragraph","content":[{"type":"text","text":"deep"}]}';

const poisons: Poison[] = [
  {
    name: 'torn snapshot',
    snapshot: snapshot(JSON.stringify(emptyDoc().toJSON()), 0).slice(0, 40),
    journal: [],
    version: 0,
  },
  {
    name: 'snapshot of the wrong shape',
    snapshot: '{"doc":5,"version":"x"}',
    journal: [],
    version: 0,
  },
  { name: 'snapshot that is an array', snapshot: '[]', journal: [], version: 0 },
  {
    name: 'torn journal entry before a complete one',
    snapshot: null,
    journal: [entry(0, typed('ab').steps).slice(0, 30), entry(1, typed('c').steps)],
    version: 2,
  },
  {
    name: 'journal entry of the wrong shape',
    snapshot: null,
    journal: ['{"baseVersion":"0","steps":{},"clientIDs":[]}'],
    version: 0,
  },
  {
    name: 'journal entry with fewer client ids than steps',
    snapshot: null,
    journal: [entry(0, typed('ab').steps, [])],
    version: 1,
  },
  {
    name: 'journal step that does not apply',
    snapshot: null,
    journal: [entry(0, [{ stepType: 'replace', from: 50, to: 60 }])],
    version: 1,
  },
  {
    name: 'journal step of an unknown type',
    snapshot: null,
    journal: [entry(0, [{ stepType: 'teleport', from: 0 }])],
    version: 1,
  },
  {
    name: 'journal step with a fractional position',
    snapshot: null,
    journal: [
      entry(0, [
        {
          stepType: 'replace',
          from: 1.5,
          to: 1.5,
          slice: { content: [{ type: 'text', text: 'x' }] },
        },
      ]),
    ],
    version: 1,
  },
  {
    name: 'snapshot nested 5,000 deep',
    snapshot: snapshot(`{"type":"doc","content":${deepText(5000)}}`, 0),
    journal: [],
    version: 0,
  },
  {
    name: 'snapshot of blockquotes 60 deep (JSON within the limit, document past maxDocDepth)',
    snapshot: snapshot(
      `{"type":"doc","content":[${'{"type":"blockquote","content":['.repeat(60)}${paragraph}${']}'.repeat(60)}]}`,
      0,
    ),
    journal: [],
    version: 0,
  },
  {
    name: 'snapshot with an unknown node type',
    snapshot: snapshot('{"type":"doc","content":[{"type":"marquee"}]}', 0),
    journal: [],
    version: 0,
  },
  {
    name: 'snapshot with a javascript: link written before URLs were checked',
    snapshot: snapshot(
      '{"type":"doc","content":[{"type":"paragraph","content":[{"type":"text","text":"x","marks":[{"type":"link","attrs":{"href":"javascript:alert(1)"}}]}]}]}',
      0,
    ),
    journal: [],
    version: 0,
  },
  {
    name: 'snapshot written by a newer schema',
    snapshot: snapshot(JSON.stringify(emptyDoc().toJSON()), 0, schemaVersion + 1),
    journal: [],
    version: 0,
  },
  {
    name: 'a version gap in the journal',
    snapshot: null,
    journal: [entry(0, typed('ab').steps), entry(5, typed('c').steps)],
    version: 6,
  },
  {
    // The store never writes these: each version is said twice, differently.
    name: 'journal entries that overlap',
    snapshot: null,
    journal: [entry(0, typed('a').steps), entry(0, typed('Z').steps)],
    version: 1,
  },
  {
    name: 'a journal entry that goes back after the others',
    snapshot: null,
    journal: [entry(0, typed('a').steps), entry(1, typed('b').steps), entry(0, typed('Q').steps)],
    version: 2,
  },
  {
    name: 'the journal does not reach the version the store records',
    only: 'redis',
    snapshot: null,
    journal: [entry(0, typed('ab').steps)],
    version: 10,
  },
  {
    name: 'a version that is not a number',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: 'abc', epoch });
    },
  },
  {
    name: 'a journal key of the wrong type',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '1', epoch });
      await client.set(keys.journal, 'not a list');
    },
  },
  {
    name: 'a meta hash without an epoch',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '1' });
      await client.rPush(keys.journal, `1\n${entry(0, typed('a').steps)}`);
    },
  },
  {
    name: 'a meta hash with an empty epoch',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '0', epoch: '' });
    },
  },
  {
    name: 'a version that is a number but not a count',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '1.0', epoch });
      await client.rPush(keys.journal, `1\n${entry(0, typed('a').steps)}`);
    },
  },
  {
    name: 'a journal without its meta hash',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.rPush(keys.journal, `1\n${entry(0, typed('a').steps)}`);
    },
  },
  {
    name: 'a snapshot without its meta hash',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.set(keys.snapshot, snapshot(JSON.stringify(emptyDoc().toJSON()), 0));
    },
  },
  {
    name: 'a journal entry without its <end> prefix',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '1', epoch });
      await client.rPush(keys.journal, entry(0, typed('a').steps));
    },
  },
  {
    name: 'a journal entry whose <end> prefix is not its end',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '1', epoch });
      await client.rPush(keys.journal, `7\n${entry(0, typed('a').steps)}`);
    },
  },
  {
    name: 'a snapshot of another epoch',
    only: 'redis',
    snapshot: null,
    journal: [],
    version: 0,
    writeRedis: async (client, keys) => {
      await client.hSet(keys.meta, { version: '0', epoch });
      await client.set(
        keys.snapshot,
        snapshot(JSON.stringify(emptyDoc().toJSON()), 0).replace(epoch, 'another-epoch'),
      );
    },
  },
  {
    // Written by a server with a higher MAX_DOC_BYTES: served, every join answer would carry
    // more than the socket buffer holds, and end in a slow-consumer disconnect.
    name: 'a snapshot larger than MAX_DOC_BYTES',
    snapshot: snapshot(
      `{"type":"doc","content":[{"type":"paragraph","content":[{"type":"text","text":"${'x'.repeat(300_000)}"}]}]}`,
      0,
    ),
    journal: [],
    version: 0,
  },
  {
    // The crash loop of the issue: an old server accepted wraps one by one and crashed on the
    // first snapshot of the result; every restart replayed them and crashed again.
    name: '2,000 wrap steps journaled by an old server',
    snapshot: null,
    journal: [entry(0, deep.steps), ...entries(oldWraps, 100, 1)],
    version: 1 + oldWraps.length,
  },
  {
    name: '2,000 wraps in the snapshot an old server wrote of them',
    snapshot: snapshot(
      `{"type":"doc","content":[${'{"type":"blockquote","content":['.repeat(2000)}${paragraph}${']}'.repeat(2000)}]}`,
      2001,
    ),
    journal: [],
    version: 2001,
  },
  {
    name: 'a journal of 40 doubling steps (replace with from > to)',
    snapshot: null,
    journal: [entry(0, typed('abcdefgh').steps), entry(1, doubling)],
    version: 1 + doubling.length,
  },
];

/// A document the store itself wrote, with an ordered list in it: it must load and be edited.
function controlHistory(): StepJSON[] {
  const tr = new Transform(emptyDoc());
  tr.insert(1, schema.text('control'));
  tr.insert(
    tr.doc.content.size,
    schema.node('ordered_list', null, [
      schema.node('list_item', null, [schema.node('paragraph', null, [schema.text('one')])]),
    ]),
  );
  return tr.steps.map((step) => step.toJSON() as StepJSON);
}

async function writeControl(store: Store, docId: string): Promise<void> {
  const steps = controlHistory();
  const outcome = await store.append(docId, {
    epoch,
    baseVersion: 0,
    steps,
    clientIDs: steps.map(() => 'control'),
  });
  assert.equal(outcome.ok, true);
}

/// The file store's paths for `docId`, as server/stores/file/doc_files.ts names them.
function filePaths(
  dataDir: string,
  docId: string,
): { dir: string; state: string; journal: string } {
  const hash = createHash('sha256').update(docId).digest('hex');
  const readable = docId
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, '_')
    .slice(0, 64);
  const dir = join(dataDir, hash.slice(0, 2));
  const base = `${readable}.${hash.slice(0, 32)}`;
  return { dir, state: join(dir, `${base}.state.json`), journal: join(dir, `${base}.0.journal`) };
}

async function writeFilePoison(dataDir: string, docId: string, poison: Poison): Promise<void> {
  const paths = filePaths(dataDir, docId);
  await mkdir(paths.dir, { recursive: true });
  await writeFile(
    paths.state,
    `{"docId":${JSON.stringify(docId)},"epoch":"${epoch}","generation":0,"snapshot":${poison.snapshot ?? 'null'}}`,
  );
  await writeFile(paths.journal, poison.journal.map((line) => line + '\n').join(''));
}

async function writeRedisPoison(client: RedisClient, docId: string, poison: Poison): Promise<void> {
  const keys = docKeys('scriptorium:', docId);
  if (poison.writeRedis) return poison.writeRedis(client, keys);
  await client.hSet(keys.meta, { version: String(poison.version), epoch });
  if (poison.snapshot !== null) await client.set(keys.snapshot, poison.snapshot);
  for (const text of poison.journal) {
    // "<end version>\n<entry>", the end read from the entry when it parses.
    let end = 1;
    try {
      const parsed = JSON.parse(text) as { baseVersion: number; steps: unknown[] };
      end = parsed.baseVersion + parsed.steps.length;
    } catch {
      // A torn entry: any end will do.
    }
    await client.rPush(keys.journal, `${end}\n${text}`);
  }
}

/// Joins `docId` from a fresh socket and returns the answer; fails the test when the server
/// drops the connection or does not answer within 20 s.
async function joinAnswer(url: string, docId: string): Promise<unknown> {
  const socket = rawSocket(url, docId, 'reader');
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      ask(socket, 'join', {}),
      new Promise((_, reject) => {
        socket.once('disconnect', () => reject(new Error(`${docId}: the server dropped the join`)));
        timer = setTimeout(() => reject(new Error(`${docId}: no answer to join in 20 s`)), 20_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    socket.close();
  }
}

/// Pino lines at level error (50) about `docId`.
function errorLines(server: ServerProcess, docId: string): { msg: string }[] {
  const lines: { msg: string }[] = [];
  for (const line of server.output().split('\n')) {
    if (!line.startsWith('{')) continue;
    const parsed = JSON.parse(line) as { level: number; doc?: string; msg: string };
    if (parsed.level >= 50 && parsed.doc === docId) lines.push(parsed);
  }
  return lines;
}

/// What every poisoned store must show: the server up, the control document loading (with its
/// ordered list) and editable, each poisoned document refused `corrupt` on every join with one
/// error logged, and the process never gone.
async function checkServer(
  server: ServerProcess,
  docIds: Map<string, string>,
  controlId: string,
): Promise<void> {
  const pid = server.child.pid;
  for (const [name, docId] of docIds) {
    for (let attempt = 1; attempt <= 3; attempt++) {
      assertCoded(await joinAnswer(server.url, docId), 'corrupt', `${name} (join ${attempt})`);
    }
    const logged = errorLines(server, docId);
    assert.equal(logged.length, 1, `${name}: one error logged, not one per join`);
    assert.match(logged[0]!.msg, /quarantined/);
    assert.equal(server.child.exitCode, null, `${name}: the server is still running`);
  }
  // Every other document is served, and edited.
  const control = await readServed(server.url, controlId);
  assert.ok(JSON.stringify(control.doc).includes('ordered_list'));
  const socket = rawSocket(server.url, controlId, 'editor');
  try {
    const joined = await ask<{ ok: boolean; version: number }>(socket, 'join', {});
    assert.equal(joined.ok, true);
    const step = {
      stepType: 'replace',
      from: 1,
      to: 1,
      slice: { content: [{ type: 'text', text: '!' }] },
    };
    assert.deepEqual(await ask(socket, 'steps', { version: joined.version, steps: [step] }), {
      ok: true,
      version: joined.version + 1,
    });
  } finally {
    socket.close();
  }
  const health = await fetch(`${server.url}/healthz`);
  assert.equal(health.status, 200);
  assert.equal(server.child.pid, pid);
  assert.equal(server.child.exitCode, null, 'the server is still running');
  // Refusing damaged data must not cost what applying it would: replaying the doubling
  // journal took gigabytes (and a dozen seconds) before it failed.
  const peakMB = (await statusKB(pid!, 'VmHWM')) / 1024;
  assert.ok(peakMB < 512, `the server's peak RSS stayed under 512 MB (${peakMB.toFixed(0)} MB)`);
}

/// A field of /proc/<pid>/status, in kB.
async function statusKB(pid: number, field: string): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
  assert.ok(match, `${field} in /proc/${pid}/status`);
  return Number(match[1]);
}

function poisonsFor(store: 'file' | 'redis'): Poison[] {
  return poisons.filter((poison) => poison.only === undefined || poison.only === store);
}

describe('poisoned storage', () => {
  it('builds the old server’s wraps as tr.wrap does', () => {
    const doc = new Transform(emptyDoc()).insert(1, schema.text('deep')).doc;
    assert.deepEqual(oldWraps.slice(0, 50), wrapSteps(doc, 50));
  });

  describe('file store', () => {
    let dataDir: string;
    let server: ServerProcess | null = null;
    const docIds = new Map<string, string>();
    const controlId = 'control';
    before(async () => {
      dataDir = await mkdtemp(join(tmpdir(), 'scriptorium-poison-'));
      const store = new FileStore({ dataDir });
      await writeControl(store, controlId);
      await store.close();
      // The path helper names the files the store writes.
      await access(filePaths(dataDir, controlId).state);
      for (const [i, poison] of poisonsFor('file').entries()) {
        const docId = `poison-${i}`;
        docIds.set(poison.name, docId);
        await writeFilePoison(dataDir, docId, poison);
      }
    });
    after(async () => {
      await server?.stop('SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    });

    it('starts, serves the other documents, and answers each poisoned one corrupt every time', async () => {
      server = await startServerProcess({ DATA_DIR: dataDir, ...noAdmissionEnv });
      await checkServer(server, docIds, controlId);
    });

    it('does the same after a restart: no crash, no loop', async () => {
      assert.equal(await server!.stop(), 0, 'a clean shutdown');
      server = await startServerProcess({ DATA_DIR: dataDir, ...noAdmissionEnv });
      await checkServer(server, docIds, controlId);
    });
  });

  describe('Redis', () => {
    const run = randomUUID().slice(0, 8);
    let client: RedisClient;
    let server: ServerProcess | null = null;
    const docIds = new Map<string, string>();
    const controlId = `poison-${run}-control`;
    before(async () => {
      // The child server uses the default key prefix; the run id in every document id keeps
      // this run's keys apart (and lets `after` delete exactly them).
      client = createClient({ url: redisUrl });
      await client.connect();
      const store = new RedisStore({ url: redisUrl });
      await store.ready();
      await writeControl(store, controlId);
      await store.close();
      for (const [i, poison] of poisonsFor('redis').entries()) {
        const docId = `poison-${run}-${i}`;
        docIds.set(poison.name, docId);
        await writeRedisPoison(client, docId, poison);
      }
    });
    after(async () => {
      await server?.stop('SIGKILL');
      for await (const keys of client.scanIterator({
        MATCH: `scriptorium:{poison-${run}-*`,
        COUNT: 1000,
      }))
        if (keys.length > 0) await client.del(keys);
      await client.close();
    });

    it('starts, serves the other documents, and answers each poisoned one corrupt every time', async () => {
      server = await startServerProcess({ REDIS_URL: redisUrl, ...noAdmissionEnv });
      await checkServer(server, docIds, controlId);
    });

    it('does the same after a restart: no crash, no loop', async () => {
      assert.equal(await server!.stop(), 0, 'a clean shutdown');
      server = await startServerProcess({ REDIS_URL: redisUrl, ...noAdmissionEnv });
      await checkServer(server, docIds, controlId);
    });
  });
});
