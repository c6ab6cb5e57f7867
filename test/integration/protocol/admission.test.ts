import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { io, type Socket } from 'socket.io-client';
import { WebSocket } from 'ws';
import { emptyDoc } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { signToken } from '../../../server/protocol/auth.js';
import { TokenBucket } from '../../../server/protocol/token_bucket.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

function insert(doc = emptyDoc(), text = 'x', pos = 1): object {
  return EditorState.create({ doc }).tr.insertText(text, pos).steps[0]!.toJSON() as object;
}

/// Resolves 'connected' or the `connect_error` code.
function outcome(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    socket.once('connect', () => resolve('connected'));
    socket.once('connect_error', (err) =>
      resolve((err as Error & { data?: { code: string } }).data?.code ?? err.message),
    );
  });
}

async function connected(url: string, doc: string, clientID: string): Promise<Socket> {
  const socket = rawSocket(url, doc, clientID);
  assert.equal(await outcome(socket), 'connected');
  return socket;
}

async function withServer(
  overrides: Parameters<typeof startServer>[0],
  body: (server: TestServer, sockets: Socket[]) => Promise<void>,
): Promise<void> {
  const server = await startServer(overrides);
  const sockets: Socket[] = [];
  try {
    await body(server, sockets);
  } finally {
    for (const socket of sockets) socket.close();
    await server.close();
  }
}

describe('TokenBucket', () => {
  it('gives a burst, then one token per interval, and says how long to wait', () => {
    const bucket = new TokenBucket(2, 3, 0);
    assert.deepEqual([bucket.take(0), bucket.take(0), bucket.take(0)], [0, 0, 0]);
    assert.equal(bucket.take(0), 500);
    assert.equal(bucket.take(499), 2);
    assert.equal(bucket.take(500), 0);
    assert.equal(bucket.full(500), false);
    assert.equal(bucket.full(2000), true);
    const open = new TokenBucket(0, 1, 0);
    for (let i = 0; i < 100; i++) assert.equal(open.take(0), 0);
  });
});

