import type { Socket } from 'socket.io-client';
import type { StepJSON, StepsAnswer, SyncAnswer } from '../schema/events.js';
import type { Config } from '../server/config.js';
import {
  ask,
  gateBytes,
  HostileDoc,
  openSocket,
  outcomeOf,
  repeatShape,
  type GrowthShape,
} from './hostile_client.js';

// The worst messages a client may send at the server's limits, for `bench/hostile-block.ts`.
// Each case has an unmeasured `prepare` (connect, grow or touch a document) and a measured
// `run` that sends the message(s) and resolves with the outcome once answered.
//
// The documents are grown to the limits by the hostile client itself, with pastes just under
// `maxMessageBytes` (halved whenever one is refused), as an attacker would:
// - A: empty paragraphs (~21 bytes, 2 positions each) all inside one blockquote: the longest
//   list of children, so that every step copies the longest fragment; the blockquote lets a
//   lift/wrap pair leave the document as it was. Its growth stops when even a one-paragraph
//   paste takes longer than `maxApplyMs`, which may come before `maxDocBytes`.
// - N: empty paragraphs in blockquotes of 256, up to `maxDocBytes`: the most nodes a
//   document may hold, for everything that walks the whole document (serialise, parse, check).
// - B: one-character paragraphs (~60 bytes) in blockquotes of 256, up to `maxDocBytes`: the
//   most text nodes for a mark to touch.
// - C: paragraphs of control characters (U+0001), which the size estimate counts as one byte
//   each and JSON writes as six (`\u0001`): the largest JSON a document within limits has.

/// The documents, by letter.
export type DocName = 'a' | 'n' | 'b' | 'c';

/// What the cases share within one repetition (one server child).
export interface CaseContext {
  url: string;
  config: Readonly<Config>;
  docs: Partial<Record<DocName, HostileDoc>>;
  /// Sockets opened by a `prepare`, used by its `run`, closed after the case.
  sockets: Socket[];
  /// `/healthz` documents count before the last socket of N left (see `leave-snapshot`).
  documentsBeforeLeave: number | null;
  /// Whether the last attempt to make a new version of N was accepted.
  touched: boolean;
  /// The pass (1: every case runs in code the server has not run yet; 2: again, warm), which
  /// names the documents, so that a pass starts from new ones.
  pass: number;
}

/// The id of document `name` in this pass.
function docId(ctx: CaseContext, name: string): string {
  return `p${ctx.pass}-hostile-${name}`;
}

/// One case: what it sends, and on which document.
export interface Case {
  name: string;
  /// Documents it needs grown first.
  needs: DocName[];
  /// The table's description.
  what: string;
  prepare?: (ctx: CaseContext) => Promise<void>;
  run: (ctx: CaseContext) => Promise<string>;
  /// How long to keep watching after the answer (work the server does after answering).
  settleMs?: number;
}

// Small enough that one group fits the smallest message limits worth trying (64 KiB).
const groupSize = 256;

