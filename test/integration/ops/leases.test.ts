import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import type { Socket } from 'socket.io-client';
import { schema } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import type { Lease, LeaseStore } from '../../../server/stores/store.js';
import {
  appendOf,
  deleteRedisKeys,
  redisForTests,
  typingHistory,
} from '../../support/store_fixtures.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { TcpProxy } from '../../support/tcp_proxy.js';
import { delay, waitFor } from '../../support/wait.js';
import { noAdmissionLimits } from '../../support/hostile.js';

// Document leases on a real Redis: one process serves a document at a time; a process that
// lost its lease cannot write; a document is handed over when another process asks for it;
// a process cut off from Redis stops serving and its documents go elsewhere, losing nothing
// acknowledged.

const { redisUrl, redisPort, keyPrefix } = redisForTests();

after(async () => {
  await deleteRedisKeys(redisUrl, keyPrefix);
});

function leasesOf(store: RedisStore): LeaseStore {
  return store.leases;
}

describe('the Redis store`s leases', () => {
  let store: RedisStore;
  before(async () => {
    store = new RedisStore({ url: redisUrl, keyPrefix });
    await store.ready();
  });
  after(async () => {
    await store.close();
  });

  it('gives a document to one holder at a time, with a fencing number that only grows', async () => {
    const leases = leasesOf(store);
    const first = await leases.acquire('fenced', 'node-a/1', 5000);
    assert.ok(first.ok);
    const again = await leases.acquire('fenced', 'node-a/1', 5000);
    assert.deepEqual(again, first, 'the holder gets its own lease back');
    const other = await leases.acquire('fenced', 'node-b/1', 5000);
    assert.equal(other.ok, false);
    assert.equal(!other.ok && other.holder, 'node-a/1');
    assert.ok(!other.ok && other.remainingMs > 4000 && other.remainingMs <= 5000);

    const history = typingHistory(4);
    const lease = (first as { lease: Lease }).lease;
    const ok = await store.append('fenced', {
      ...appendOf(history, 'e', 0, 2),
      lease: lease.token,
    });
    assert.deepEqual(ok, { ok: true, version: 2 });
    // A forged or stale token writes nothing, whatever the versions say.
    const forged = await store.append('fenced', {
      ...appendOf(history, 'e', 2, 4),
      lease: 'node-b/1#999',
    });
    // It is told where the document stands (what tells a store gone back to an older state).
    assert.deepEqual(forged, {
      ok: false,
      reason: 'lost',
      stored: { epoch: 'e', version: 2 },
    });
    assert.equal((await store.load('fenced'))!.version, 2);

    // Handover: b asks, a sees it at its renewal, releases; b takes it with the next number.
    await leases.requestHandover('fenced', 'node-b/1', 5000);
    assert.equal(await leases.renew('fenced', 'node-a/1', lease, 5000), 'wanted');
    await leases.release('fenced', lease);
    const taken = await leases.acquire('fenced', 'node-b/1', 5000);
    assert.ok(taken.ok);
    assert.equal(taken.lease.fence, lease.fence + 1);
    // a, which has not noticed, can neither renew nor write nor snapshot any more.
    assert.equal(await leases.renew('fenced', 'node-a/1', lease, 5000), 'lost');
    assert.deepEqual(
      await store.append('fenced', { ...appendOf(history, 'e', 2, 4), lease: lease.token }),
      { ok: false, reason: 'lost', stored: { epoch: 'e', version: 2 } },
    );
    const stored = await store.load('fenced');
    assert.deepEqual(
      await store.snapshot(
        'fenced',
        { doc: { type: 'doc' } as never, version: 2, epoch: 'e', schemaVersion: 1, savedAt: 0 },
        lease.token,
      ),
      { ok: false, reason: 'lost' },
    );
    assert.deepEqual(await store.load('fenced'), stored);
    // The new holder's writes go through.
    assert.deepEqual(
      await store.append('fenced', { ...appendOf(history, 'e', 2, 4), lease: taken.lease.token }),
      { ok: true, version: 4 },
    );
  });

  it('lets a lease expire when it is not renewed', async () => {
    const leases = leasesOf(store);
    assert.ok((await leases.acquire('expiring', 'node-a/2', 300)).ok);
    assert.equal((await leases.acquire('expiring', 'node-b/2', 300)).ok, false);
    await delay(400);
    assert.ok((await leases.acquire('expiring', 'node-b/2', 300)).ok);
  });
});

