import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { pino } from 'pino';
import { createClient } from 'redis';
import { schema, schemaVersion } from '../../../schema/index.js';
import { type ErrorAnswer, type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { loadConfig } from '../../../server/config.js';
import { CodedError } from '../../../server/rooms/coded_error.js';
import type { CreatePermit } from '../../../server/rooms/create_permit.js';
import { Rooms } from '../../../server/rooms/registry.js';
import type { Room } from '../../../server/rooms/room.js';
import type { RoomHooks } from '../../../server/rooms/room_hooks.js';
import {
  leaseRetryMs,
  movedRetryMs,
  type RoomTransport,
} from '../../../server/rooms/room_options.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type LeaseStore,
  type Store,
} from '../../../server/stores/store.js';
import { noAdmissionLimits } from '../../support/hostile.js';
import { startServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { delay, waitFor } from '../../support/wait.js';

// How documents change hands between processes on a real Redis, with the rooms of two
// "processes" in this one: a room closed while its append is in flight still settles (a
// hand-over waits on it), a process that handed a document over does not take it straight
// back, and a process shutting down says so before releasing its leases, so that whoever
// stands in for it gives its documents back when it returns.

const { redisUrl, keyPrefix } = redisForTests();
const ttlMs = 600;
const log = pino({ level: 'silent' });
const stores: RedisStore[] = [];

after(async () => {
  for (const store of stores) await store.close();
  await deleteRedisKeys(redisUrl, keyPrefix);
});

async function redisStore(): Promise<RedisStore> {
  const store = new RedisStore({ url: redisUrl, keyPrefix });
  await store.ready();
  stores.push(store);
  return store;
}

/// The rooms of one process (`holder` is `<node>/<instance>`) on `store`, with `hooks`.
function roomsOf(
  store: Store & Pick<RedisStore, 'leases'>,
  holder: string,
  hooks: RoomHooks = {},
  maxLoadedDocuments?: number,
  leaseMs = ttlMs,
): Rooms {
  const config = loadConfig({
    host: '127.0.0.1',
    port: 0,
    ...(maxLoadedDocuments ? { maxLoadedDocuments } : {}),
  });
  const transport: RoomTransport = { broadcast() {}, evict() {} };
  return new Rooms({
    store,
    schema,
    transport,
    observer: null,
    log,
    options: { ...config, schemaVersion },
    leases: { store: store.leases, holder, ttlMs: leaseMs },
    hooks,
  });
}

/// `real` with its lease renewals passed through `renew`, which calls `real`'s.
function renewingThrough(
  real: RedisStore,
  renew: (forward: () => ReturnType<LeaseStore['renew']>) => ReturnType<LeaseStore['renew']>,
): RedisStore {
  return Object.assign(Object.create(real) as RedisStore, {
    leases: {
      ...real.leases,
      renew: (...args: Parameters<LeaseStore['renew']>) => renew(() => real.leases.renew(...args)),
    },
  });
}

/// Reads `docId` through `rooms` and `room` as a join, a GET and a pull would, every 10 ms for
/// `ms` or until it closes; resolves with each refusal as `<at ms> <how> <code>`.
async function readFor(rooms: Rooms, room: Room, docId: string, ms: number): Promise<string[]> {
  const refused: string[] = [];
  const started = performance.now();
  const at = () => Math.round(performance.now() - started);
  while (performance.now() - started < ms && room.state === 'open') {
    const pulled = room.sync({});
    if (!pulled.ok) refused.push(`${at()} pull ${pulled.code}`);
    try {
      await rooms.get(docId, false);
    } catch (err) {
      refused.push(`${at()} get ${(err as CodedError).code}`);
    }
    await delay(10);
  }
  return refused;
}

/// Hooks that note each load and unload as `<load|unload> <doc>@<version>`.
function noting(events: string[]): RoomHooks {
  return {
    loaded: async (room) => void events.push(`load ${room.docId}@${room.publishedVersion}`),
    unloaded: (room) => void events.push(`unload ${room.docId}@${room.publishedVersion}`),
  };
}

/// Types `text` at the start of `room`'s document as `clientID`; resolves with the answer.
function send(room: Room, clientID: string, text = 'a'): Promise<StepsAnswer> {
  return new Promise((resolve) => {
    const { version } = room.current();
    const step = {
      stepType: 'replace',
      from: 1,
      to: 1,
      slice: { content: [{ type: 'text', text }] },
    };
    room.receive(version, [step], clientID, resolve, performance.now());
  });
}

/// A step typing `text` at the start of the document, as a client sends it.
function typing(text: string): unknown {
  return { stepType: 'replace', from: 1, to: 1, slice: { content: [{ type: 'text', text }] } };
}

/// A promise `open` resolves and `fail` rejects, for a test to hold a store call with.
function latch(): { opened: Promise<void>; open: () => void; fail: (err: Error) => void } {
  let open!: () => void;
  let fail!: (err: Error) => void;
  const opened = new Promise<void>((resolve, reject) => ((open = resolve), (fail = reject)));
  opened.catch(() => {});
  return { opened, open, fail };
}

/// The Redis keys of documents whose ids start with `idPrefix`.
async function keysOf(idPrefix: string): Promise<string[]> {
  const client = createClient({ url: redisUrl });
  await client.connect();
  try {
    const keys: string[] = [];
    for await (const found of client.scanIterator({ MATCH: `${keyPrefix}{${idPrefix}*` })) {
      keys.push(...(Array.isArray(found) ? found : [found]));
    }
    return keys.sort();
  } finally {
    await client.quit();
  }
}

/// A creation permit that refuses (`waitMs` > 0) or allows, and counts what it was asked.
function permit(waitMs: number): CreatePermit & { taken: number; givenBack: number } {
  const counts = { taken: 0, givenBack: 0 };
  return Object.assign(counts, {
    take: () => {
      if (waitMs === 0) counts.taken++;
      return waitMs;
    },
    giveBack: () => void counts.givenBack++,
  });
}

async function redisGet(key: string): Promise<string | null> {
  const client = createClient({ url: redisUrl });
  await client.connect();
  try {
    return await client.get(key);
  } finally {
    await client.quit();
  }
}

describe('documents changing hands', () => {
  it('settles a room closed while its append is in flight, which then comes back refused', async (t) => {
    const real = await redisStore();
    let gate: Promise<void> | null = null;
    // A slow reply: appends wait at the gate while it is closed.
    const slow = Object.assign(Object.create(real) as RedisStore, {
      append: async (docId: string, request: AppendRequest): Promise<AppendOutcome> => {
        if (gate) await gate;
        return real.append(docId, request);
      },
    });
    const rooms = roomsOf(slow, 'node-p/1');
    t.after(() => rooms.closeAll());
    const room = (await rooms.get('in-flight', true))!;
    assert.deepEqual(await send(room, 'p'), { ok: true, version: 1 });
    let open!: () => void;
    gate = new Promise((resolve) => (open = resolve));
    const answer = send(room, 'p');
    await delay(20);
    let idle = false;
    void room.whenIdle().then(() => (idle = true));
    // Closed meanwhile (a lost renewal, say), and the lease goes to another process.
    room.moved('closed while its append was in flight');
    await real.leases.release('in-flight', room.lease!);
    assert.ok((await real.leases.acquire('in-flight', 'node-q/1', ttlMs)).ok);
    gate = null;
    open();
    assert.equal((await answer).ok, false);
    // What a hand-over, shutdown or making space waits on: it used to wait for ever.
    await waitFor(() => idle, 'the room settled', 2000);
  });

  it('stops answering from its copy once its lease may have lapsed, a renewal answered late or not', async (t) => {
    const real = await redisStore();
    let gate: Promise<void> | null = null;
    let open!: () => void;
    // p's renewals reach Redis, but while the gate is closed their answers do not come back:
    // a process paused (SIGSTOP, a long GC) just after it sent one.
    const late = Object.assign(Object.create(real) as RedisStore, {
      leases: {
        ...real.leases,
        renew: async (...args: Parameters<LeaseStore['renew']>) => {
          const outcome = await real.leases.renew(...args);
          if (gate) await gate;
          return outcome;
        },
      },
    });
    const p = roomsOf(late, 'node-p/1');
    const q = roomsOf(real, 'node-q/1');
    t.after(() => {
      open?.();
      p.closeAll();
      q.closeAll();
    });
    const room = (await p.get('lapsed', true))!;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    gate = new Promise((resolve) => (open = resolve));
    // The lease ends a lease time after the last renewal Redis ran: q takes the document
    // then, and moves it on.
    let taken: Room | null = null;
    for (let tries = 0; !taken && tries < 100; tries++) {
      taken = await q.get('lapsed', true).catch(() => null);
      if (!taken) await delay(50);
    }
    assert.ok(taken, 'q took the document');
    assert.deepEqual(await send(taken, 'q', 'b'), { ok: true, version: 2 });
    // p still holds its copy at version 1: a join or pull, and a read through the registry
    // (GET /docs/:id, collab.document()), used to be answered from it. A pull is refused
    // (retryable) while a renewal is asked for; a read waits for one, which fails (no
    // answer in time) after a whole lease time without renewal: the copy is given up.
    const answer = room.sync({});
    assert.equal(answer.ok, false);
    assert.equal((answer as ErrorAnswer).retryable, true);
    await assert.rejects(p.get('lapsed', false), { code: 'moved' });
    assert.equal(room.state, 'closed');
    // The renewal's answer, once it comes, does not bring the copy back: it was sent before
    // the lease lapsed, and so says nothing about now.
    open();
    gate = null;
    await delay(ttlMs);
    assert.equal(room.state, 'closed');
    await assert.rejects(p.get('lapsed', false), { code: 'moved' });
  });

  it('keeps serving a document while its renewals are slow: every answer comes 1.8 s late', async (t) => {
    const real = await redisStore();
    // LEASE_MS 5 s and STORE_TIMEOUT_MS 2 s as in production: each renewal reaches Redis
    // 0.9 s after it is sent and is answered 0.9 s after that, longer than a renewal period.
    const slow = renewingThrough(real, async (forward) => {
      await delay(900);
      const outcome = await forward();
      await delay(900);
      return outcome;
    });
    const p = roomsOf(slow, 'node-p/1', {}, undefined, 5_000);
    t.after(() => p.closeAll());
    const room = (await p.get('slow-renewals', true))!;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    // Renewals skipped while the one before was in flight used to leave the lease
    // unconfirmed: from 6 s on, reads were answered moved and the room closed.
    assert.deepEqual(await readFor(p, room, 'slow-renewals', 12_000), []);
    assert.equal(room.state, 'open');
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
  });

  it('keeps serving a document whose renewal stalled past the store timeout once', async (t) => {
    const real = await redisStore();
    let calls = 0;
    // The third renewal gets no answer within STORE_TIMEOUT_MS (a Redis stalled for 2 s);
    // Redis still holds the lease all along.
    const stalling = renewingThrough(real, async (forward) => {
      if (++calls === 3) {
        await delay(2_500);
        throw new Error('renew timed out');
      }
      return forward();
    });
    const p = roomsOf(stalling, 'node-p/1', {}, undefined, 5_000);
    t.after(() => p.closeAll());
    const room = (await p.get('stalled-renewal', true))!;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    // The next renewal came a period after the stall: reads from 7.8 s on were answered
    // moved and the room closed, the lease still held.
    const refused = await readFor(p, room, 'stalled-renewal', 9_000);
    // Nothing refused, or a retryable refusal while the lease was being confirmed.
    assert.deepEqual(
      refused.filter((line) => !line.endsWith(' unavailable')),
      [],
    );
    assert.equal(room.state, 'open');
    assert.ok(calls > 3, `renewed after the stall (${calls} renewals)`);
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
  });

  it('retries a renewal that failed at once soon, not a period later: two such failures lose nothing', async (t) => {
    const real = await redisStore();
    const sentAt: number[] = [];
    const started = performance.now();
    // Renewals 2 and 3 fail at once (an error reply: READONLY after a failover, LOADING); Redis
    // holds the lease all along. Retried a whole period later each, the next renewal went out
    // a lease time after the last good one, racing the key's expiry, and reads were refused
    // from 0.9 of it on.
    const failing = renewingThrough(real, async (forward) => {
      sentAt.push(Math.round(performance.now() - started));
      if (sentAt.length === 2 || sentAt.length === 3) throw new Error('READONLY');
      return forward();
    });
    const p = roomsOf(failing, 'node-p/1', {}, undefined, 3_000);
    t.after(() => p.closeAll());
    const room = (await p.get('fast-failures', true))!;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    assert.deepEqual(await readFor(p, room, 'fast-failures', 5_000), []);
    assert.equal(room.state, 'open');
    // The first failure of a run is retried within a fraction of a period (1 s here); the
    // next renewal after the second comes at the next period.
    assert.ok(sentAt[2]! - sentAt[1]! < 500, `retried at ${sentAt.join(', ')} ms`);
    assert.ok(sentAt[3]! - sentAt[0]! < 2_700, `renewed at ${sentAt.join(', ')} ms`);
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
  });

  it('answers reads once a renewal in flight confirms the lease, and refuses them while it fails', async (t) => {
    const real = await redisStore();
    let gate: { opened: Promise<void>; open: () => void; fail: (err: Error) => void } | null = null;
    let calls = 0;
    // While the gate is closed, renewals wait for it before they reach Redis.
    const gated = renewingThrough(real, async (forward) => {
      calls++;
      if (gate) await gate.opened;
      return forward();
    });
    const closeGate = () => {
      let open!: () => void;
      let fail!: (err: Error) => void;
      const opened = new Promise<void>((resolve, reject) => ((open = resolve), (fail = reject)));
      opened.catch(() => {});
      gate = { opened, open, fail };
    };
    const p = roomsOf(gated, 'node-p/1', {}, undefined, 2_000);
    t.after(() => {
      (gate as { open: () => void } | null)?.open();
      p.closeAll();
    });
    const room = (await p.get('confirmed', true))!;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });

    // A renewal in flight past the lease's freshness: reads wait for it, and share it.
    closeGate();
    await waitFor(() => !room.leaseFresh(), 'the lease unconfirmed', 3_000);
    const before = calls;
    const pulled = room.sync({});
    assert.deepEqual(pulled.ok ? pulled : [pulled.code, pulled.retryAfterMs], [
      'unavailable',
      leaseRetryMs,
    ]);
    const reads = [p.get('confirmed', false), p.get('confirmed', false), p.get('confirmed', true)];
    await delay(20);
    assert.equal(calls, before, 'no renewal sent beside the one in flight');
    gate!.open();
    gate = null;
    for (const read of reads) assert.equal(await read, room);
    assert.ok(room.leaseFresh());
    assert.equal(room.sync({}).ok, true);

    // A renewal that fails past the freshness: reads are refused, retryable, and the room
    // stays open; the next read sends a renewal, and is answered.
    closeGate();
    await waitFor(() => !room.leaseFresh(), 'the lease unconfirmed', 3_000);
    const refused = p.get('confirmed', false);
    await delay(20);
    gate!.fail(new Error('renew timed out'));
    gate = null;
    await assert.rejects(refused, { code: 'unavailable', retryAfterMs: leaseRetryMs });
    assert.equal(room.state, 'open');
    assert.equal(await p.get('confirmed', false), room);
    assert.equal(room.sync({}).ok, true);
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
  });

  it('does not take back a document it handed over a moment ago', async (t) => {
    const store = await redisStore();
    const p = roomsOf(store, 'node-p/1');
    const q = roomsOf(store, 'node-q/1');
    t.after(() => {
      p.closeAll();
      q.closeAll();
    });
    const room = (await p.get('handed', true))!;
    assert.deepEqual(await send(room, 'p'), { ok: true, version: 1 });
    // q's editors arrive: q asks for the document, p hands it over once it held it a lease
    // time, and q takes it.
    await assert.rejects(q.get('handed', true), { code: 'moved' });
    await waitFor(() => room.state === 'closed', 'p handed it over', 5000);
    const taken = (await q.get('handed', true))!;
    assert.equal(taken.publishedVersion, 1);
    // Editors a gateway still sends to p are sent on; p neither takes the lease (free or
    // not) nor asks for it, so q is not made to hand it back.
    await q.releaseAll(q.closeAll());
    await assert.rejects(p.get('handed', true), { code: 'moved' });
    assert.equal(await redisGet(docKeys(keyPrefix, 'handed').wanted), null);
    // After two lease times it may serve it again.
    await delay(2 * ttlMs + 50);
    assert.equal((await p.get('handed', true))?.publishedVersion, 1);
  });

  it('tells the host once of every document that leaves memory, handed over or lost, failed or closed', async (t) => {
    const store = await redisStore();
    const events: string[] = [];
    const p = roomsOf(store, 'node-p/1', noting(events));
    const q = roomsOf(store, 'node-q/1');
    t.after(() => {
      p.closeAll();
      q.closeAll();
    });
    // Handed over: saved, its editors sent away, dropped from memory.
    const handed = (await p.get('gone-handed', true))!;
    assert.deepEqual(await send(handed, 'p'), { ok: true, version: 1 });
    await assert.rejects(q.get('gone-handed', true), { code: 'moved' });
    await waitFor(() => handed.state === 'closed', 'p handed it over', 5000);
    // Its lease lost: the next append is refused, the room closed.
    const lost = (await p.get('gone-lost', true))!;
    assert.deepEqual(await send(lost, 'p'), { ok: true, version: 1 });
    await store.leases.release('gone-lost', lost.lease!);
    assert.ok((await store.leases.acquire('gone-lost', 'node-q/1', ttlMs)).ok);
    assert.equal((await send(lost, 'p')).ok, false);
    // Failed while serving it.
    const failed = (await p.get('gone-failed', true))!;
    failed.fail(new Error('a bug'));
    // Still loaded at close.
    await p.get('gone-closed', true);
    assert.deepEqual(events.splice(0).sort(), [
      ...['load gone-closed@0', 'load gone-failed@0', 'load gone-handed@0'],
      ...['load gone-lost@0', 'unload gone-failed@0', 'unload gone-handed@1'],
      'unload gone-lost@1',
    ]);
    // Each once: closing the registry tells of the one left, and of none again.
    lost.moved('closed again');
    p.closeAll();
    assert.deepEqual(events, ['unload gone-closed@0']);
  });

  it("asks for a document for an editor whose join shared a reader's load", async (t) => {
    const store = await redisStore();
    const p = roomsOf(store, 'node-p/1');
    const q = roomsOf(store, 'node-q/1');
    t.after(() => {
      p.closeAll();
      q.closeAll();
    });
    const room = (await p.get('shared-load', true))!;
    assert.deepEqual(await send(room, 'p'), { ok: true, version: 1 });
    // A reader's load is in flight on q when an editor's join comes: the editor shares it.
    const read = q.get('shared-load', false);
    const write = q.get('shared-load', true);
    await assert.rejects(read, { code: 'moved' });
    await assert.rejects(write, { code: 'moved' });
    // The reader did not ask p for the document; the editor did (it used to be answered
    // `moved` with nobody asking, and come back to the same answer for as long as p held it).
    assert.equal(await redisGet(docKeys(keyPrefix, 'shared-load').wanted), 'node-q/1');
    await waitFor(() => room.state === 'closed', 'p handed it over', 5000);
    assert.equal((await q.get('shared-load', true))?.publishedVersion, 1);
  });

  it('marks a node gone before releasing its leases at shutdown, so the document stays its', async (t) => {
    const store = await redisStore();
    const home = roomsOf(store, 'node-home/1');
    const standIn = roomsOf(store, 'node-other/1');
    t.after(() => {
      home.closeAll();
      standIn.closeAll();
    });
    const room = (await home.get('homed', true))!;
    assert.deepEqual(await send(room, 'h'), { ok: true, version: 1 });
    const keys = docKeys(keyPrefix, 'homed');
    // Alive: it said so when it started.
    assert.notEqual(await redisGet(`${keyPrefix}node:node-home`), null);
    assert.equal(await redisGet(keys.home), 'node-home');
    // A graceful shutdown: flush, close, release.
    await home.flushAll();
    await home.releaseAll(home.closeAll());
    assert.equal(await redisGet(`${keyPrefix}node:node-home`), null);
    // Another node takes the document while the home is away: it stands in for it.
    assert.equal((await standIn.get('homed', true))?.publishedVersion, 1);
    assert.equal(await redisGet(keys.home), 'node-home');
  });
});