/// Grows the documents `needs` names that are not grown yet; logs what each became.
export async function growDocs(
  ctx: CaseContext,
  needs: readonly DocName[],
  log: (line: string) => void,
): Promise<void> {
  const maxBytes = ctx.config.maxMessageBytes;
  if (needs.includes('a') && !ctx.docs.a) {
    const a = await HostileDoc.open(ctx.url, docId(ctx, 'a'), 'mallory-a');
    const wrapped = await a.send([
      {
        stepType: 'replace',
        from: 0,
        to: 2,
        slice: { content: [{ type: 'blockquote', content: [{ type: 'paragraph' }] }] },
      },
    ]);
    if (!wrapped.ok) throw new Error(`hostile-a: ${wrapped.code}`);
    a.size = 4;
    const shape = repeatShape({ type: 'paragraph' }, 2, maxBytes);
    const sent = await a.grow(shape, () => a.size - 1, 4096);
    const paragraphs = (a.size - 2) / 2;
    log(
      `A: ${paragraphs} empty paragraphs in one blockquote (~${mib(paragraphs * 21)} MiB), ${sent} pastes`,
    );
    ctx.docs.a = a;
  }
  if (needs.includes('n') && !ctx.docs.n) {
    const n = await HostileDoc.open(ctx.url, docId(ctx, 'n'), 'mallory-n');
    const group = { type: 'blockquote', content: new Array(groupSize).fill({ type: 'paragraph' }) };
    const sent = await n.grow(repeatShape(group, 2 + 2 * groupSize, maxBytes), () => n.size, 64);
    const paragraphs = 1 + ((n.size - 2) / (2 + 2 * groupSize)) * groupSize;
    log(
      `N: ${paragraphs} empty paragraphs in blockquotes of ${groupSize} (~${mib(paragraphs * 21)} MiB), ${sent} pastes`,
    );
    ctx.docs.n = n;
  }
  if (needs.includes('b') && !ctx.docs.b) {
    const b = await HostileDoc.open(ctx.url, docId(ctx, 'b'), 'mallory-b');
    const paragraph = { type: 'paragraph', content: [{ type: 'text', text: 'x' }] };
    const group = { type: 'blockquote', content: new Array(groupSize).fill(paragraph) };
    const sent = await b.grow(repeatShape(group, 2 + 3 * groupSize, maxBytes), () => b.size, 32);
    const paragraphs = ((b.size - 2) / (2 + 3 * groupSize)) * groupSize;
    log(
      `B: ${paragraphs} one-character paragraphs in blockquotes of ${groupSize} (~${mib(paragraphs * 60)} MiB), ${sent} pastes`,
    );
    ctx.docs.b = b;
  }
  if (needs.includes('c') && !ctx.docs.c) {
    const c = await HostileDoc.open(ctx.url, docId(ctx, 'c'), 'mallory-c');
    // Each character is six bytes on the wire: the engine's frame cap (2 × maxMessageBytes)
    // binds before the gate's estimate does.
    const shape: GrowthShape = {
      unit: (n) => ({
        content: [{ type: 'paragraph', content: [{ type: 'text', text: '\u0001'.repeat(n) }] }],
        positions: n + 2,
      }),
      maxN: Math.min(maxBytes - 512, Math.floor((2 * maxBytes - 4096) / 6)),
    };
    const sent = await c.grow(shape, () => c.size, shape.maxN);
    log(
      `C: ${c.size} positions of control characters (~${mib(6 * c.size)} MiB of JSON), ${sent} pastes`,
    );
    ctx.docs.c = c;
  }
}

