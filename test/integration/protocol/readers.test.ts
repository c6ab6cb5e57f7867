import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createClient } from 'redis';
import { Transform } from 'prosemirror-transform';
import type { Socket } from 'socket.io-client';
import { schema } from '../../../schema/index.js';
import { type StepsAnswer, type StepsBroadcast, type SyncAnswer } from '../../../schema/events.js';
import { signToken } from '../../../server/protocol/auth.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import { noAdmissionLimits } from '../../support/hostile.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { delay, waitFor } from '../../support/wait.js';

// Read-only connections (a token with access 'read', or the handshake's `readOnly`) follow
// documents and change nothing: a reader that joins a document the store does not know is
// refused `not-found` and nothing is created for it, in memory or in the store; a reader of
// a document another node serves is sent there (`moved`) without taking it from that node.
// A reader still loads a stored document nobody has open, and follows it.

const secret = 'a-test-secret-that-is-long-enough-0123456789';

function token(user: string, access: 'read' | 'write'): Promise<string> {
  return signToken(secret, { user, doc: '*', access, ttlSeconds: 3600 });
}

/// A socket on `doc` and its answer to `join`; `steps` collects the broadcasts it receives.
async function joined(
  server: TestServer,
  doc: string,
  auth: Record<string, unknown> | string,
): Promise<{ socket: Socket; answer: SyncAnswer; steps: StepsBroadcast[]; closings: string[] }> {
  const socket = rawSocket(server.url, doc, auth);
  const steps: StepsBroadcast[] = [];
  const closings: string[] = [];
  socket.on('steps', (message: StepsBroadcast) => steps.push(message));
  socket.on('closing', (notice: { code: string }) => closings.push(notice.code));
  const answer = await ask<SyncAnswer>(socket, 'join', {});
  return { socket, answer, steps, closings };
}

/// Types `text` at the start of the document `answer` gave, at its version.
function typeAt(socket: Socket, answer: SyncAnswer, text: string): Promise<StepsAnswer> {
  assert.ok(answer.ok && 'doc' in answer, JSON.stringify(answer));
  const doc = schema.nodeFromJSON(answer.doc);
  const steps = new Transform(doc).insert(1, schema.text(text)).steps.map((s) => s.toJSON());
  return ask<StepsAnswer>(socket, 'steps', { version: answer.version, steps });
}

describe('readers on one server', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ ...noAdmissionLimits, authSecret: secret, idleUnloadMs: 50 });
  });
  after(async () => {
    await server.close();
  });

  it('refuses a reader a document that does not exist (not-found) and creates nothing', async (t) => {
    const readers = [
      { clientID: 'r-token', token: await token('rita', 'read') },
      { clientID: 'r-flag', token: await token('will', 'write'), readOnly: true },
    ];
    for (const auth of readers) {
      const reader = await joined(server, 'unwritten', auth);
      try {
        assert.equal(!reader.answer.ok && reader.answer.code, 'not-found', auth.clientID);
        assert.equal(!reader.answer.ok && reader.answer.retryable, false);
      } finally {
        reader.socket.close();
      }
    }
    assert.equal(server.server.rooms.peek('unwritten'), undefined, 'no room was loaded');
    assert.equal(server.server.rooms.size, 0);
    assert.equal(await server.store.load('unwritten'), null, 'nothing was stored');

    // A writer creates it; a reader joins it then, and follows its edits.
    const writer = await joined(server, 'unwritten', {
      clientID: 'w',
      token: await token('will', 'write'),
    });
    const reader = await joined(server, 'unwritten', {
      clientID: 'r-after',
      token: await token('rita', 'read'),
    });
    t.after(() => {
      writer.socket.close();
      reader.socket.close();
    });
    assert.ok(writer.answer.ok);
    assert.ok(reader.answer.ok, JSON.stringify(reader.answer));
    assert.deepEqual(await typeAt(writer.socket, writer.answer, 'hello'), {
      ok: true,
      version: 1,
    });
    await waitFor(() => reader.steps.length === 1, 'the reader to receive the steps');
    assert.equal(reader.steps[0]!.version, 1);
  });

  it('lets a reader load a stored document nobody has open, and follow it', async (t) => {
    const first = await joined(server, 'stored', {
      clientID: 'w1',
      token: await token('will', 'write'),
    });
    assert.deepEqual(await typeAt(first.socket, first.answer, 'kept'), { ok: true, version: 1 });
    first.socket.close();
    await waitFor(() => server.server.rooms.peek('stored') === undefined, 'the idle unload');

    const reader = await joined(server, 'stored', {
      clientID: 'r1',
      token: await token('rita', 'read'),
    });
    const writer = await joined(server, 'stored', {
      clientID: 'w2',
      token: await token('will', 'write'),
    });
    t.after(() => {
      reader.socket.close();
      writer.socket.close();
    });
    assert.ok(reader.answer.ok && 'doc' in reader.answer, JSON.stringify(reader.answer));
    assert.equal(reader.answer.version, 1);
    assert.match(JSON.stringify(reader.answer.doc), /kept/);
    assert.deepEqual(await typeAt(writer.socket, writer.answer, 'more'), {
      ok: true,
      version: 2,
    });
    await waitFor(() => reader.steps.length === 1, 'the reader to receive the steps');
  });
});

