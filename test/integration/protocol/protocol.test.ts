import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { emptyDoc } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { waitFor } from '../../support/wait.js';

function typing(text: string, at: number, doc = emptyDoc()) {
  return EditorState.create({ doc })
    .tr.insertText(text, at)
    .steps.map((step) => step.toJSON());
}

describe('protocol', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('join answers the document, or the steps since a version, and pull answers the same', async (t) => {
    const a = rawSocket(server.url, 'joins', 'a');
    const b = rawSocket(server.url, 'joins', 'b');
    t.after(() => {
      a.close();
      b.close();
    });
    const first = await ask<SyncAnswer>(a, 'join', {});
    assert.ok(first.ok && 'doc' in first);
    assert.equal(first.version, 0);
    assert.deepEqual(first.doc, emptyDoc().toJSON());
    const epoch = first.epoch;
    assert.deepEqual(await ask(a, 'steps', { version: 0, steps: typing('one', 1) }), {
      ok: true,
      version: 1,
    });

    const bySteps = await ask<SyncAnswer>(b, 'join', { version: 0, epoch });
    assert.ok(bySteps.ok && 'steps' in bySteps);
    assert.equal(bySteps.version, 1);
    assert.deepEqual(bySteps.clientIDs, ['a']);
    assert.equal(bySteps.steps.length, 1);

    const otherEpoch = await ask<SyncAnswer>(b, 'pull', {
      version: 0,
      epoch: 'another-history',
    });
    assert.ok(otherEpoch.ok && 'doc' in otherEpoch, 'another epoch gets the whole document');
    // b has no batch in it; a's ends at 1 (what a client whose ack was lost compares).
    assert.equal(otherEpoch.acceptedThrough, undefined);
    const ofA = await ask<SyncAnswer>(a, 'pull', {});
    assert.ok(ofA.ok && 'doc' in ofA);
    assert.equal(ofA.acceptedThrough, 1);
    const ahead = await ask<SyncAnswer>(b, 'pull', { version: 50, epoch });
    assert.ok(ahead.ok && 'doc' in ahead, 'a version beyond the history gets the whole document');
    // A join's answer carries the limits a batch must keep to; a pull's does not.
    // With what the payload gate refuses unread (a string, a nesting), which a client
    // checks its steps against rather than be struck for them.
    assert.deepEqual(first.limits, {
      maxMessageBytes: 64 * 1024,
      maxStepsPerBatch: 1000,
      maxAttributeBytes: 4 * 1024,
      maxJsonDepth: 128,
    });
    const { limits, ...withoutLimits } = bySteps;
    assert.deepEqual(limits, first.limits);
    const pulled = await ask<SyncAnswer>(b, 'pull', { version: 0, epoch });
    assert.deepEqual(pulled, withoutLimits);
  });

  it('sends every accepted step to every socket, the sender first sees the broadcast, then the ack', async (t) => {
    const a = rawSocket(server.url, 'order', 'a');
    const b = rawSocket(server.url, 'order', 'b');
    t.after(() => {
      a.close();
      b.close();
    });
    await ask(a, 'join', {});
    await ask(b, 'join', {});
    const seenByA: string[] = [];
    const seenByB: unknown[] = [];
    a.on('steps', (message: { version: number }) => seenByA.push(`steps@${message.version}`));
    b.on('steps', (message: unknown) => seenByB.push(message));
    const answer = await ask<StepsAnswer>(a, 'steps', { version: 0, steps: typing('hi', 1) });
    seenByA.push(`ack@${answer.ok ? answer.version : answer.code}`);
    assert.deepEqual(seenByA, ['steps@1', 'ack@1']);
    await waitFor(() => seenByB.length > 0, 'the broadcast to b');
    assert.equal(seenByB.length, 1);
    assert.deepEqual((seenByB[0] as { clientIDs: string[] }).clientIDs, ['a']);

    // Made at version 0, after a's step: rebased over it and accepted.
    const rebased = await ask<StepsAnswer>(b, 'steps', { version: 0, steps: typing('x', 1) });
    assert.deepEqual(rebased, { ok: true, version: 2 });
    // The same batch again from b, made before b saw its own: a resend, refused as stale.
    const stale = await ask<StepsAnswer>(b, 'steps', { version: 0, steps: typing('x', 1) });
    assert.equal(stale.ok, false);
    assert.equal(!stale.ok && stale.code, 'stale');
    assert.equal(!stale.ok && stale.version, 2, 'stale names the version to wait for');
  });

  it('batches arriving in one turn share one broadcast, in order, with no gap', async (t) => {
    const sender = rawSocket(server.url, 'group', 's');
    const watcher = rawSocket(server.url, 'group', 'w');
    t.after(() => {
      sender.close();
      watcher.close();
    });
    await ask(sender, 'join', {});
    await ask(watcher, 'join', {});
    const versions: number[] = [];
    let steps = 0;
    watcher.on('steps', (message: { version: number; steps: unknown[] }) => {
      versions.push(message.version);
      steps += message.steps.length;
    });
    let doc = emptyDoc();
    const answers: Promise<StepsAnswer>[] = [];
    for (let i = 0; i < 20; i++) {
      const state = EditorState.create({ doc });
      const tr = state.tr.insertText('x', 1);
      answers.push(
        ask<StepsAnswer>(sender, 'steps', {
          version: i,
          steps: tr.steps.map((s) => s.toJSON()),
        }),
      );
      doc = tr.doc;
    }
    const results = await Promise.all(answers);
    assert.deepEqual(
      results.map((r) => r.ok && r.version),
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    await waitFor(() => steps >= 20, 'the 20 steps to reach the watcher');
    assert.equal(steps, 20);
    assert.equal(versions[versions.length - 1], 20);
    assert.ok(
      versions.length < 20,
      `20 batches sent at once were grouped (${versions.length} broadcasts)`,
    );
    for (let i = 1; i < versions.length; i++) assert.ok(versions[i]! > versions[i - 1]!);
  });

  it('serves /healthz and /docs/:id', async () => {
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200);
    const body = (await health.json()) as { ok: boolean; store: string };
    assert.equal(body.ok, true);
    assert.equal(body.store, 'memory');
    const doc = await fetch(`${server.url}/docs/joins`);
    assert.equal(doc.status, 200);
    const served = (await doc.json()) as { version: number; doc: { type: string } };
    assert.equal(served.version, 1);
    assert.equal(served.doc.type, 'doc');
  });
});

