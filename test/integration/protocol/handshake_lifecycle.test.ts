import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import { pino } from 'pino';
import { Server } from 'socket.io';
import { io as connect, type Socket } from 'socket.io-client';
import { WebSocket } from 'ws';
import { schema } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import {
  CodedError,
  createCollab,
  MemoryStore,
  type Authenticate,
  type Collab,
  type CollabLimits,
} from '../../../server/index.js';
import { roomsOf } from '../../../server/collab.js';
import { CollabClient } from '../../../client/index.js';
import { SlowStore } from '../../support/slow_store.js';
import { ask } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

// What a connection holds from its handshake to its end (its place under the admission caps,
// its client id's binding to a user, its token's expiry), and what a room holds until it is
// dropped (its unload timer, its `onUnload`), through an embedded server with an
// `authenticate` of the test's own. Real sockets; the raw ones speak Engine.IO and Socket.io
// frames to do what the client library never does (drop a connection mid-handshake, leave
// and rejoin the namespace on one connection).

/// Tokens: `<user>:<access>[:<ms before authenticate answers>][:<expiry, ms since epoch>]`,
/// and three that make `authenticate` throw.
const authenticate: Authenticate = async ({ auth }) => {
  const token = String(auth['token'] ?? '');
  if (token === 'outage') throw new CodedError('unavailable', 'sessions are down');
  if (token === 'secret-error') throw new Error('connect ECONNREFUSED 10.1.2.3:5432');
  const [user, access, wait, expiresAt] = token.split(':');
  if (!user || (access !== 'read' && access !== 'write')) throw new Error('bad token');
  if (wait) await delay(Number(wait));
  return expiresAt ? { user, access, expiresAt: Number(expiresAt) } : { user, access };
};

interface Host {
  collab: Collab;
  url: string;
  port: number;
  unloaded: string[];
  close(): Promise<void>;
}

const hosts: Host[] = [];
afterEach(async () => {
  for (const host of hosts.splice(0)) await host.close();
});

async function startHost(
  limits: Partial<CollabLimits> = {},
  store = new MemoryStore(),
): Promise<Host> {
  const unloaded: string[] = [];
  const collab = createCollab({
    store,
    authenticate,
    logger: pino({ level: process.env['TEST_LOG_LEVEL'] ?? 'silent' }),
    limits: { batchesPerSecond: 0, pullsPerSecond: 0, ...limits },
    onUnload: ({ docId }) => {
      unloaded.push(docId);
    },
  });
  const http = createServer();
  const io = new Server(http, collab.socketOptions);
  collab.attach(io);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const port = (http.address() as AddressInfo).port;
  const host: Host = {
    collab,
    port,
    url: `http://127.0.0.1:${port}`,
    unloaded,
    async close() {
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
  hosts.push(host);
  return host;
}

/// A socket of `clientID` with `token`; resolves with 'connected' (and the socket), or with
/// the refusal's code and message.
async function attempt(
  host: Host,
  doc: string,
  clientID: string,
  token: string,
): Promise<{ code: string; message?: string; retryable?: boolean; socket?: Socket }> {
  const socket = connect(host.url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc },
    auth: { clientID, token },
  });
  return new Promise((resolve) => {
    socket.once('connect', () => resolve({ code: 'connected', socket }));
    socket.once(
      'connect_error',
      (err: Error & { data?: { code: string; message: string; retryable: boolean } }) => {
        socket.close();
        resolve({ code: err.data?.code ?? err.message, ...err.data });
      },
    );
  });
}

async function outcome(host: Host, doc: string, clientID: string, token: string) {
  const result = await attempt(host, doc, clientID, token);
  result.socket?.close();
  return result.code;
}

/// An Engine.IO connection speaking Socket.io frames by hand.
class RawConnection {
  readonly frames: string[] = [];
  private readonly ws: WebSocket;
  readonly opened: Promise<void>;

