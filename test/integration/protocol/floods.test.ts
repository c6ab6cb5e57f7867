import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { io, type Socket } from 'socket.io-client';
import { emptyDoc } from '../../../schema/index.js';
import { type ClosingNotice, type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';

// A flood of any one message type from one socket is cut off by the connection's frame budget
// (or, for malformed messages, by its strikes) while an editor of another document keeps its
// round trips. The bound here is generous, for a loaded test machine: the figures are in
// BENCHMARKS.md (`npm run bench:floods`). The flooder is bench/flooder.ts, in a process of its
// own.

/// The largest step round trip the victim may see during a flood, in milliseconds.
const victimBoundMs = 2_000;

function connect(url: string, doc: string, clientID: string): Promise<Socket> {
  const socket = rawSocket(url, doc, clientID);
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', reject);
  });
}

function insertStep(doc = emptyDoc(), text = 'x'): object {
  return EditorState.create({ doc }).tr.insertText(text, 1).steps[0]!.toJSON() as object;
}

const flooderScript = fileURLToPath(new URL('../../../bench/flooder.js', import.meta.url));

/// Runs one flooding socket in a process of its own (its sending must not cost the server's
/// process, which this test shares): resolves once it floods, and with its tally at the end.
function flood(
  url: string,
  kind: string,
  doc: string,
): {
  ready: Promise<void>;
  done: Promise<{ connections: number; closings: Record<string, number> }>;
} {
  const child = spawn(process.execPath, [flooderScript, url, kind, doc], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  let ready!: () => void;
  const readyPromise = new Promise<void>((resolve) => (ready = resolve));
  const done = new Promise<{ connections: number; closings: Record<string, number> }>(
    (resolve, reject) => {
      lines.on('line', (line) => {
        const message = JSON.parse(line) as Record<string, unknown>;
        if (message['ready']) ready();
        else resolve(message as { connections: number; closings: Record<string, number> });
      });
      child.once('exit', (code) => {
        ready();
        if (code !== 0) reject(new Error(`the flooder exited ${code}`));
      });
    },
  );
  return { ready: readyPromise, done };
}

describe('floods', () => {
  let server: TestServer;
  let victim: Socket;
  let version = 0;
  let doc = emptyDoc();

  before(async () => {
    server = await startServer({});
    victim = await connect(server.url, 'victim-doc', 'victim');
    const joined = await ask<SyncAnswer>(victim, 'join', {});
    assert.ok(joined.ok);
  });

  after(async () => {
    victim.close();
    await server.close();
  });

  /// One step of the victim's, acknowledged: its round trip in milliseconds.
  async function victimStep(): Promise<number> {
    const started = performance.now();
    const answer = await ask<StepsAnswer>(victim, 'steps', { version, steps: [insertStep(doc)] });
    const took = performance.now() - started;
    assert.ok(answer.ok, JSON.stringify(answer));
    version = answer.version;
    doc = EditorState.create({ doc }).tr.insertText('x', 1).doc;
    return took;
  }

  for (const kind of ['presence', 'steps', 'over-limit-steps', 'unknown', 'pull', 'join']) {
    it(`closes a socket flooding ${kind}, and the victim keeps its round trip`, async () => {
      const flooder = flood(server.url, kind, `flood-${kind}`);
      await flooder.ready;
      const roundTrips: number[] = [];
      for (let i = 0; i < 10; i++) roundTrips.push(await victimStep());
      const tally = await flooder.done;
      assert.equal(tally.connections, 1);
      const codes = Object.keys(tally.closings);
      assert.equal(codes.length, 1, JSON.stringify(tally));
      assert.ok(codes[0] === 'rate-limited' || codes[0] === 'too-many-errors', codes[0]);
      assert.ok(victim.connected);
      assert.ok(
        Math.max(...roundTrips) < victimBoundMs,
        `victim round trips ${roundTrips.map((ms) => ms.toFixed(1)).join(', ')} ms`,
      );
    });
  }

  it('keeps an honest editor: a burst of steps, pulls and presence within its budget', async () => {
    const editor = await connect(server.url, 'honest-doc', 'honest');
    try {
      assert.ok((await ask<SyncAnswer>(editor, 'join', {})).ok);
      let closing: string | null = null;
      editor.on('closing', (notice: ClosingNotice) => (closing = notice.code));
      // A reconnect's catch-up: a burst of batches (the batch bucket's whole burst), pulls and
      // presence updates at once.
      const answers: Promise<unknown>[] = [];
      for (let i = 0; i < 100; i++) {
        answers.push(ask(editor, 'steps', { version: 0, steps: [insertStep()] }));
        editor.emit('presence', { version: 0, anchor: 1, head: 1, name: 'H', color: '#00aa00' });
      }
      for (let i = 0; i < 10; i++) answers.push(ask(editor, 'pull', {}));
      await Promise.all(answers);
      assert.equal(closing, null);
      assert.ok(editor.connected);
    } finally {
      editor.close();
    }
  });
});

describe("an address's shared frame budget", () => {
  /// A websocket that says it comes from `from` through the trusted (loopback) proxy.
  function forwarded(url: string, doc: string, clientID: string, from: string): Promise<Socket> {
    const socket = io(url, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      query: { doc },
      auth: { clientID },
      extraHeaders: { 'X-Forwarded-For': from },
    });
    return new Promise((resolve, reject) => {
      socket.once('connect', () => resolve(socket));
      socket.once('connect_error', reject);
    });
  }

  it('closes connections that each stay under their own budget but together exceed it', async (t) => {
    // Each connection's own budget (200 frames/s) is never reached; their address's (300 a
    // second, 600 in a burst) is, within a second or two of six of them sending 100 a second.
    const server = await startServer({
      trustProxy: ['loopback'],
      framesPerSecond: 200,
      framesBurst: 500,
      addressFramesPerSecond: 300,
    });
    t.after(() => server.close());
    const flooders = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        forwarded(server.url, 'shared-doc', `f${i}`, '198.51.100.7'),
      ),
    );
    const other = await forwarded(server.url, 'shared-doc', 'other', '198.51.100.8');
    t.after(() => {
      for (const socket of [...flooders, other]) socket.close();
    });
    const closings: string[] = [];
    for (const socket of flooders) {
      socket.on('closing', (notice: ClosingNotice) => closings.push(notice.code));
    }
    let otherClosed: string | null = null;
    other.on('closing', (notice: ClosingNotice) => (otherClosed = notice.code));
    for (const socket of [...flooders, other])
      assert.ok((await ask<SyncAnswer>(socket, 'join', {})).ok);

    // 100 presence frames a second from each socket, in ticks of 10 ms, for up to 4 s.
    const presence = { version: 0, anchor: 1, head: 1, name: 'F', color: '#aa0000' };
    const started = performance.now();
    while (closings.length === 0 && performance.now() - started < 4_000) {
      for (const socket of [...flooders, other]) {
        if (socket.connected) socket.emit('presence', presence);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(closings.length > 0, 'a connection of the flooding address was closed');
    assert.ok(
      closings.every((code) => code === 'rate-limited'),
      closings.join(', '),
    );
    assert.equal(otherClosed, null, "another address's connection is not charged for it");
    assert.ok(other.connected);
  });
});