describe('flush interval under load', () => {
  let server: TestServer;
  before(async () => {
    // Long enough that the test sees the holding, whatever the machine's speed.
    server = await startServer({
      flushIntervalMs: 1000,
      flushUsPerSocket: 1_000_000,
      flushBusyPercent: 0,
    });
  });
  after(async () => {
    await server.close();
  });

  it('flushes a batch after a quiet spell at once, and holds the next ones for one broadcast', async (t) => {
    const a = rawSocket(server.url, 'interval', 'a');
    const b = rawSocket(server.url, 'interval', 'b');
    const watcher = rawSocket(server.url, 'interval', 'w');
    t.after(() => {
      a.close();
      b.close();
      watcher.close();
    });
    for (const socket of [a, b, watcher]) await ask(socket, 'join', {});
    const seen: string[] = [];
    watcher.on('steps', (message: { version: number; clientIDs: string[] }) =>
      seen.push(`steps@${message.version}:${message.clientIDs.join(',')}`),
    );
    const first = EditorState.create({ doc: emptyDoc() }).tr.insertText('one', 1);
    const startedAt = performance.now();
    assert.deepEqual(
      await ask(a, 'steps', { version: 0, steps: first.steps.map((s) => s.toJSON()) }),
      { ok: true, version: 1 },
    );
    assert.ok(performance.now() - startedAt < 500, 'the first batch did not wait for the interval');

    // Within the interval of that flush: both wait and go out in one broadcast, which each
    // sender sees before its acknowledgement.
    const seenByA: string[] = [];
    a.on('steps', (message: { version: number }) => seenByA.push(`steps@${message.version}`));
    const second = EditorState.create({ doc: first.doc }).tr.insertText('two', 1);
    const third = EditorState.create({ doc: second.doc }).tr.insertText('three', 1);
    const [fromB, fromA] = await Promise.all([
      ask<StepsAnswer>(b, 'steps', { version: 1, steps: second.steps.map((s) => s.toJSON()) }),
      ask<StepsAnswer>(a, 'steps', {
        version: 2,
        steps: third.steps.map((s) => s.toJSON()),
      }).then((answer) => {
        seenByA.push(`ack@${answer.ok && answer.version}`);
        return answer;
      }),
    ]);
    assert.deepEqual(fromB, { ok: true, version: 2 });
    assert.deepEqual(fromA, { ok: true, version: 3 });
    assert.deepEqual(seenByA, ['steps@3', 'ack@3']);
    await waitFor(() => seen.length >= 2, 'both broadcasts to reach the watcher');
    assert.deepEqual(seen, ['steps@1:a', 'steps@3:b,a']);
  });
});

describe('flush interval without server-side rebasing', () => {
  it('flushes every turn: a document that accepts one batch per version shown must not hold them', async (t) => {
    const server = await startServer({
      flushIntervalMs: 1000,
      flushUsPerSocket: 1_000_000,
      maxRebaseSteps: 0,
    });
    const a = rawSocket(server.url, 'strict', 'a');
    t.after(async () => {
      a.close();
      await server.close();
    });
    await ask(a, 'join', {});
    const first = EditorState.create({ doc: emptyDoc() }).tr.insertText('one', 1);
    assert.deepEqual(
      await ask(a, 'steps', { version: 0, steps: first.steps.map((s) => s.toJSON()) }),
      { ok: true, version: 1 },
    );
    // Held for the interval, every other editor's batch made at version 1 would be refused
    // until the broadcast: one batch a second.
    const startedAt = performance.now();
    assert.deepEqual(await ask(a, 'steps', { version: 1, steps: typing('two', 1, first.doc) }), {
      ok: true,
      version: 2,
    });
    assert.ok(performance.now() - startedAt < 500, 'the second batch waited for the interval');
  });
});