describe('admission and back-pressure', () => {
  it('caps connections per address and per client id, and frees a place when one leaves', async () => {
    await withServer(
      { maxConnectionsPerIp: 3, maxSocketsPerClient: 2 },
      async (server, sockets) => {
        sockets.push(
          await connected(server.url, 'cap', 'a'),
          await connected(server.url, 'cap', 'a'),
        );
        const third = rawSocket(server.url, 'cap', 'a');
        sockets.push(third);
        assert.equal(
          await outcome(third),
          'too-many-connections',
          'a third socket of one client id',
        );
        sockets.push(await connected(server.url, 'cap', 'b'));
        const fourth = rawSocket(server.url, 'cap', 'c');
        sockets.push(fourth);
        assert.equal(await outcome(fourth), 'too-many-connections', 'a fourth from one address');
        sockets[0]!.close();
        let freed = false;
        for (let i = 0; i < 50 && !freed; i++) {
          await delay(20);
          const retry = rawSocket(server.url, 'cap', 'c');
          sockets.push(retry);
          freed = (await outcome(retry)) === 'connected';
        }
        assert.ok(freed, 'a place freed up');
      },
    );
  });

  it('believes X-Forwarded-For only from a trusted proxy', async () => {
    const forwarded = (url: string, from: string, clientID: string): Socket =>
      io(url, {
        transports: ['websocket'],
        reconnection: false,
        forceNew: true,
        query: { doc: 'xff' },
        auth: { clientID },
        extraHeaders: { 'X-Forwarded-For': from },
      });
    await withServer(
      { maxConnectionsPerIp: 1, trustProxy: ['loopback'] },
      async (server, sockets) => {
        const one = forwarded(server.url, '203.0.113.1', 'a');
        const two = forwarded(server.url, '203.0.113.2', 'b');
        const again = forwarded(server.url, '203.0.113.1', 'c');
        sockets.push(one, two, again);
        assert.equal(await outcome(one), 'connected');
        assert.equal(await outcome(two), 'connected', 'another client behind the proxy');
        assert.equal(await outcome(again), 'too-many-connections', 'the same client again');
      },
    );
    await withServer({ maxConnectionsPerIp: 1 }, async (server, sockets) => {
      const one = forwarded(server.url, '203.0.113.1', 'a');
      const two = forwarded(server.url, '203.0.113.2', 'b');
      sockets.push(one, two);
      assert.equal(await outcome(one), 'connected');
      assert.equal(await outcome(two), 'too-many-connections', 'the header is not believed');
    });
  });

  it('refuses a handshake naming two documents', async () => {
    await withServer({}, async (server, sockets) => {
      // socket.io-client keeps one value per query key, so speak Engine.IO directly: open,
      // then the Socket.io CONNECT packet with the auth; the refusal is a CONNECT_ERROR.
      const ws = new WebSocket(
        `${server.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket&doc=a&doc=b`,
      );
      const refusal = await new Promise<string>((resolve, reject) => {
        ws.onmessage = (event) => {
          const text = String(event.data as string);
          if (text.startsWith('0')) ws.send('40{"clientID":"two-docs"}');
          else if (text.startsWith('44')) resolve(text);
          else if (text.startsWith('40')) reject(new Error('connected'));
        };
        ws.onerror = () => reject(new Error('websocket error'));
      });
      ws.close();
      assert.match(refusal, /"code":"bad-document-id"/);
      for (const doc of ['.', '..']) {
        const dots = rawSocket(server.url, doc, 'dots');
        sockets.push(dots);
        assert.equal(await outcome(dots), 'bad-document-id', doc);
      }
    });
  });

  it('limits batches and pulls per socket with a retry hint, changing nothing', async () => {
    await withServer(
      { batchesPerSecond: 2, batchesBurst: 2, pullsPerSecond: 2, pullsBurst: 3 },
      async (server, sockets) => {
        const socket = await connected(server.url, 'rate', 'a');
        sockets.push(socket);
        assert.ok((await ask<SyncAnswer>(socket, 'join', {})).ok);
        // join used one token of three; two pulls fit, the third does not.
        assert.ok((await ask<SyncAnswer>(socket, 'pull', {})).ok);
        assert.ok((await ask<SyncAnswer>(socket, 'pull', {})).ok);
        const pull = await ask<SyncAnswer>(socket, 'pull', {});
        assert.equal(!pull.ok && pull.code, 'rate-limited');
        assert.ok(!pull.ok && pull.retryAfterMs! > 0);

        let doc = emptyDoc();
        let version = 0;
        for (let i = 0; i < 2; i++) {
          const answer = await ask<StepsAnswer>(socket, 'steps', { version, steps: [insert(doc)] });
          assert.ok(answer.ok);
          version = answer.version;
          doc = EditorState.create({ doc }).tr.insertText('x', 1).doc;
        }
        const limited = await ask<StepsAnswer>(socket, 'steps', { version, steps: [insert(doc)] });
        assert.equal(limited.ok, false);
        assert.equal(!limited.ok && limited.code, 'rate-limited');
        assert.equal(!limited.ok && limited.version, version, 'nothing applied');
        const wait = !limited.ok ? limited.retryAfterMs! : 0;
        assert.ok(wait > 0 && wait <= 500, `retryAfterMs ${wait}`);
        await delay(wait);
        assert.ok((await ask<StepsAnswer>(socket, 'steps', { version, steps: [insert(doc)] })).ok);
      },
    );
  });

  it('closes a socket that keeps sending malformed messages', async () => {
    await withServer({ maxProtocolErrors: 5 }, async (server, sockets) => {
      const socket = await connected(server.url, 'errors', 'a');
      sockets.push(socket);
      const closing = new Promise<{ code: string }>((resolve) => socket.once('closing', resolve));
      const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
      for (let i = 0; i < 5; i++) socket.emit('no-such-event', i);
      assert.equal((await closing).code, 'too-many-errors');
      assert.equal(await gone, 'io server disconnect');
      // An honest socket is unaffected.
      const other = await connected(server.url, 'errors', 'b');
      sockets.push(other);
      assert.ok((await ask<SyncAnswer>(other, 'join', {})).ok);
    });
  });

  it('forgives malformed messages spread over time, and still closes a burst', async () => {
    const forgiveMs = 200;
    await withServer(
      { maxProtocolErrors: 3, protocolErrorForgiveMs: forgiveMs },
      async (server, sockets) => {
        const socket = await connected(server.url, 'forgiven', 'a');
        sockets.push(socket);
        let closing: string | null = null;
        socket.on('closing', (notice: { code: string }) => (closing = notice.code));
        const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
        assert.ok((await ask<SyncAnswer>(socket, 'join', {})).ok);
        // Each answered refusal is a strike counted before the next is sent.
        const malformed = async (i: number): Promise<void> => {
          // Socket.io fails the acknowledgement of a socket that closes first.
          const answer = await ask<SyncAnswer>(socket, 'pull', 'not a request').catch(() =>
            assert.fail(`closed (${closing}) at message ${i}`),
          );
          assert.equal(!answer.ok && answer.code, 'bad-request', `message ${i}`);
        };
        await malformed(0);
        await malformed(1);
        // Eight in all, over twice the burst allowed, each after an interval has passed.
        for (let i = 2; i < 8; i++) {
          await delay(forgiveMs + 50);
          await malformed(i);
        }
        assert.equal(closing, null, 'not closed');
        assert.ok(socket.connected);
        assert.ok((await ask<SyncAnswer>(socket, 'pull', {})).ok, 'still served');
        // Twice the burst in one go: closed whatever a slow machine forgives meanwhile.
        for (let i = 0; i < 6; i++) socket.emit('no-such-event', i);
        assert.equal(await gone, 'io server disconnect');
        assert.equal(closing, 'too-many-errors');
      },
    );
  });

  it('limits how many new documents one address creates, not joins of existing ones', async () => {
    await withServer({ newDocumentsPerMinute: 2 }, async (server, sockets) => {
      for (const doc of ['new-1', 'new-2']) {
        const socket = await connected(server.url, doc, `c-${doc}`);
        sockets.push(socket);
        assert.ok((await ask<SyncAnswer>(socket, 'join', {})).ok, doc);
      }
      const third = await connected(server.url, 'new-3', 'c-3');
      sockets.push(third);
      const refused = await ask<SyncAnswer>(third, 'join', {});
      assert.equal(!refused.ok && refused.code, 'rate-limited');
      assert.ok(!refused.ok && refused.retryAfterMs! > 1000);
      const existing = await connected(server.url, 'new-1', 'c-again');
      sockets.push(existing);
      assert.ok((await ask<SyncAnswer>(existing, 'join', {})).ok, 'an existing document');
      const missing = await fetch(`${server.url}/docs/new-3`);
      assert.equal(missing.status, 404, 'the refused document was not created');
    });
  });

  it('caps the documents one address has open, so that it cannot hold every loaded one', async () => {
    // Behind a trusted proxy, so that two clients of the test have two addresses.
    const from = (url: string, address: string, doc: string, clientID: string): Socket =>
      io(url, {
        transports: ['websocket'],
        reconnection: false,
        forceNew: true,
        query: { doc },
        auth: { clientID },
        extraHeaders: { 'X-Forwarded-For': address },
      });
    const joins = async (socket: Socket): Promise<boolean> =>
      (await outcome(socket)) === 'connected' && (await ask<SyncAnswer>(socket, 'join', {})).ok;
    await withServer(
      { maxDocumentsPerUser: 2, maxLoadedDocuments: 3, trustProxy: ['loopback'] },
      async (server, sockets) => {
        const greedy = '203.0.113.7';
        const first = from(server.url, greedy, 'hoard-1', 'g1');
        sockets.push(first);
        assert.ok(await joins(first));
        const second = from(server.url, greedy, 'hoard-2', 'g2');
        sockets.push(second);
        assert.ok(await joins(second));
        // A third document from that address is refused (retryably: see the table), and not
        // loaded.
        const third = from(server.url, greedy, 'hoard-3', 'g3');
        sockets.push(third);
        assert.equal(await outcome(third), 'too-many-documents');
        assert.equal(server.server.rooms.peek('hoard-3'), undefined);
        // Another socket on a document it has open costs nothing more.
        const again = from(server.url, greedy, 'hoard-1', 'g4');
        sockets.push(again);
        assert.ok(await joins(again), 'a document it already has open');
        // Someone else still gets a document loaded.
        const other = from(server.url, '203.0.113.8', 'mine', 'o1');
        sockets.push(other);
        assert.ok(await joins(other), 'another address');
        // Closing one frees its place.
        second.close();
        let freed = false;
        for (let i = 0; i < 20 && !freed; i++) {
          await delay(25);
          const retry = from(server.url, greedy, 'hoard-3', `g5-${i}`);
          sockets.push(retry);
          freed = await joins(retry).catch(() => false);
        }
        assert.ok(freed, 'a place freed up');
      },
    );
  });

  it('counts the documents of an authenticated user, not of its address', async () => {
    const secret = 'a-test-secret-that-is-long-enough-0123456789';
    const as = async (url: string, user: string, doc: string, clientID: string) => {
      const token = await signToken(secret, { user, doc: '*', access: 'write', ttlSeconds: 60 });
      return rawSocket(url, doc, { clientID, token });
    };
    await withServer({ authSecret: secret, maxDocumentsPerUser: 1 }, async (server, sockets) => {
      // Two people behind one address (an office's) each have their own budget.
      const ann = await as(server.url, 'ann', 'ann-notes', 'a1');
      const bob = await as(server.url, 'bob', 'bob-notes', 'b1');
      sockets.push(ann, bob);
      assert.equal(await outcome(ann), 'connected');
      assert.equal(await outcome(bob), 'connected', 'another user from the same address');
      const more = await as(server.url, 'ann', 'ann-drafts', 'a2');
      sockets.push(more);
      assert.equal(await outcome(more), 'too-many-documents', 'a second document of ann');
      const same = await as(server.url, 'ann', 'ann-notes', 'a3');
      sockets.push(same);
      assert.equal(await outcome(same), 'connected', 'ann again on her open document');
    });
  });

  it('unloads the least recently used idle document to load another, intact', async () => {
    await withServer({ maxLoadedDocuments: 2 }, async (server, sockets) => {
      const a = await connected(server.url, 'lru-a', 'a');
      sockets.push(a);
      assert.ok((await ask<SyncAnswer>(a, 'join', {})).ok);
      const written = await ask<StepsAnswer>(a, 'steps', {
        version: 0,
        steps: [insert(emptyDoc(), 'kept')],
      });
      assert.ok(written.ok);
      a.close();
      const b = await connected(server.url, 'lru-b', 'b');
      sockets.push(b);
      assert.ok((await ask<SyncAnswer>(b, 'join', {})).ok);
      await waitFor(() => server.server.rooms.peek('lru-a')?.sockets === 0, 'a to be idle');
      const c = await connected(server.url, 'lru-c', 'c');
      sockets.push(c);
      assert.ok((await ask<SyncAnswer>(c, 'join', {})).ok);
      assert.equal(server.server.rooms.size, 2);
      assert.equal(server.server.rooms.peek('lru-a'), undefined, 'a was unloaded');
      // Every held room has an editor now: a fourth document is refused, retryably.
      const d = await connected(server.url, 'lru-d', 'd');
      sockets.push(d);
      const full = await ask<SyncAnswer>(d, 'join', {});
      assert.equal(!full.ok && full.code, 'too-many-documents');
      assert.equal(!full.ok && full.retryable, true);
      c.close();
      await waitFor(() => server.server.rooms.peek('lru-c')?.sockets === 0, 'c to be idle');
      const reloaded = (await (await fetch(`${server.url}/docs/lru-a`)).json()) as {
        version: number;
        doc: unknown;
      };
      assert.equal(reloaded.version, 1);
      assert.match(JSON.stringify(reloaded.doc), /kept/);
    });
  });
});