  constructor(host: Host, doc: string) {
    this.ws = new WebSocket(
      `ws://127.0.0.1:${host.port}/socket.io/?EIO=4&transport=websocket&doc=${doc}`,
    );
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('error', reject);
      this.ws.on('message', (data) => {
        const frame = String(data);
        if (frame === '2')
          this.ws.send('3'); // Engine.IO ping
        else if (frame.startsWith('0')) resolve();
        else this.frames.push(frame);
      });
    });
  }

  /// Sends a Socket.io CONNECT to the main namespace with `auth`.
  connectNamespace(auth: Record<string, unknown>): void {
    this.ws.send(`40${JSON.stringify(auth)}`);
  }

  /// Sends a Socket.io DISCONNECT of the main namespace (the connection stays open).
  leaveNamespace(): void {
    this.ws.send('41');
  }

  /// Waits for the answer to the `n`th CONNECT: `40{...}` (admitted) or `44{...}` (refused).
  async answer(n: number): Promise<string> {
    const answers = () => this.frames.filter((f) => f.startsWith('40') || f.startsWith('44'));
    await waitFor(() => answers().length >= n, `the answer to CONNECT ${n}`);
    return answers()[n - 1]!;
  }

  /// Drops the TCP connection without a goodbye.
  drop(): void {
    this.ws.terminate();
  }

  close(): void {
    this.ws.close();
  }
}

function typedStep(doc: SyncAnswer, text: string) {
  assert.ok(doc.ok && 'doc' in doc, JSON.stringify(doc));
  const node = schema.nodeFromJSON(doc.doc);
  return new Transform(node).insert(1, schema.text(text)).steps.map((s) => s.toJSON());
}