interface Closing {
  code: string;
  retryAfterMs: number;
}

/// A joined raw socket on `server` for `doc`, and the closing notices it receives.
async function joined(
  server: TestServer,
  doc: string,
  clientID: string,
): Promise<{ socket: Socket; answer: SyncAnswer; closings: Closing[] }> {
  const socket = rawSocket(server.url, doc, clientID);
  const closings: Closing[] = [];
  socket.on('closing', (notice: Closing) => closings.push(notice));
  const answer = await ask<SyncAnswer>(socket, 'join', {});
  return { socket, answer, closings };
}

async function typeInto(socket: Socket, server: TestServer, doc: string, text: string) {
  const served = (await (await fetch(`${server.url}/docs/${doc}`)).json()) as {
    version: number;
    doc: unknown;
  };
  const node = schema.nodeFromJSON(served.doc);
  const steps = new Transform(node).insert(1, schema.text(text)).steps.map((s) => s.toJSON());
  return ask<StepsAnswer>(socket, 'steps', { version: served.version, steps });
}

describe('two servers on one Redis', () => {
  const leaseMs = 600;
  let proxy: TcpProxy;
  let a: TestServer;
  let b: TestServer;
  before(async () => {
    // a reaches Redis through a proxy the test can cut.
    proxy = new TcpProxy(redisPort);
    await proxy.start();
    const config = { ...noAdmissionLimits, leaseMs, storeTimeoutMs: 300, idleUnloadMs: 60_000 };
    a = await startServer(
      { ...config, nodeId: 'node-a' },
      new RedisStore({
        url: `redis://127.0.0.1:${proxy.port}`,
        keyPrefix,
        commandTimeoutMs: 300,
        pingIntervalMs: 200,
      }),
    );
    b = await startServer(
      { ...config, nodeId: 'node-b' },
      new RedisStore({ url: redisUrl, keyPrefix, commandTimeoutMs: 300 }),
    );
  });
  after(async () => {
    proxy.heal();
    await Promise.all([a.close(), b.close()]);
    await proxy.stop();
  });

  it('serves a document from one of them; the other answers moved and gets it by a handover', async () => {
    const onA = await joined(a, 'handed', 'alice');
    assert.ok(onA.answer.ok);
    const typed = await typeInto(onA.socket, a, 'handed', 'hello ');
    assert.deepEqual(typed, { ok: true, version: 1 });
    // b must not serve it meanwhile: it answers `moved`, with when to try again.
    const onB = await joined(b, 'handed', 'bob');
    assert.equal(!onB.answer.ok && onB.answer.code, 'moved');
    assert.ok(!onB.answer.ok && typeof onB.answer.retryAfterMs === 'number');
    // So does a read there.
    const read = await fetch(`${b.url}/docs/handed`);
    assert.equal(read.status, 503);
    const body = (await read.json()) as { code: string; retryAfterMs?: number };
    assert.equal(body.code, 'moved');
    assert.ok(typeof body.retryAfterMs === 'number' && body.retryAfterMs > 0, JSON.stringify(body));
    // b asked for it: a hands it over at a renewal after holding it a lease time, and sends
    // its editor away with `moved`.
    await waitFor(() => onA.closings.some((c) => c.code === 'moved'), 'a hands over', 5000);
    // With when to come back: once the lease is released (it was 0, at once, and a client
    // fell back to its own backoff).
    assert.ok(
      onA.closings.every((c) => c.retryAfterMs > 0),
      JSON.stringify(onA.closings),
    );
    let answer: SyncAnswer = onB.answer;
    for (let i = 0; i < 20 && !answer.ok; i++) {
      await delay(100);
      answer = await ask<SyncAnswer>(onB.socket, 'join', {});
    }
    assert.ok(answer.ok && 'doc' in answer, JSON.stringify(answer));
    assert.equal(answer.version, 1, 'b serves what a acknowledged');
    assert.deepEqual(await typeInto(onB.socket, b, 'handed', 'world '), { ok: true, version: 2 });
    // a does not serve it any more: a new editor there is answered `moved`.
    const late = await joined(a, 'handed', 'carol');
    assert.equal(!late.answer.ok && late.answer.code, 'moved');
    for (const s of [onA.socket, onB.socket, late.socket]) s.close();
  });

  it('answers a batch refused because the lease was lost with when to try again', async (t) => {
    const onA = await joined(a, 'lost-lease', 'fay');
    assert.ok(onA.answer.ok);
    assert.deepEqual(await typeInto(onA.socket, a, 'lost-lease', 'kept '), {
      ok: true,
      version: 1,
    });
    // The lease passes to another holder behind a's back (it expired while a was paused).
    const other = new RedisStore({ url: redisUrl, keyPrefix });
    await other.ready();
    t.after(async () => {
      onA.socket.close();
      await other.close();
    });
    await other.leases.release('lost-lease', a.server.rooms.peek('lost-lease')!.lease!);
    assert.ok((await other.leases.acquire('lost-lease', 'node-x/1', leaseMs)).ok);
    const refused = await typeInto(onA.socket, a, 'lost-lease', 'refused ');
    assert.equal(!refused.ok && refused.code, 'moved');
    assert.ok(
      !refused.ok && typeof refused.retryAfterMs === 'number' && refused.retryAfterMs > 0,
      JSON.stringify(refused),
    );
    await waitFor(() => onA.closings.some((c) => c.code === 'moved'), 'a sends its editor away');
    assert.ok(
      onA.closings.every((c) => c.retryAfterMs > 0),
      JSON.stringify(onA.closings),
    );
  });

  it('a server cut off from Redis past the lease time stops serving; nothing acknowledged is lost', async () => {
    const onA = await joined(a, 'cut-off', 'dora');
    assert.ok(onA.answer.ok);
    const acknowledged: number[] = [];
    for (let i = 0; i < 3; i++) {
      const answer = await typeInto(onA.socket, a, 'cut-off', `a${i} `);
      assert.ok(answer.ok, JSON.stringify(answer));
      acknowledged.push(answer.version);
    }
    assert.equal(await (await fetch(`${a.url}/readyz`)).status, 200);
    proxy.cut();
    // a cannot renew: its readiness fails, and after a lease time it sends its editors away.
    await waitFor(() => onA.closings.some((c) => c.code === 'moved'), 'a gives up', 5000);
    assert.ok(
      onA.closings.every((c) => c.retryAfterMs > 0),
      JSON.stringify(onA.closings),
    );
    assert.equal((await fetch(`${a.url}/readyz`)).status, 503);
    // b takes the document once the lease expired, with everything a acknowledged.
    const onB = await joined(b, 'cut-off', 'ed');
    let answer: SyncAnswer = onB.answer;
    for (let i = 0; i < 30 && !answer.ok; i++) {
      await delay(100);
      answer = await ask<SyncAnswer>(onB.socket, 'join', {});
    }
    assert.ok(answer.ok && 'doc' in answer, JSON.stringify(answer));
    assert.equal(answer.version, acknowledged.at(-1));
    const text = schema.nodeFromJSON(answer.doc).textContent;
    for (let i = 0; i < 3; i++) assert.ok(text.includes(`a${i} `), text);
    assert.deepEqual(await typeInto(onB.socket, b, 'cut-off', 'b0 '), {
      ok: true,
      version: acknowledged.at(-1)! + 1,
    });
    onA.socket.close();
    onB.socket.close();
    proxy.heal();
  });
});