describe('reads through a server', () => {
  it('answers a pull once a renewal confirms the lease, as a join: moved when it is lost, unavailable while it fails', async (t) => {
    const real = await redisStore();
    // While `hold` is set, renewals wait for it: before they reach Redis, or once Redis ran
    // them, their answer held back (a slow reply).
    let hold: (ReturnType<typeof latch> & { where: 'before' | 'after' }) | null = null;
    const holding = (where: 'before' | 'after') => (hold = { ...latch(), where });
    const gated = renewingThrough(real, async (forward) => {
      const held = hold;
      if (held?.where === 'before') await held.opened;
      const outcome = await forward();
      if (held?.where === 'after') await held.opened;
      return outcome;
    });
    const server = await startServer(
      { ...noAdmissionLimits, leaseMs: 2_000, storeTimeoutMs: 1_900, nodeId: 'node-p' },
      gated,
    );
    const writer = rawSocket(server.url, 'pulled', 'writer');
    const reader = rawSocket(server.url, 'pulled', 'reader');
    // What reaches the reader, in order: broadcasts and pull answers, by version.
    const seen: string[] = [];
    reader.on('steps', (message: { version: number }) => seen.push(`steps ${message.version}`));
    const pull = (request: object) =>
      ask<SyncAnswer>(reader, 'pull', request).then((answer) => {
        seen.push(answer.ok ? `pull ${answer.version}` : `pull ${answer.code}`);
        return answer;
      });
    t.after(async () => {
      (hold as { open: () => void } | null)?.open();
      writer.close();
      reader.close();
      await server.close();
    });
    assert.ok((await ask<SyncAnswer>(writer, 'join', {})).ok);
    const typed = await ask<StepsAnswer>(writer, 'steps', { version: 0, steps: [typing('a')] });
    assert.deepEqual(typed, { ok: true, version: 1 });
    const joined = await ask<SyncAnswer>(reader, 'join', {});
    assert.ok(joined.ok);
    const room = server.server.rooms.peek('pulled')!;

    // A renewal in flight past the lease's freshness: the pull waits for it, as a join
    // does, and is answered once it is held. It was refused unavailable at once.
    holding('after');
    await waitFor(() => !room.leaseFresh(), 'the lease unconfirmed', 3_000);
    const waiting = pull({ version: 1, epoch: joined.epoch });
    // A batch accepted meanwhile is broadcast to the reader before its answer, which holds it.
    const meanwhile = await ask<StepsAnswer>(writer, 'steps', {
      version: 1,
      steps: [typing('b')],
    });
    assert.deepEqual(meanwhile, { ok: true, version: 2 });
    await delay(20);
    assert.deepEqual(seen, ['steps 2'], 'the pull waits for the renewal');
    hold!.open();
    hold = null;
    const answered = await waiting;
    assert.ok(answered.ok && 'steps' in answered, JSON.stringify(answered));
    assert.equal(answered.version, 2);
    assert.equal(answered.steps.length, 1);
    assert.deepEqual(seen, ['steps 2', 'pull 2']);
    // And after the answer, only what is newer.
    const later = await ask<StepsAnswer>(writer, 'steps', { version: 2, steps: [typing('c')] });
    assert.deepEqual(later, { ok: true, version: 3 });
    await waitFor(() => seen.length === 3, 'the next broadcast');
    assert.deepEqual(seen, ['steps 2', 'pull 2', 'steps 3']);

    // A renewal that fails: the pull is refused, retryable, and the document stays open;
    // the next pull is answered.
    holding('after');
    await waitFor(() => !room.leaseFresh(), 'the lease unconfirmed', 3_000);
    const refused = pull({});
    await delay(20);
    hold!.fail(new Error('renew timed out'));
    hold = null;
    const refusal = await refused;
    assert.deepEqual(refusal.ok ? refusal : [refusal.code, refusal.retryAfterMs], [
      'unavailable',
      leaseRetryMs,
    ]);
    assert.equal(room.state, 'open');
    const again = await pull({});
    assert.ok(again.ok && again.version === 3, JSON.stringify(again));

    // A lease lost meanwhile (another process took it once it expired): moved.
    holding('before');
    await waitFor(() => !room.leaseFresh(), 'the lease unconfirmed', 3_000);
    await real.leases.release('pulled', room.lease!);
    assert.ok((await real.leases.acquire('pulled', 'node-x/1', 2_000)).ok);
    const lost = pull({});
    await delay(20);
    assert.equal(seen.at(-1), 'pull 3', 'the pull waits for the renewal');
    hold!.open();
    hold = null;
    const moved = await lost;
    assert.deepEqual(moved.ok ? moved : [moved.code, moved.retryAfterMs], ['moved', movedRetryMs]);
  });
});