/// Every case, in the order one repetition runs them (later ones on A depend on earlier ones
/// having left it grown; `replace-all` empties it and comes last).
export function allCases(): Case[] {
  return [
    {
      name: 'frame-depth-128',
      needs: [],
      what: 'frame at the engine cap (2 × maxMessageBytes) of arrays nested to JSON depth 128',
      prepare: async (ctx) => {
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'frames'), 'mallory-f'));
      },
      run: (ctx) => sendFrame(ctx, nestedArrays(ctx.config.maxJsonDepth - 2)),
    },
    {
      name: 'frame-depth-129',
      needs: [],
      what: 'the same, one level deeper than maxJsonDepth',
      prepare: async (ctx) => {
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'frames'), 'mallory-f'));
      },
      run: (ctx) => sendFrame(ctx, nestedArrays(ctx.config.maxJsonDepth - 1)),
    },
    {
      name: 'frame-keys',
      needs: [],
      what: 'frame at the engine cap of one object with distinct keys',
      prepare: async (ctx) => {
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'frames'), 'mallory-f'));
      },
      run: (ctx) => {
        const object: Record<string, number> = {};
        const target = 2 * ctx.config.maxMessageBytes - 4096;
        // `"k<i>":0,` on the wire
        for (let i = 0, bytes = 0; bytes < target; i++) {
          const key = `k${i.toString(36)}`;
          object[key] = 0;
          bytes += key.length + 5;
        }
        return ask<StepsAnswer>(ctx.sockets[0]!, 'steps', { version: 0, steps: [object] }).then(
          outcomeOf,
        );
      },
    },
    {
      name: 'insert-1mib',
      needs: [],
      what: 'one step inserting a text of maxMessageBytes into a new document',
      prepare: async (ctx) => {
        const doc = await HostileDoc.open(ctx.url, docId(ctx, 'e'), 'mallory-e');
        ctx.sockets.push(doc.socket);
      },
      run: async (ctx) => {
        const step = (text: string) => ({
          stepType: 'replace',
          from: 1,
          to: 1,
          slice: { content: [{ type: 'text', text }] },
        });
        const room = ctx.config.maxMessageBytes - gateBytes({ version: 0, steps: [step('')] });
        const answer = await ask<StepsAnswer>(ctx.sockets[0]!, 'steps', {
          version: 0,
          steps: [step('a'.repeat(room))],
        });
        return outcomeOf(answer);
      },
    },
    {
      name: 'slice-depth-128',
      needs: [],
      what: 'a step whose slice nests blockquotes to JSON depth maxJsonDepth',
      prepare: async (ctx) => {
        const doc = await HostileDoc.open(ctx.url, docId(ctx, 'd'), 'mallory-d');
        ctx.sockets.push(doc.socket);
      },
      run: async (ctx) => {
        let payload: unknown = null;
        for (let levels = 1; ; levels++) {
          let node: unknown = { type: 'paragraph' };
          for (let i = 0; i < levels; i++) node = { type: 'blockquote', content: [node] };
          const next = {
            version: 0,
            steps: [{ stepType: 'replace', from: 0, to: 0, slice: { content: [node] } }],
          };
          if (jsonDepth(next) > ctx.config.maxJsonDepth) break;
          payload = next;
        }
        return outcomeOf(await ask<StepsAnswer>(ctx.sockets[0]!, 'steps', payload));
      },
    },
    {
      name: 'rebase',
      needs: [],
      what: 'as many typing steps as fit, made before maxRebaseSteps others, rebased over them',
      prepare: async (ctx) => {
        const first = await HostileDoc.open(ctx.url, docId(ctx, 'g'), 'mallory-g1');
        const second = await openSocket(ctx.url, docId(ctx, 'g'), 'mallory-g2');
        await ask<SyncAnswer>(second, 'join', {});
        // The history to rebase over, in batches of 50 so that each fits `maxApplyMs` (sent
        // again when a busy machine makes one miss it).
        const over = ctx.config.maxRebaseSteps;
        for (let done = 0, failures = 0; done < over;) {
          const answer = await first.send(typing(Math.min(50, over - done), 'a', done));
          if (answer.ok) done += 50;
          else if (++failures > 5) throw new Error(`rebase setup: ${answer.code}`);
        }
        ctx.sockets.push(first.socket, second);
      },
      run: async (ctx) => {
        const steps = fit(ctx.config, typing(ctx.config.maxStepsPerBatch, 'b'));
        return outcomeOf(await ask<StepsAnswer>(ctx.sockets[1]!, 'steps', { version: 0, steps }));
      },
    },
    {
      name: 'tiny-steps',
      needs: ['a'],
      what: 'A: as many steps as fit (≤ maxStepsPerBatch), deleting and re-inserting paragraphs across the document',
      run: async (ctx) => {
        const a = ctx.docs.a!;
        const paragraphs = (a.size - 2) / 2;
        const pairs = ctx.config.maxStepsPerBatch >> 1;
        const steps: StepJSON[] = [];
        // From the end backwards, so that no step moves the positions of the next.
        for (let k = 0; k < pairs; k++) {
          const p = paragraphs - 1 - Math.floor((k * paragraphs) / pairs);
          const pos = 1 + 2 * p;
          steps.push({ stepType: 'replace', from: pos, to: pos + 2 });
          steps.push({
            stepType: 'replace',
            from: pos,
            to: pos,
            slice: { content: [{ type: 'paragraph' }] },
          });
        }
        return outcomeOf(await a.send(fit(ctx.config, steps)));
      },
    },
    {
      name: 'wrap-lift',
      needs: ['a'],
      what: 'A: as many steps as fit, lifting the whole document out of its blockquote and wrapping it back',
      run: async (ctx) => {
        const a = ctx.docs.a!;
        const size = a.size;
        const steps: StepJSON[] = [];
        for (let k = 0; k < ctx.config.maxStepsPerBatch >> 1; k++) {
          steps.push({
            stepType: 'replaceAround',
            from: 0,
            to: size,
            gapFrom: 1,
            gapTo: size - 1,
            insert: 0,
            structure: true,
          });
          steps.push({
            stepType: 'replaceAround',
            from: 0,
            to: size - 2,
            gapFrom: 0,
            gapTo: size - 2,
            insert: 1,
            slice: { content: [{ type: 'blockquote' }] },
            structure: true,
          });
        }
        return outcomeOf(await a.send(fit(ctx.config, steps)));
      },
    },
    {
      name: 'addmark-strong',
      needs: ['b'],
      what: 'B: one step adding strong to the whole document',
      run: async (ctx) => {
        const b = ctx.docs.b!;
        return outcomeOf(
          await b.send([{ stepType: 'addMark', from: 0, to: b.size, mark: { type: 'strong' } }]),
        );
      },
    },
    {
      name: 'addmark-link-max',
      needs: ['b'],
      what: 'B: one step adding a link whose href is maxAttributeBytes long to the whole document',
      run: async (ctx) => {
        const b = ctx.docs.b!;
        const prefix = 'https://example.com/';
        const href = prefix + 'a'.repeat(ctx.config.maxAttributeBytes - prefix.length);
        const mark = { type: 'link', attrs: { href } };
        return outcomeOf(await b.send([{ stepType: 'addMark', from: 0, to: b.size, mark }]));
      },
      settleMs: 1000,
    },
    {
      name: 'join',
      needs: ['n'],
      what: 'N: join by a new socket, first since the last edit (document serialised, then encoded)',
      prepare: async (ctx) => {
        // A new version, so that the join serialises it; were the edit refused, the join would
        // still be the first serialisation since the last paste (no case before it makes one).
        await touch(ctx.docs.n!);
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'n'), 'mallory-n2'));
      },
      run: async (ctx) => outcomeOf(await ask<SyncAnswer>(ctx.sockets[0]!, 'join', {})),
    },
    {
      name: 'join-cached',
      needs: ['n'],
      what: 'N: join by a new socket, the document already serialised at this version',
      prepare: async (ctx) => {
        await ask<SyncAnswer>(ctx.docs.n!.socket, 'pull', {});
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'n'), 'mallory-n2'));
      },
      run: async (ctx) => outcomeOf(await ask<SyncAnswer>(ctx.sockets[0]!, 'join', {})),
    },
    {
      name: 'pull-30',
      needs: ['n'],
      what: 'N: 30 pulls of the whole document sent at once on one socket of their own (one that never reads is dropped as a slow consumer past maxSocketBufferBytes)',
      prepare: async (ctx) => {
        // A socket of its own: the server may drop it, and the later cases need N's.
        const socket = await openSocket(ctx.url, docId(ctx, 'n'), 'mallory-pulls');
        ctx.sockets.push(socket);
        await ask<SyncAnswer>(socket, 'join', {});
      },
      run: async (ctx) => {
        const socket = ctx.sockets.pop()!;
        const answers = await Promise.allSettled(
          Array.from({ length: 30 }, () => ask<SyncAnswer>(socket, 'pull', {})),
        );
        socket.close();
        return distinct(
          answers.map((answer) =>
            answer.status === 'fulfilled' ? outcomeOf(answer.value) : 'dropped',
          ),
        );
      },
    },
    {
      name: 'pull-history',
      needs: [],
      what: 'a pull from version 0 of a new document whose history is maxHistoryBytes of control characters (answered with the steps)',
      prepare: async (ctx) => {
        const h = await HostileDoc.open(ctx.url, docId(ctx, 'h'), 'mallory-h');
        // Pastes of control characters (six bytes each on the wire), each deleted again, until
        // the history holds as many bytes as it may without being cut.
        const { maxMessageBytes, maxHistoryBytes, maxDocBytes } = ctx.config;
        const chars = Math.min(
          maxMessageBytes - 512,
          Math.floor((2 * maxMessageBytes - 4096) / 6),
          maxDocBytes - 1024,
        );
        const pairs = Math.floor(maxHistoryBytes / (chars + 256));
        for (let i = 0; i < pairs; i++) {
          const text = '\u0001'.repeat(chars);
          for (const step of [
            { stepType: 'replace', from: 1, to: 1, slice: { content: [{ type: 'text', text }] } },
            { stepType: 'replace', from: 1, to: 1 + chars },
          ]) {
            const answer = await h.send([step]);
            if (!answer.ok) throw new Error(`pull-history setup: ${answer.code}`);
          }
        }
        ctx.sockets.push(h.socket);
      },
      run: async (ctx) => {
        const answer = await ask<SyncAnswer>(ctx.sockets[0]!, 'pull', { version: 0 });
        return !answer.ok
          ? answer.code
          : 'steps' in answer
            ? `ok, ${answer.steps.length} steps`
            : 'ok, document';
      },
      settleMs: 1000,
    },
    {
      name: 'http-get',
      needs: ['n'],
      what: 'N: GET /docs/:id (serialised on every request)',
      run: async (ctx) => httpGets(ctx, 1),
    },
    {
      name: 'http-get-10',
      needs: ['n'],
      what: 'N: 10 GET /docs/:id at once',
      run: async (ctx) => httpGets(ctx, 10),
    },
    {
      name: 'join-escaped',
      needs: ['c'],
      what: 'C: join by a new socket (JSON ~6 × the estimated size)',
      prepare: async (ctx) => {
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'c'), 'mallory-c2'));
      },
      run: async (ctx) => outcomeOf(await ask<SyncAnswer>(ctx.sockets[0]!, 'join', {})),
      settleMs: 1000,
    },
    {
      name: 'leave-snapshot',
      needs: ['n'],
      what: "N: the last socket leaves after an edit (snapshot: the document's JSON)",
      prepare: async (ctx) => {
        ctx.touched = await touch(ctx.docs.n!);
        ctx.documentsBeforeLeave = await documentsLoaded(ctx.url);
      },
      run: async (ctx) => {
        const socket = ctx.docs.n!.socket;
        await new Promise<void>((resolve) => {
          socket.once('disconnect', () => resolve());
          socket.close();
        });
        // Without a new version the snapshot reuses the JSON an earlier join made: say so.
        return ctx.touched ? 'left' : 'left (no edit fit maxApplyMs: JSON cached)';
      },
      settleMs: 1000,
    },
    {
      name: 'reload-join',
      needs: ['n'],
      what: 'N: first join after it was unloaded (snapshot parsed and checked, then serialised)',
      prepare: async (ctx) => {
        const n = ctx.docs.n!;
        if (n.socket.connected) {
          ctx.documentsBeforeLeave = await documentsLoaded(ctx.url);
          n.socket.close();
        }
        const deadline = Date.now() + 10_000 + ctx.config.idleUnloadMs;
        while ((await documentsLoaded(ctx.url)) >= ctx.documentsBeforeLeave!) {
          if (Date.now() > deadline) throw new Error('N was not unloaded');
          await sleep(200);
        }
        ctx.sockets.push(await openSocket(ctx.url, docId(ctx, 'n'), 'mallory-n'));
      },
      run: async (ctx) => {
        const n = ctx.docs.n!;
        const socket = ctx.sockets.pop()!;
        return n.rejoin(socket);
      },
      settleMs: 1000,
    },
    {
      name: 'replace-all',
      needs: ['n'],
      what: 'N: one step replacing the whole document with one paragraph',
      run: async (ctx) => {
        const n = ctx.docs.n!;
        const answer = await n.send([
          { stepType: 'replace', from: 0, to: n.size, slice: { content: [{ type: 'paragraph' }] } },
        ]);
        if (answer.ok) n.size = 2;
        return outcomeOf(answer);
      },
    },
  ];
}