describe('handshakes and what they hold', () => {
  it(
    'counts nothing for a connection that closed while authenticate ran',
    { timeout: 20_000 },
    async () => {
      const host = await startHost({ maxSocketsPerClient: 1, maxConnectionsPerIp: 3 });
      // Each drops its connection right after the CONNECT, while `authenticate` waits 150 ms.
      for (let i = 0; i < 6; i++) {
        const raw = new RawConnection(host, 'dropped');
        await raw.opened;
        raw.connectNamespace({ clientID: 'tab-1', token: 'mallory:read:150' });
        raw.drop();
      }
      await delay(400);
      // Nothing was left counted: not the address, not the client id, not its owner.
      const admitted = await attempt(host, 'dropped', 'tab-1', 'alice:write');
      assert.equal(admitted.code, 'connected', admitted.message);
      admitted.socket!.close();
      assert.equal(await outcome(host, 'dropped', 'tab-2', 'bob:write'), 'connected');
    },
  );

  it(
    'frees a dropped connection once: the cap holds after connections drop',
    { timeout: 20_000 },
    async () => {
      const host = await startHost({ maxConnectionsPerIp: 2 });
      const kept = await attempt(host, 'capped', 'k', 'kim:write');
      assert.equal(kept.code, 'connected');
      for (let round = 0; round < 3; round++) {
        const raw = new RawConnection(host, 'capped');
        await raw.opened;
        raw.connectNamespace({ clientID: `r${round}`, token: 'ray:write' });
        assert.ok((await raw.answer(1)).startsWith('40'));
        // The transport goes: the connection's 'close' emits the socket's 'disconnect'.
        raw.drop();
        await delay(100);
      }
      // One place left of two: the kept socket holds the other.
      const second = await attempt(host, 'capped', 's', 'sam:write');
      assert.equal(second.code, 'connected');
      assert.equal(await outcome(host, 'capped', 't', 'tom:write'), 'too-many-connections');
      second.socket!.close();
      kept.socket!.close();
    },
  );

  it(
    'frees a socket that leaves the namespace while its connection stays open',
    { timeout: 20_000 },
    async () => {
      const host = await startHost({ maxSocketsPerClient: 2 });
      const raw = new RawConnection(host, 'cycled');
      await raw.opened;
      try {
        for (let n = 1; n <= 5; n++) {
          raw.connectNamespace({ clientID: 'cycler', token: 'carl:write' });
          const answer = await raw.answer(n);
          assert.ok(answer.startsWith('40'), `CONNECT ${n} was refused: ${answer}`);
          raw.leaveNamespace();
          await delay(30);
        }
        // The client id's two places are free for sockets of its own.
        const first = await attempt(host, 'cycled', 'cycler', 'carl:write');
        const second = await attempt(host, 'cycled', 'cycler', 'carl:write');
        assert.deepEqual([first.code, second.code], ['connected', 'connected']);
        first.socket!.close();
        second.socket!.close();
      } finally {
        raw.close();
      }
    },
  );

  it(
    "answers authenticate's coded errors with their code, and others unauthorized without their message",
    { timeout: 20_000 },
    async () => {
      const host = await startHost();
      const outage = await attempt(host, 'd', 'c1', 'outage');
      assert.deepEqual(
        [outage.code, outage.message, outage.retryable],
        ['unavailable', 'sessions are down', true],
      );
      const internal = await attempt(host, 'd', 'c1', 'secret-error');
      assert.equal(internal.code, 'unauthorized');
      assert.doesNotMatch(internal.message ?? '', /ECONNREFUSED|10\.1\.2\.3/);
    },
  );

  it(
    "binds a client id to the user who writes with it, past that user's last socket; readers bind nothing",
    { timeout: 20_000 },
    async () => {
      const host = await startHost();
      // A reader using an id first does not keep its writer out.
      const reader = await attempt(host, 'bound', 'editor-1', 'rita:read');
      assert.equal(reader.code, 'connected');
      const writer = await attempt(host, 'bound', 'editor-1', 'ann:write');
      assert.equal(writer.code, 'connected');
      reader.socket!.close();
      // Gone, but the id stays hers: an editor coming back with unconfirmed steps must not find
      // them confirmed by someone else's under its id.
      writer.socket!.close();
      await delay(100);
      assert.equal(await outcome(host, 'bound', 'editor-1', 'bob:write'), 'forbidden');
      assert.equal(await outcome(host, 'bound', 'editor-1', 'bob:read'), 'forbidden');
      assert.equal(await outcome(host, 'bound', 'editor-1', 'ann:write'), 'connected');
    },
  );

  it(
    'sends a socket away when its token expires, and the client comes back with a fresh one',
    { timeout: 20_000 },
    async () => {
      const host = await startHost();
      // A reader follows a document; it cannot make one.
      await host.collab.change('exp', (tr) => tr.insert(1, schema.text('before')));
      const expiring = await attempt(host, 'exp', 'short', `sue:read:0:${Date.now() + 600}`);
      assert.equal(expiring.code, 'connected');
      const socket = expiring.socket!;
      const closing = new Promise<{ code: string }>((resolve) => socket.once('closing', resolve));
      const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
      const joined = await ask<SyncAnswer>(socket, 'join', {});
      assert.equal(joined.ok, true);
      assert.equal((await closing).code, 'unauthorized');
      assert.equal(await gone, 'io server disconnect');

      // The client library asks its token function again and goes on.
      let issued = 0;
      const client = new CollabClient({
        url: host.url,
        docId: 'exp',
        schema,
        clientID: 'renewing',
        reconnectDelayMs: 50,
        token: () => `ron:write:0:${Date.now() + (issued++ === 0 ? 600 : 60_000)}`,
      });
      try {
        await client.ready();
        await waitFor(() => issued >= 2, 'a second token', 5000);
        await waitFor(() => client.status === 'synced', 'synced again', 5000);
        const state = client.state!;
        client.dispatch(state.tr.insertText('after renewal', 1));
        await client.settled();
        const stored = await host.collab.document('exp');
        assert.match(stored!.doc.textContent, /after renewal/);
      } finally {
        client.close();
      }
    },
  );

  it(
    "renews a reader's token at once each time: no growing gaps",
    { timeout: 20_000 },
    async () => {
      const host = await startHost();
      await host.collab.change('watched', (tr) => tr.insert(1, schema.text('watched')));
      const gaps: number[] = [];
      let offlineAt = 0;
      const reader = new CollabClient({
        url: host.url,
        docId: 'watched',
        schema,
        readOnly: true,
        // Tokens outlive the longest wait: each renewal starts over.
        reconnectDelayMs: 100,
        reconnectDelayMaxMs: 300,
        reconnectJitter: 0,
        token: () => `rex:read:0:${Date.now() + 400}`,
        onStatus: (status) => {
          if (status === 'offline') offlineAt = Date.now();
          else if (status === 'synced' && offlineAt > 0) gaps.push(Date.now() - offlineAt);
        },
      });
      try {
        await waitFor(() => gaps.length >= 4, 'four renewals', 10_000);
        // Each token is taken (the join succeeds), so each renewal starts over at 100 ms. A
        // client whose wait grew would take 200, then 300 ms (the cap) each time: at most one of
        // the renewals after the first within 250 ms. One slow gap on a loaded machine is noise.
        const quick = gaps.slice(1, 4).filter((gap) => gap < 250).length;
        assert.ok(quick >= 2, `gaps ${gaps.join(', ')} ms`);
      } finally {
        reader.close();
      }
    },
  );

  it(
    'backs off when every fresh token expires soon after the join',
    { timeout: 30_000 },
    async () => {
      const host = await startHost();
      // An issuer whose clock is behind the server's by a little less than the token's life:
      // tokens that die 15 ms after they are made, and 300 ms after (longer than the first
      // wait, shorter than the longest).
      for (const lifeMs of [15, 300]) {
        let handshakes = 0;
        const writer = new CollabClient({
          url: host.url,
          docId: `short-lived-${lifeMs}`,
          schema,
          reconnectDelayMs: 100,
          reconnectDelayMaxMs: 5000,
          reconnectJitter: 0,
          token: () => {
            handshakes++;
            return `wes:write:0:${Date.now() + lifeMs}`;
          },
        });
        try {
          await waitFor(() => handshakes >= 2, 'a renewal', 5000);
          const before = handshakes;
          await delay(4000);
          // Growing waits (100, 200, 400, 800 ms...): a handful, not one per token lifetime.
          const renewals = handshakes - before;
          assert.ok(renewals <= 7, `${lifeMs} ms tokens: ${renewals} handshakes in 4 s`);
        } finally {
          writer.close();
        }
      }
    },
  );

  it('refuses join and pull once the token expired', { timeout: 20_000 }, async () => {
    const host = await startHost();
    await host.collab.change('exp2', (tr) => tr.insert(1, schema.text('before')));
    // Long enough to join; the sweep runs every 250 ms, so the pull races it: either answer
    // is the refusal or the socket is already gone, never the document.
    const result = await attempt(host, 'exp2', 'p1', `pat:read:0:${Date.now() + 400}`);
    const socket = result.socket!;
    const joined = await ask<SyncAnswer>(socket, 'join', {});
    assert.equal(joined.ok, true);
    await delay(450);
    const answer = await ask<SyncAnswer>(socket, 'pull', {}).catch(() => null);
    if (answer !== null) assert.equal(!answer.ok && answer.code, 'unauthorized');
    socket.close();
  });
});