describe('a document closed while it asks its store', () => {
  it('is not read from: GET /docs/:id and collab.document() are refused, retryable, until it is reloaded', async (t) => {
    const real = await redisStore();
    // While `held` is set, loads of the document wait for it: the room, closed after its
    // snapshot's conflict, asks where the store stands and waits for the answer.
    let held: ReturnType<typeof latch> | null = null;
    const holding = Object.assign(Object.create(real) as RedisStore, {
      load: async (docId: string) => {
        if (held) await held.opened;
        return real.load(docId);
      },
    });
    const server = await startServer({ ...noAdmissionLimits, nodeId: 'node-p' }, holding);
    const editor = rawSocket(server.url, 'closed-read', 'editor');
    t.after(async () => {
      held?.open();
      editor.close();
      await server.close();
    });
    assert.ok((await ask<SyncAnswer>(editor, 'join', {})).ok);
    const typed = await ask<StepsAnswer>(editor, 'steps', { version: 0, steps: [typing('a')] });
    assert.deepEqual(typed, { ok: true, version: 1 });
    const room = server.server.rooms.peek('closed-read')!;
    // Another writer moved the document to another epoch behind this copy's back: the next
    // snapshot is refused as a conflict, and the room closes while it asks the store.
    const client = createClient({ url: redisUrl });
    await client.connect();
    try {
      await client.hSet(docKeys(keyPrefix, 'closed-read').meta, 'epoch', 'elsewhere');
    } finally {
      await client.quit();
    }
    held = latch();
    assert.equal(await room.snapshot(), false);
    assert.equal(room.state, 'closed');
    assert.equal(server.server.rooms.peek('closed-read'), room, 'still registered');
    assert.ok(room.leaseFresh(), 'its lease has not lapsed');
    // Its copy is behind the store: it was answered from, under the epoch the store left.
    await assert.rejects(server.server.collab.document('closed-read'), {
      code: 'unavailable',
    });
    const read = await fetch(`${server.url}/docs/closed-read`);
    const body = (await read.json()) as { code?: string; retryAfterMs?: number };
    assert.deepEqual([read.status, body.code], [503, 'unavailable'], JSON.stringify(body));
    assert.ok(typeof body.retryAfterMs === 'number' && body.retryAfterMs > 0);
    // As a join is.
    const joiner = rawSocket(server.url, 'closed-read', 'joiner');
    const refused = await ask<SyncAnswer>(joiner, 'join', {});
    joiner.close();
    assert.deepEqual(refused.ok ? refused : [refused.code, refused.retryAfterMs], [
      'unavailable',
      body.retryAfterMs,
    ]);
    // Once the store answered, the room goes, and the next read loads what the store holds.
    held.open();
    held = null;
    await waitFor(() => server.server.rooms.peek('closed-read') !== room, 'the room gone');
    const reloaded = (await (await fetch(`${server.url}/docs/closed-read`)).json()) as {
      epoch?: string;
      version?: number;
    };
    assert.deepEqual([reloaded.epoch, reloaded.version], ['elsewhere', 1]);
  });
  it('after a lost lease, while its store cannot be read: moved at its back-off, not every 100 ms', async (t) => {
    const real = await redisStore();
    let unreadable = false;
    let lose = false;
    const failing = Object.assign(Object.create(real) as RedisStore, {
      load: (docId: string) =>
        unreadable
          ? Promise.reject(new StoreUnavailableError('connect ECONNREFUSED 10.1.2.3:6379'))
          : real.load(docId),
      leases: {
        ...real.leases,
        renew: (...args: Parameters<LeaseStore['renew']>) =>
          lose ? Promise.resolve('lost' as const) : real.leases.renew(...args),
      },
    });
    const server = await startServer(
      { ...noAdmissionLimits, leaseMs: 1_500, storeTimeoutMs: 1_000, nodeId: 'node-q' },
      failing,
    );
    const editor = rawSocket(server.url, 'settle-lost', 'editor');
    t.after(async () => {
      unreadable = false;
      lose = false;
      editor.close();
      await server.close();
    });
    assert.ok((await ask<SyncAnswer>(editor, 'join', {})).ok);
    const typed = await ask<StepsAnswer>(editor, 'steps', { version: 0, steps: [typing('a')] });
    assert.deepEqual(typed, { ok: true, version: 1 });
    const room = server.server.rooms.peek('settle-lost')!;
    unreadable = true;
    lose = true;
    await waitFor(() => room.state !== 'open', 'the room closed on its lost lease', 3_000);
    // Its lease lost, another node may serve the document: readers are sent there, as its
    // editors were. Past the lease time (a closed room's lease is not renewed) they were told
    // to come back every 100 ms for as long as the store could not be read, up to a minute.
    await waitFor(() => !room.leaseFresh(), 'its lease unconfirmed', 3_000);
    await delay(1_200);
    assert.equal(server.server.rooms.peek('settle-lost'), room, 'still settling');
    const read = await fetch(`${server.url}/docs/settle-lost`);
    const body = (await read.json()) as { code?: string; retryAfterMs?: number };
    assert.deepEqual([read.status, body.code], [503, 'moved'], JSON.stringify(body));
    // The room asks its store again after 250, 500, 1000 ms ...: the hint follows it.
    assert.ok((body.retryAfterMs ?? 0) >= 500, JSON.stringify(body));
    await assert.rejects(server.server.collab.document('settle-lost'), { code: 'moved' });
    unreadable = false;
    lose = false;
    await waitFor(
      () => server.server.rooms.peek('settle-lost') !== room,
      'the room gone once the store answers',
      8_000,
    );
    const reloaded = (await (await fetch(`${server.url}/docs/settle-lost`)).json()) as {
      version?: number;
    };
    assert.equal(reloaded.version, 1, 'the acknowledged step kept');
  });
});