/// The longest even-length prefix of `steps` (the cases send steps in pairs that undo each
/// other) whose message stays within `maxMessageBytes`: as many as a client may send at once.
function fit(config: Readonly<Config>, steps: StepJSON[]): StepJSON[] {
  let bytes = gateBytes({ version: 0, steps: [] });
  let count = 0;
  while (count < steps.length) {
    bytes += gateBytes(steps[count]) + 1;
    if (bytes > config.maxMessageBytes) break;
    count++;
  }
  return steps.slice(0, count - (count % 2));
}

/// Sends `{version: 0, steps: [item, item, …]}` in one frame just under the engine's cap.
async function sendFrame(ctx: CaseContext, item: unknown): Promise<string> {
  const each = JSON.stringify(item).length + 1;
  const count = Math.floor((2 * ctx.config.maxMessageBytes - 4096) / each);
  const steps = new Array(count).fill(item);
  return outcomeOf(await ask<StepsAnswer>(ctx.sockets[0]!, 'steps', { version: 0, steps }));
}

/// `[[[…]]]`, `levels` arrays deep.
function nestedArrays(levels: number): unknown {
  let value: unknown[] = [];
  for (let i = 1; i < levels; i++) value = [value];
  return value;
}

function jsonDepth(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  let deepest = 0;
  for (const child of Object.values(value)) deepest = Math.max(deepest, jsonDepth(child));
  return deepest + 1;
}