describe('dropping rooms', () => {
  it(
    'tells onUnload of a document unloaded to make space for another',
    { timeout: 20_000 },
    async () => {
      const host = await startHost({ maxLoadedDocuments: 1 });
      const first = await attempt(host, 'first', 'w', 'will:write');
      const joined = await ask<SyncAnswer>(first.socket!, 'join', {});
      const typed = await ask<StepsAnswer>(first.socket!, 'steps', {
        version: joined.ok ? joined.version : 0,
        steps: typedStep(joined, 'one'),
      });
      assert.equal(typed.ok, true);
      first.socket!.close();
      await waitFor(() => roomsOf(host.collab).peek('first')?.sockets === 0, 'the socket gone');
      const second = await attempt(host, 'second', 'w', 'will:write');
      assert.equal((await ask<SyncAnswer>(second.socket!, 'join', {})).ok, true);
      second.socket!.close();
      assert.deepEqual(host.unloaded, ['first']);
      await waitFor(() => roomsOf(host.collab).peek('second')?.sockets === 0, 'the socket gone');
      assert.equal((await host.collab.document('first'))!.doc.textContent, 'one');
    },
  );

  it(
    'unloads the next room of a document whose last room was dropped with an unload timer armed',
    { timeout: 20_000 },
    async () => {
      // Snapshots take 800 ms: a socket that joins and leaves while the idle unload waits for
      // one arms another unload timer for that room, which is still pending when it closes.
      const host = await startHost({ idleUnloadMs: 400 }, new SlowStore({ snapshotMs: 800 }));
      const writer = await attempt(host, 'D', 'a', 'amy:write');
      const joined = await ask<SyncAnswer>(writer.socket!, 'join', {});
      await ask<StepsAnswer>(writer.socket!, 'steps', {
        version: joined.ok ? joined.version : 0,
        steps: typedStep(joined, 'a'),
      });
      const first = roomsOf(host.collab).peek('D')!;
      writer.socket!.close();
      // The last socket left: a snapshot (till ~800 ms) and the unload timer (~400 ms), whose
      // unload waits for that snapshot and closes the room at ~800 ms. The visitor leaves at
      // ~550 ms, arming a timer for ~950 ms.
      await delay(550);
      const visitor = await attempt(host, 'D', 'b', 'bea:read');
      await ask<SyncAnswer>(visitor.socket!, 'join', {});
      visitor.socket!.close();
      await waitFor(() => first.state === 'closed', 'the first room dropped', 5000);
      // Loaded again by a read, with no socket: it must unload when idle like any other.
      await host.collab.document('D');
      const second = roomsOf(host.collab).peek('D')!;
      assert.notEqual(second, first);
      await waitFor(() => roomsOf(host.collab).peek('D') === undefined, 'the idle unload', 5000);
    },
  );
});
