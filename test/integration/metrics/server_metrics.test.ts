import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { emptyDoc } from '../../../schema/index.js';
import { startServerWithFakeClock } from '../../support/server.js';
import { Manager } from 'socket.io-client';
import { ask, rawSocket } from '../../support/socket.js';

describe('the server records every steps message in its metrics', () => {
  let server: Awaited<ReturnType<typeof startServerWithFakeClock>>;
  before(async () => {
    server = await startServerWithFakeClock(Date.UTC(2026, 0, 1, 12, 0, 0));
  });
  after(async () => {
    await server.close();
  });

  it('counts accepted batches, steps and refusals by code, and exposes them as windows and Prometheus', async (t) => {
    const socket = rawSocket(server.url, 'measured', 'm');
    // A connection still in its handshake (open, in no namespace yet) is no editor: the
    // editors gauge, which reads the server's own count, must not count it.
    const handshaking = new Manager(server.url, {
      transports: ['websocket'],
      reconnection: false,
      autoConnect: false,
    });
    t.after(() => {
      socket.close();
      handshaking.engine.close();
    });
    await new Promise<void>((resolve, reject) =>
      handshaking.open((error) => (error ? reject(error) : resolve())),
    );
    await ask(socket, 'join', {});
    let doc = emptyDoc();
    for (let version = 0; version < 5; version++) {
      const tr = EditorState.create({ doc }).tr.insertText('ab', 1).insertText('c', 1);
      doc = tr.doc;
      const answer = await ask<{ ok: boolean }>(socket, 'steps', {
        version: version * 2,
        steps: tr.steps.map((step) => step.toJSON()),
      });
      assert.equal(answer.ok, true);
    }
    const stale = EditorState.create({ doc: emptyDoc() }).tr.insertText('x', 1).steps[0]!.toJSON();
    await ask(socket, 'steps', { version: 0, steps: [stale] });
    await ask(socket, 'steps', { version: 'nope', steps: [] });

    assert.equal(server.advance(10_000), 1);
    const response = await fetch(`${server.url}/metrics/windows?last=1`);
    const { windows } = (await response.json()) as { windows: Record<string, unknown>[] };
    const window = windows[0]!;
    assert.equal(window['batchesReceived'], 7);
    assert.equal(window['batchesAccepted'], 5);
    assert.equal(window['stepsAccepted'], 10);
    assert.deepEqual(window['rejections'], { stale: 1, 'bad-request': 1 });
    assert.equal(window['editors'], 1);
    assert.equal(window['documents'], 1);
    const p50 = window['latencyP50Ms'] as number;
    const p99 = window['latencyP99Ms'] as number;
    assert.ok(p50 > 0 && p50 <= p99, `latency p50 ${p50} ≤ p99 ${p99}`);
    assert.equal((window['topDocuments'] as { id?: string; documentId?: string }[]).length, 1);

    const text = await (await fetch(`${server.url}/metrics`)).text();
    assert.match(text, /^scriptorium_steps_batches_total\{outcome="accepted"\} 5$/m);
    assert.match(text, /^scriptorium_steps_batches_total\{outcome="stale"\} 1$/m);
    assert.match(text, /^scriptorium_steps_accepted_total 10$/m);
    assert.match(text, /^scriptorium_steps_latency_seconds_count 7$/m);
    assert.match(text, /^scriptorium_editors_connected 1$/m);
  });

  it('keeps 10-s windows of real traffic through wall-clock steps back and forward', async (t) => {
    const socket = rawSocket(server.url, 'stepped', 's');
    let doc = emptyDoc();
    let version = 0;
    const edit = async () => {
      const tr = EditorState.create({ doc }).tr.insertText('x', 1);
      doc = tr.doc;
      const answer = await ask<{ ok: boolean }>(socket, 'steps', {
        version: version++,
        steps: tr.steps.map((step) => step.toJSON()),
      });
      assert.equal(answer.ok, true);
    };
    t.after(() => socket.close());
    await ask(socket, 'join', {});
    server.advance(10_000);
    const before = server.metrics.windows(1)[0]!.endMs;
    for (const stepMs of [-3_600_000, 86_400_000]) {
      await edit();
      server.stepWallClock(stepMs);
      assert.equal(server.advance(10_000), 1, 'a window closes 10 s later, and only one');
    }
    await edit();
    assert.equal(server.advance(10_000), 1);
    const response = await fetch(`${server.url}/metrics/windows?last=3`);
    const { windows } = (await response.json()) as { windows: Record<string, number>[] };
    assert.deepEqual(
      windows.map((w) => [w['endMs']! - before, w['coveredMs'], w['batchesAcceptedPerSec']]),
      [
        [10_000, 10_000, 0.1],
        // Labelled on from the last after the step back, never an hour before it.
        [20_000, 10_000, 0.1],
        [30_000 - 3_600_000 + 86_400_000, 10_000, 0.1],
      ],
    );
  });
});