describe('readers on two servers sharing Redis', () => {
  const { redisUrl, keyPrefix } = redisForTests();
  const leaseMs = 600;
  let a: TestServer;
  let b: TestServer;
  let redis: ReturnType<typeof createClient>;

  /// Every Redis key of `doc`, whatever its kind.
  async function keysOf(doc: string): Promise<string[]> {
    const found: string[] = [];
    for await (const keys of redis.scanIterator({ MATCH: `${keyPrefix}{${doc}}*`, COUNT: 1000 }))
      found.push(...keys);
    return found.sort();
  }

  before(async () => {
    const config = { ...noAdmissionLimits, leaseMs, idleUnloadMs: 100 };
    a = await startServer(
      { ...config, nodeId: 'node-a' },
      new RedisStore({ url: redisUrl, keyPrefix }),
    );
    b = await startServer(
      { ...config, nodeId: 'node-b' },
      new RedisStore({ url: redisUrl, keyPrefix }),
    );
    redis = createClient({ url: redisUrl });
    await redis.connect();
  });
  after(async () => {
    await Promise.all([a.close(), b.close()]);
    await redis.close();
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  it('a reader of a document that does not exist writes nothing to Redis', async () => {
    const reader = await joined(a, 'ghost', { clientID: 'r', readOnly: true });
    try {
      assert.equal(!reader.answer.ok && reader.answer.code, 'not-found');
    } finally {
      reader.socket.close();
    }
    // No lease, no fencing number, no home: the store holds no trace of the id.
    assert.deepEqual(await keysOf('ghost'), []);
    assert.equal(a.server.rooms.size, 0);
  });

  it('a reader does not take a document from the node serving it', async (t) => {
    const writer = await joined(a, 'served', 'alice');
    assert.deepEqual(await typeAt(writer.socket, writer.answer, 'hi'), { ok: true, version: 1 });
    const reader = await joined(b, 'served', { clientID: 'r', readOnly: true });
    t.after(() => {
      reader.socket.close();
      writer.socket.close();
    });
    // Sent where the document is served, with when to try again...
    assert.equal(!reader.answer.ok && reader.answer.code, 'moved');
    assert.ok(!reader.answer.ok && typeof reader.answer.retryAfterMs === 'number');
    // ...without asking a to hand it over.
    assert.deepEqual(
      await keysOf('served').then((keys) => keys.filter((k) => k.endsWith(':wanted'))),
      [],
    );
    // a keeps it past the time a hand-over would take: its writer stays and writes on.
    await delay(3 * leaseMs);
    assert.deepEqual(writer.closings, []);
    const again = await ask<SyncAnswer>(writer.socket, 'pull', {});
    assert.deepEqual(await typeAt(writer.socket, again, 'yo'), { ok: true, version: 2 });
  });

  it('a reader loads a stored document that no node serves', async (t) => {
    const writer = await joined(a, 'resting', 'bob');
    assert.deepEqual(await typeAt(writer.socket, writer.answer, 'kept'), { ok: true, version: 1 });
    writer.socket.close();
    await waitFor(() => a.server.rooms.peek('resting') === undefined, 'a to unload it');
    const reader = await joined(b, 'resting', { clientID: 'r', readOnly: true });
    t.after(() => reader.socket.close());
    assert.ok(reader.answer.ok && 'doc' in reader.answer, JSON.stringify(reader.answer));
    assert.equal(reader.answer.version, 1);
    assert.match(JSON.stringify(reader.answer.doc), /kept/);
  });
});
