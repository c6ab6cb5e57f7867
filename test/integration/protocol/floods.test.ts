import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { EditorState } from 'prosemirror-state';
import { io, type Socket } from 'socket.io-client';
import { emptyDoc } from '../../../schema/index.js';
import { type ClosingNotice, type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { waitFor } from '../../support/wait.js';

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
    // Each connection may send a burst of 200 frames; their address's bucket holds 600 (two
    // seconds of 300). Six connections sending 190 frames each at once stay within their own
    // bursts and take the address's far past its own, whatever the machine's speed.
    const server = await startServer({
      trustProxy: ['loopback'],
      framesPerSecond: 200,
      framesBurst: 200,
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
    for (const socket of [...flooders, other]) {
      assert.ok((await ask<SyncAnswer>(socket, 'join', {})).ok);
    }

    const presence = { version: 0, anchor: 1, head: 1, name: 'F', color: '#aa0000' };
    for (const socket of [...flooders, other]) {
      for (let i = 0; i < 190; i++) socket.emit('presence', presence);
    }
    await waitFor(() => closings.length > 0, 'a connection of the flooding address closed');
    assert.ok(
      closings.every((code) => code === 'rate-limited'),
      closings.join(', '),
    );
    // The other address's connection was charged only its own frames: it is still served.
    assert.ok((await ask<SyncAnswer>(other, 'pull', { version: 0 })).ok);
    assert.equal(otherClosed, null, "another address's connection is not charged for it");
  });
});

describe('fuzzing floods and handshake churn', () => {
  // Random attacks from a few addresses (through the trusted loopback proxy): each attacker
  // floods one kind of frame at its own rate, or churns handshakes. Properties: every attacker
  // socket is either still served or was sent away with `rate-limited` / `too-many-errors`, a
  // refused handshake carries a code of the table, and an editor on another address keeps
  // every step acknowledged within the bound.
  const kinds = ['presence', 'steps', 'unknown', 'pull', 'join', 'malformed', 'churn'] as const;
  type Kind = (typeof kinds)[number];
  const attack = fc.record({
    kind: fc.constantFrom(...kinds),
    address: fc.integer({ min: 1, max: 3 }),
    framesPerTick: fc.integer({ min: 1, max: 40 }),
  });
  const runs = 4;
  const attackMs = 1_200;

  function attacker(url: string, address: number, clientID: string): Socket {
    return io(url, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      query: { doc: `fuzz-${address}` },
      auth: { clientID },
      extraHeaders: { 'X-Forwarded-For': `198.51.100.${address}` },
    });
  }

  /// One frame of `kind` on `socket`.
  function send(socket: Socket, kind: Kind, i: number): void {
    if (kind === 'presence') {
      socket.emit('presence', { version: 0, anchor: 1, head: 1, name: 'F', color: '#aa0000' });
    } else if (kind === 'steps') {
      socket.emit('steps', { version: 0, steps: [insertStep()] }, () => {});
    } else if (kind === 'unknown') {
      socket.emit('no-such-event', i);
    } else if (kind === 'pull' || kind === 'join') {
      socket.emit(kind, {}, () => {});
    } else {
      socket.emit('steps', { version: 'x', steps: 'not steps' }, () => {});
    }
  }

  it(`holds ${runs} random mixes of floods and churn to their budgets`, async (t) => {
    const server = await startServer({
      trustProxy: ['loopback'],
      handshakesPerMinute: 120,
      maxProtocolErrors: 10,
    });
    t.after(() => server.close());
    const editor = io(server.url, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      query: { doc: 'fuzz-editor' },
      auth: { clientID: 'editor' },
      extraHeaders: { 'X-Forwarded-For': '203.0.113.9' },
    });
    t.after(() => editor.close());
    let joined = await ask<SyncAnswer>(editor, 'join', {});
    assert.ok(joined.ok);
    let version = joined.version;
    let doc = emptyDoc();
    const allowedClosings = new Set(['rate-limited', 'too-many-errors']);
    const allowedRefusals = new Set(['rate-limited', 'too-many-connections']);
    let serial = 0;

    await fc.assert(
      fc.asyncProperty(fc.array(attack, { minLength: 1, maxLength: 5 }), async (attacks) => {
        const sockets: Socket[] = [];
        const closings: string[] = [];
        const refusals: string[] = [];
        const watch = (socket: Socket): Socket => {
          sockets.push(socket);
          socket.on('closing', (notice: ClosingNotice) => closings.push(notice.code));
          socket.on('connect_error', (err: Error & { data?: { code?: string } }) =>
            refusals.push(err.data?.code ?? `no code: ${err.message}`),
          );
          return socket;
        };
        const live = attacks.map((a) =>
          a.kind === 'churn' ? null : watch(attacker(server.url, a.address, `a${serial++}`)),
        );
        const started = performance.now();
        const roundTrips: number[] = [];
        let tick = 0;
        while (performance.now() - started < attackMs) {
          attacks.forEach((a, index) => {
            if (a.kind === 'churn') {
              const socket = watch(attacker(server.url, a.address, `c${serial++}`));
              setTimeout(() => socket.close(), 50);
              return;
            }
            const socket = live[index]!;
            if (!socket.connected) return;
            for (let i = 0; i < a.framesPerTick; i++) send(socket, a.kind, tick * 100 + i);
          });
          tick++;
          // The editor types between ticks: its steps must all be taken, in time.
          const step = insertStep(doc);
          const began = performance.now();
          const answer = await ask<StepsAnswer>(editor, 'steps', { version, steps: [step] });
          roundTrips.push(performance.now() - began);
          assert.ok(answer.ok, JSON.stringify(answer));
          version = answer.version;
          doc = EditorState.create({ doc }).tr.insertText('x', 1).doc;
          // Under its batch budget (50 a second).
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
        for (const socket of sockets) socket.close();
        assert.ok(editor.connected, 'the editor is still served');
        assert.ok(Math.max(...roundTrips) < victimBoundMs, roundTrips.join(', '));
        for (const code of closings) assert.ok(allowedClosings.has(code), `closed ${code}`);
        for (const code of refusals) assert.ok(allowedRefusals.has(code), `refused ${code}`);
      }),
      { numRuns: runs },
    );
    // After the attacks the editor's document is whole: a join answers its version.
    joined = await ask<SyncAnswer>(editor, 'pull', { version: 0 });
    assert.ok(joined.ok, JSON.stringify(joined));
  });
});