/// `count` steps typing `char` one after another in the first paragraph, from its offset `at`.
function typing(count: number, char: string, at = 0): StepJSON[] {
  const steps: StepJSON[] = [];
  for (let i = at; i < at + count; i++) {
    steps.push({
      stepType: 'replace',
      from: 1 + i,
      to: 1 + i,
      slice: { content: [{ type: 'text', text: char }] },
    });
  }
  return steps;
}

/// Tries to make a new version of N without changing it: its first paragraph (top level, at
/// 0) replaced by an equal one, in one step. Tries three times (`maxApplyMs` on a busy
/// machine) and returns whether it was accepted.
async function touch(n: HostileDoc): Promise<boolean> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const answer = await n.send([
      { stepType: 'replace', from: 0, to: 2, slice: { content: [{ type: 'paragraph' }] } },
    ]);
    if (answer.ok) return true;
    await sleep(200);
  }
  return false;
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(2);
}

async function httpGets(ctx: CaseContext, count: number): Promise<string> {
  const url = new URL(`/docs/${docId(ctx, 'n')}`, ctx.url).toString();
  const statuses = await Promise.all(
    Array.from({ length: count }, async () => {
      const response = await fetch(url);
      await response.arrayBuffer();
      return response.ok ? 'ok' : `HTTP ${response.status}`;
    }),
  );
  return distinct(statuses);
}

async function documentsLoaded(url: string): Promise<number> {
  const response = await fetch(new URL('/healthz', url));
  const body = (await response.json()) as { documents: number };
  return body.documents;
}

function distinct(values: readonly string[]): string {
  return [...new Set(values)].join('/');
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