describe('a refused creation', () => {
  it('changes nothing: no keys, no document unloaded for it', async (t) => {
    const store = await redisStore();
    const rooms = roomsOf(store, 'node-p/1', {}, 1);
    t.after(() => rooms.closeAll());
    // The one document this process may hold, idle: a new one would unload it.
    const held = (await rooms.get('refused-held', true))!;
    assert.deepEqual(await send(held, 'p'), { ok: true, version: 1 });
    const before = await keysOf('refused-');
    // A client joining made-up ids faster than it may create documents: each join used to
    // unload the idle document, and leave a fencing counter and a home in Redis for good.
    const limited = permit(60_000);
    for (let i = 0; i < 20; i++) {
      await assert.rejects(rooms.get(`refused-made-up-${i}`, limited), {
        name: 'CreationRateError',
      });
    }
    assert.deepEqual(await keysOf('refused-'), before);
    assert.equal(rooms.peek('refused-held'), held);
    assert.equal(held.state, 'open');
  });

  it('looks for a stored document before the lease without reading it, and reads it once', async (t) => {
    const real = await redisStore();
    let loads = 0;
    const counting = Object.assign(Object.create(real) as RedisStore, {
      load: (docId: string) => {
        loads++;
        return real.load(docId);
      },
    });
    const writer = roomsOf(real, 'node-p/1');
    const reader = roomsOf(counting, 'node-q/1');
    t.after(() => {
      writer.closeAll();
      reader.closeAll();
    });
    const room = (await writer.get('looked-for', true))!;
    assert.deepEqual(await send(room, 'p'), { ok: true, version: 1 });
    await writer.releaseAll(writer.closeAll());
    // An editor whose creations are counted, and a reader: each looks before its lease (the
    // look refuses a creation, or answers a reader null, without a lease), then reads.
    const opened = (await reader.get('looked-for', permit(0)))!;
    assert.equal(opened.publishedVersion, 1);
    assert.equal(loads, 1, 'one whole read');
    await reader.releaseAll(reader.closeAll());
    loads = 0;
    assert.equal((await reader.get('looked-for', false))!.publishedVersion, 1);
    assert.equal(loads, 1, 'one whole read');
    // Still null for a document nobody stored, with no read and no keys.
    loads = 0;
    assert.equal(await reader.get('looked-for-nothing', false), null);
    assert.equal(loads, 0);
    assert.deepEqual(await keysOf('looked-for-nothing'), []);
    // A damaged one (a journal without its meta hash) is quarantined by the look, before
    // any lease: no fencing counter or home left for it.
    const client = createClient({ url: redisUrl });
    await client.connect();
    try {
      await client.rPush(docKeys(keyPrefix, 'looked-for-damaged').journal, 'junk');
    } finally {
      await client.quit();
    }
    await assert.rejects(reader.get('looked-for-damaged', false), {
      name: 'CorruptDocumentError',
    });
    assert.equal((await keysOf('looked-for-damaged')).length, 1);
  });

  it('leaves no keys when the loaded hook refuses a new document, or it is left unwritten', async (t) => {
    const store = await redisStore();
    const rooms = roomsOf(store, 'node-p/1', {
      loaded: async (room) => {
        if (room.docId.startsWith('unmade-refused')) throw new CodedError('forbidden');
      },
    });
    t.after(() => rooms.closeAll());
    // Refused once its lease was held: the lease goes back, and the keys the lease made.
    await assert.rejects(rooms.get('unmade-refused', true), { code: 'forbidden' });
    // (Released without waiting for Redis: the refusal is not held up by it.)
    let left = await keysOf('unmade-');
    for (let tries = 0; left.length > 0 && tries < 100; tries++) {
      await delay(20);
      left = await keysOf('unmade-');
    }
    assert.deepEqual(left, []);
    // A new document an editor opened and left without a change: its lease released at
    // shutdown takes its keys along.
    await rooms.get('unmade-unwritten', true);
    assert.notDeepEqual(await keysOf('unmade-'), []);
    await rooms.releaseAll(rooms.closeAll());
    assert.deepEqual(await keysOf('unmade-'), []);
  });

  it('gives back a creation counted for a document another process serves', async (t) => {
    const store = await redisStore();
    const p = roomsOf(store, 'node-p/1');
    const q = roomsOf(store, 'node-q/1');
    t.after(() => {
      p.closeAll();
      q.closeAll();
    });
    // p serves a new document with nothing written yet: q's look finds nothing.
    await p.get('counted-elsewhere', true);
    const allowed = permit(0);
    await assert.rejects(q.get('counted-elsewhere', allowed), { code: 'moved' });
    // A join answered `moved` and retried until the hand-over must not use up creations.
    assert.deepEqual(
      { taken: allowed.taken, givenBack: allowed.givenBack },
      {
        taken: 1,
        givenBack: 1,
      },
    );
    // A creation made keeps its count.
    const made = permit(0);
    assert.equal((await q.get('counted-made', made))?.publishedVersion, 0);
    assert.deepEqual({ taken: made.taken, givenBack: made.givenBack }, { taken: 1, givenBack: 0 });
  });
});
