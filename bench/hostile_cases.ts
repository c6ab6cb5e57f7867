import type { StepJSON, StepsAnswer, SyncAnswer } from '../schema/events.js';
import { docId, sleep, type Case, type CaseContext } from './hostile_docs.js';
import { ask, gateBytes, HostileDoc, openSocket, outcomeOf } from './hostile_client.js';
import { fit, jsonDepth, nestedArrays, sendFrame, typing } from './hostile_payloads.js';

// The worst messages a client may send at the server's limits, for `bench/hostile-block.ts`.
// Each case has an unmeasured `prepare` (connect, grow or touch a document) and a measured
// `run` that sends the message(s) and resolves with the outcome once answered. The documents
// they run on are described in `hostile_docs.ts`.

/// Every case, in the order one repetition runs them (later ones on A depend on earlier ones
/// having left it grown; `replace-all` empties it and comes last).
export function allCases(): Case[] {
  return [
    ...frameCases(),
    ...stepCases(),
    ...documentACases(),
    ...markCases(),
    ...joinCases(),
    ...historyCases(),
    ...lifecycleCases(),
  ];
}

/// Frames at the engine's cap: nested to the depth limit, one past it, and one wide object.
function frameCases(): Case[] {
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
  ];
}

/// Single messages at the step limits on new documents: the largest insert, the deepest
/// slice, the longest rebase.
function stepCases(): Case[] {
  return [
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
  ];
}

/// Batches of as many steps as fit on A, each pair leaving it as it was.
function documentACases(): Case[] {
  return [
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
  ];
}

/// Marks over the whole of B.
function markCases(): Case[] {
  return [
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
  ];
}

/// Joins and pulls of the whole of N.
function joinCases(): Case[] {
  return [
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
  ];
}

/// The longest history a pull may answer with, HTTP reads of N, and a join of C.
function historyCases(): Case[] {
  return [
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
  ];
}

/// N leaving memory and coming back, then replaced whole (empties it: runs last).
function lifecycleCases(): Case[] {
  return [
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

/// `count` GETs of N at once; the distinct outcomes, joined by `/`.
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

/// The documents in the server's memory, as `/healthz` counts them.
async function documentsLoaded(url: string): Promise<number> {
  const response = await fetch(new URL('/healthz', url));
  const body = (await response.json()) as { documents: number };
  return body.documents;
}

/// The distinct values, in first-seen order, joined by `/`.
function distinct(values: readonly string[]): string {
  return [...new Set(values)].join('/');
}
