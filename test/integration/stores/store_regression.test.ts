import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import {
  connect as netConnect,
  createServer as createNetServer,
  type AddressInfo,
  type Socket as NetSocket,
} from 'node:net';
import { after, describe, it } from 'node:test';
import { TextSelection } from 'prosemirror-state';
import { createClient, RESP_TYPES } from 'redis';
import type { CollabClient } from '../../../client/index.js';
import type { DocJSON } from '../../../schema/events.js';
import { pino } from 'pino';
import { schema, schemaVersion } from '../../../schema/index.js';
import { type StepsAnswer } from '../../../schema/events.js';
import { loadConfig } from '../../../server/config.js';
import { Rooms } from '../../../server/rooms/registry.js';
import type { Room } from '../../../server/rooms/room.js';
import type { RoomTransport } from '../../../server/rooms/room_options.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import { openEditor } from '../../support/editors.js';
import { RedisProcess } from '../../support/redis_process.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { delay, waitFor } from '../../support/wait.js';

// A Redis that comes back with an older state (an RDB restore; `appendfsync everysec` losing
// its last second) keeps the document's epoch. Serving that older copy under the same epoch
// would hand the lost version numbers out again for other steps, and an editor that saw the
// lost ones would be told it is up to date: editors and server diverge with no error. These
// tests take the older state back with DUMP and RESTORE, as a restart from an older file does.

const { redisUrl, keyPrefix } = redisForTests();
const redis = () => createClient({ url: redisUrl });
type RedisClient = ReturnType<typeof redis>;

after(() => deleteRedisKeys(redisUrl, keyPrefix));

function insert(pos: number, text: string): unknown {
  return { stepType: 'replace', from: pos, to: pos, slice: { content: [{ type: 'text', text }] } };
}

function text(doc: DocJSON): string {
  const out: string[] = [];
  const walk = (node: DocJSON): void => {
    if (typeof node.text === 'string') out.push(node.text);
    for (const child of (node.content ?? []) as DocJSON[]) walk(child);
  };
  walk(doc);
  return out.join('');
}

/// The document's keys as they are now, to be put back later.
async function dumpDocument(client: RedisClient, docId: string): Promise<Map<string, Buffer>> {
  const keys = docKeys(keyPrefix, docId);
  const dumped = new Map<string, Buffer>();
  for (const key of [keys.meta, keys.journal, keys.snapshot]) {
    const value = await client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer }).dump(key);
    if (value !== null) dumped.set(key, value);
  }
  return dumped;
}

/// Puts the document's keys back as `dumpDocument` saw them (keys it did not see are deleted).
async function restoreDocument(
  client: RedisClient,
  docId: string,
  dumped: Map<string, Buffer>,
): Promise<void> {
  const keys = docKeys(keyPrefix, docId);
  await client.del([keys.meta, keys.journal, keys.snapshot]);
  for (const [key, value] of dumped) await client.restore(key, 0, value);
}

/// A server on the Redis store and a Redis client of the test's own, both closed after `run`.
async function withRedisServer(
  run: (server: TestServer, client: RedisClient) => Promise<void>,
): Promise<void> {
  const client = redis();
  await client.connect();
  const server = await startServer({}, new RedisStore({ url: redisUrl, keyPrefix }));
  try {
    await run(server, client);
  } finally {
    await server.close();
    await client.close();
  }
}

describe('a Redis that goes back to an older state', () => {
  it('makes the process serving the document start a new epoch from its copy', async () => {
    await withRedisServer(async (server, client) => {
      const docId = `regress-${randomUUID()}`;
      const alice = rawSocket(server.url, docId, 'alice');
      const joined = await ask<{ epoch: string }>(alice, 'join', {});
      assert.deepEqual(await ask(alice, 'steps', { version: 0, steps: [insert(1, 'aaa')] }), {
        ok: true,
        version: 1,
      });
      const older = await dumpDocument(client, docId);
      const bob = rawSocket(server.url, docId, 'bob');
      await ask(bob, 'join', {});
      assert.deepEqual(await ask(alice, 'steps', { version: 1, steps: [insert(1, 'bbb')] }), {
        ok: true,
        version: 2,
      });
      // Redis loses the acknowledged "bbb": the process still serves the document.
      await restoreDocument(client, docId, older);
      const closing = new Promise((resolve) => bob.once('closing', resolve));
      const refused = await ask<{ ok: boolean; code: string }>(alice, 'steps', {
        version: 2,
        steps: [insert(1, 'ccc')],
      });
      assert.equal(refused.ok, false);
      assert.equal(refused.code, 'stale');
      assert.equal(((await closing) as { code: string }).code, 'stale');
      alice.close();
      bob.close();

      // The store holds this process's copy, "bbb" included, under a new epoch.
      const meta = await client.hGetAll(docKeys(keyPrefix, docId).meta);
      assert.notEqual(meta['epoch'], joined.epoch);
      assert.equal(meta['version'], '2');
      // Bob comes back with the version and epoch he holds: he is sent the whole document
      // (another epoch), which is his.
      const back = rawSocket(server.url, docId, 'bob');
      const answer = await ask<{ ok: true; epoch: string; version: number; doc?: DocJSON }>(
        back,
        'join',
        { version: 2, epoch: joined.epoch },
      );
      assert.equal(answer.epoch, meta['epoch']);
      assert.ok(answer.doc, 'the whole document, not "no steps missing"');
      assert.equal(text(answer.doc), 'bbbaaa');
      assert.deepEqual(
        await ask(back, 'steps', { version: answer.version, steps: [insert(4, 'X')] }),
        { ok: true, version: 3 },
      );
      const served = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
        doc: DocJSON;
      };
      assert.equal(text(served.doc), 'bbbXaaa');
      back.close();
    });
  });

  it('reloads a client that comes back ahead of a server that lost its steps', async (t) => {
    const client = redis();
    await client.connect();
    let server = await startServer({}, new RedisStore({ url: redisUrl, keyPrefix }));
    const port = server.port;
    const docId = `ahead-${randomUUID()}`;
    const reloads: string[] = [];
    let editor: CollabClient | null = null;
    t.after(async () => {
      editor?.close();
      await server.close();
      await client.close();
    });
    editor = openEditor(server.url, docId, {
      onReload: ({ reason }) => reloads.push(reason),
    });
    await editor.ready();
    const type = (what: string): void => {
      const state = editor!.state!;
      const tr = state.tr.setSelection(TextSelection.create(state.doc, 1));
      editor!.dispatch(tr.insertText(what));
    };
    type('a');
    await editor.settled();
    const older = await dumpDocument(client, docId);
    type('b');
    await editor.settled();
    assert.equal(editor.acknowledgedVersion, 2);
    const epoch = editor.epoch;

    // The server stops (its snapshot holds "ba"), Redis goes back to "a", and a new process
    // serves the document: it cannot know what was lost.
    await server.close();
    await restoreDocument(client, docId, older);
    server = await startServer({ port }, new RedisStore({ url: redisUrl, keyPrefix }));
    await waitFor(() => reloads.length > 0, 'the editor to reload', 15_000);
    await waitFor(() => editor!.status === 'synced', 'the editor to sync', 15_000);
    assert.equal(editor.epoch, epoch, 'the server does not know another epoch');
    assert.equal(editor.version, 1);
    assert.equal(editor.state!.doc.textContent, 'a');
    // "b" is not durable any more: the client must not say it is.
    assert.equal(editor.acknowledgedVersion, 1);
    assert.equal(reloads[0], "the document's history was reset");
    // And it edits on from the server's document, not from one the server never had.
    type('c');
    await editor.settled();
    const served = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
      version: number;
      doc: DocJSON;
    };
    assert.equal(served.version, 2);
    assert.equal(editor.state!.doc.textContent, text(served.doc));
    assert.equal(text(served.doc), 'ca');
  });
});

describe('a Redis that goes back to an older state, then a lost acknowledgement', () => {
  it('does not apply twice a batch whose acknowledgement was lost after the client reloaded the older history', async (t) => {
    const client = redis();
    await client.connect();
    // Rooms unload 50 ms after their last editor: the rejoin below is answered with the whole
    // document, and `acceptedThrough` is what says whether the lost batch landed.
    let server = await startServer(
      { idleUnloadMs: 50 },
      new RedisStore({ url: redisUrl, keyPrefix }),
    );
    const port = server.port;
    const docId = `ahead-lost-ack-${randomUUID()}`;
    const reloads: string[] = [];
    const editor = openEditor(server.url, docId, {
      clientID: 'rho',
      reconnectDelayMs: 1500,
      reconnectDelayMaxMs: 1500,
      reconnectJitter: 0,
      onReload: ({ reason }) => reloads.push(reason),
    });
    t.after(async () => {
      editor.close();
      await server.close();
      await client.close();
    });
    await editor.ready();
    const type = (what: string): void => {
      const state = editor.state!;
      editor.dispatch(state.tr.insertText(what, state.doc.content.size - 1));
    };
    type('a');
    await editor.settled();
    const older = await dumpDocument(client, docId);
    type('b');
    await editor.settled();

    // Redis goes back to "a" while no process serves the document: the editor comes back
    // ahead of the server, in the same epoch, and reloads "a" (version 1).
    await server.close();
    await restoreDocument(client, docId, older);
    server = await startServer(
      { port, idleUnloadMs: 50 },
      new RedisStore({ url: redisUrl, keyPrefix }),
    );
    await waitFor(
      () => reloads.length === 1 && editor.status === 'synced',
      'the editor to reload',
      15_000,
    );
    assert.equal(editor.state!.doc.textContent, 'a');

    // "c" goes out and lands as version 2, but the connection drops before its broadcast
    // and acknowledgement come back; the room unloads before the editor returns.
    type('c');
    editor.socket.io.engine.close();
    await waitFor(() => editor.reconnects >= 2 && reloads.length === 2, 'the rejoin', 15_000);
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'settled', 15_000);
    const served = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
      version: number;
      doc: DocJSON;
    };
    assert.equal(text(served.doc), 'ac', '"c" once on the server');
    assert.equal(editor.state!.doc.textContent, 'ac', '"c" once in the editor');
    assert.equal(editor.version, served.version);
  });
});

/// A TCP proxy to `port` whose answers to the client can be dropped (`hold`) and which can
/// refuse new connections (`refuse`), so that a batch lands while its acknowledgement is lost.
async function lossyProxy(port: number) {
  const state = { hold: false, refuse: false };
  const sockets: NetSocket[] = [];
  const server = createNetServer((downstream) => {
    if (state.refuse) {
      downstream.destroy();
      return;
    }
    const upstream = netConnect(port, '127.0.0.1');
    sockets.push(downstream, upstream);
    downstream.on('data', (data) => upstream.write(data));
    upstream.on('data', (data) => {
      if (!state.hold) downstream.write(data);
    });
    downstream.on('close', () => upstream.destroy());
    upstream.on('close', () => downstream.destroy());
    downstream.on('error', () => {});
    upstream.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    state,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    drop(): void {
      for (const socket of sockets.splice(0)) socket.destroy();
    },
    close(): void {
      this.drop();
      server.close();
    },
  };
}

describe('a Redis that goes back to an older state, seen from the editors', () => {
  it('sends again the batch that found the store behind, and keeps every acknowledged one once', async () => {
    await withRedisServer(async (server, client) => {
      const docId = `refused-${randomUUID()}`;
      const editor = openEditor(server.url, docId, { clientID: 'ed' });
      const type = async (what: string, settle = true): Promise<void> => {
        const state = editor.state!;
        editor.dispatch(state.tr.insertText(what, state.doc.content.size - 1));
        if (settle) await editor.settled();
      };
      try {
        await editor.ready();
        await type('A');
        await type('B');
        const older = await dumpDocument(client, docId);
        await type('C');
        await type('D');
        // Redis goes back to "AB"; the batch "E" is the one that finds it, and is refused.
        await restoreDocument(client, docId, older);
        await type('E', false);
        await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'E', 15_000);
        const served = (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
          doc: DocJSON;
        };
        assert.equal(text(served.doc), 'ABCDE');
        assert.equal(editor.state!.doc.textContent, 'ABCDE');
      } finally {
        editor.close();
      }
    });
  });

  it('does not apply twice a batch that landed but whose acknowledgement was lost before the repair', async () => {
    await withRedisServer(async (server, client) => {
      const docId = `ack-lost-${randomUUID()}`;
      const keys = docKeys(keyPrefix, docId);
      const proxy = await lossyProxy(server.port);
      const editor = openEditor(proxy.url, docId, { clientID: 'pat' });
      const served = async () =>
        (await (await fetch(`${server.url}/docs/${docId}`)).json()) as {
          doc: DocJSON;
          version: number;
        };
      try {
        await editor.ready();
        const state = editor.state!;
        editor.dispatch(state.tr.insertText('a', state.doc.content.size - 1));
        await editor.settled();
        const older = await dumpDocument(client, docId);
        const other = rawSocket(server.url, docId, 'quinn');
        const joined = await ask<{ epoch: string }>(other, 'join', {});
        // "b" lands, but neither its broadcast nor its acknowledgement reaches the editor.
        proxy.state.hold = true;
        const next = editor.state!;
        editor.dispatch(next.tr.insertText('b', next.doc.content.size - 1));
        for (let i = 0; (await served()).version !== 2; i++) {
          assert.ok(i < 500, '"b" to land');
          await delay(10);
        }
        proxy.state.refuse = true;
        proxy.drop();
        // Redis goes back to "a"; the other editor's batch finds it: a new epoch from memory.
        await restoreDocument(client, docId, older);
        const refused = await ask<{ ok: boolean }>(other, 'steps', {
          version: 2,
          steps: [insert(1, 'Q')],
        });
        assert.equal(refused.ok, false);
        for (let i = 0; (await client.hGet(keys.meta, 'epoch')) === joined.epoch; i++) {
          assert.ok(i < 500, 'a new epoch');
          await delay(10);
        }
        other.close();
        proxy.state.hold = false;
        proxy.state.refuse = false;
        await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'back', 15_000);
        assert.equal(text((await served()).doc), 'ab', '"b" once');
        assert.equal(editor.state!.doc.textContent, 'ab');
      } finally {
        editor.close();
        proxy.close();
      }
    });
  });
});

/// The rooms of one process with leases on `store`, and what they sent away.
function leasedRooms(store: RedisStore, ttlMs = 5000): { rooms: Rooms; evicted: string[] } {
  const evicted: string[] = [];
  const transport: RoomTransport = {
    broadcast() {},
    evict: (_docId, code) => evicted.push(code),
  };
  const rooms = new Rooms({
    store,
    schema,
    transport,
    observer: null,
    log: pino({ level: 'silent' }),
    options: { ...loadConfig({ host: '127.0.0.1', port: 0 }), schemaVersion },
    leases: { store: store.leases, holder: `node-r/${randomUUID()}`, ttlMs },
  });
  return { rooms, evicted };
}

function send(room: Room, clientID: string, text: string): Promise<StepsAnswer> {
  return new Promise((resolve) =>
    room.receive(room.current().version, [insert(1, text)], clientID, resolve, performance.now()),
  );
}

/// A document of a process with leases (renewed every `ttlMs` / 3) whose Redis went back to
/// before its acknowledged "b" ("a" is version 1, "b" version 2); `lease` then does what
/// became of the lease key. Runs `check`, then cleans up.
async function afterRegression(
  ttlMs: number,
  lease: (client: RedisClient, key: string) => Promise<unknown>,
  check: (at: { room: Room; epoch: string; store: RedisStore; evicted: string[] }) => Promise<void>,
): Promise<void> {
  const client = redis();
  await client.connect();
  const store = new RedisStore({ url: redisUrl, keyPrefix });
  await store.ready();
  const { rooms, evicted } = leasedRooms(store, ttlMs);
  const docId = `regress-lease-${randomUUID()}`;
  try {
    const room = (await rooms.get(docId, true))!;
    const epoch = room.epoch;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    const older = await dumpDocument(client, docId);
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
    await restoreDocument(client, docId, older);
    await lease(client, docKeys(keyPrefix, docId).lease);
    await check({ room, epoch, store, evicted });
  } finally {
    rooms.closeAll();
    await store.close();
    await client.close();
  }
}

describe('a Redis that goes back to an older state, with leases', () => {
  it('repairs it even when the lease went back with the steps, keeping the ledger of who landed what', async () => {
    // The lease key is gone with the acknowledged "b"; the next batch finds it.
    await afterRegression(
      5000,
      (client, key) => client.del(key),
      async ({ room, epoch, store, evicted }) => {
        const refused = await send(room, 'p', 'c');
        assert.equal(!refused.ok && refused.code, 'stale');
        await waitFor(() => evicted.length > 0, 'the editors sent away');
        assert.deepEqual(evicted, ['stale']);
        const stored = await store.load(room.docId);
        assert.ok(stored);
        assert.notEqual(stored.epoch, epoch);
        assert.equal(stored.version, 2);
        assert.equal(schema.nodeFromJSON(stored.snapshot!.doc).textContent, 'ba');
        // The new epoch goes on with the old numbering: the ledger of who landed what stays.
        assert.deepEqual(stored.snapshot!.clients, { p: 2 });
      },
    );
  });

  it('leaves the document to a new holder of the lease: what it acknowledged must not be overwritten', async () => {
    // Another process holds the lease now (it may have acknowledged steps on the older copy).
    await afterRegression(
      5000,
      (client, key) => client.set(key, 'node-other/1#99', { PX: 5000 }),
      async ({ room, epoch, store, evicted }) => {
        const refused = await send(room, 'p', 'c');
        assert.equal(!refused.ok && refused.code, 'stale');
        await waitFor(() => evicted.length > 0, 'the editors sent away');
        const stored = await store.load(room.docId);
        assert.equal(stored?.epoch, epoch);
        assert.equal(stored?.version, 1);
      },
    );
  });

  it('repairs it when a snapshot is the first to find it, the lease still held', async () => {
    // The lease key survived in the older state: renewals answer `held`, and nobody types.
    // Before, only a log line said so, and an unload or a hand-over dropped "b" for good.
    await afterRegression(
      5000,
      async () => undefined,
      async ({ room, epoch, store, evicted }) => {
        assert.equal(await room.snapshot(), false);
        await waitFor(() => evicted.length > 0, 'the editors sent away');
        assert.deepEqual(evicted, ['stale']);
        const stored = await store.load(room.docId);
        assert.ok(stored?.snapshot);
        assert.notEqual(stored.epoch, epoch);
        assert.equal(stored.version, 2);
        assert.equal(schema.nodeFromJSON(stored.snapshot.doc).textContent, 'ba');
      },
    );
  });

  it('repairs it when the lease lapsed while the snapshot conflict waited for a readable store', async () => {
    // The room stops renewing once a snapshot finds the store behind (it is closed while it asks
    // where the store stands). A store that cannot be read for longer than the lease lets the
    // lease lapse; the repair then goes ahead only while nobody else holds the document.
    await afterRegression(
      1500,
      async () => undefined,
      async ({ room, epoch, store, evicted }) => {
        const client = redis();
        await client.connect();
        try {
          const keys = docKeys(keyPrefix, room.docId);
          const journal = await client
            .withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer })
            .dump(keys.journal);
          // A journal of the wrong type: the snapshot still finds the conflict (it stops at the
          // meta hash), but every load fails until the journal is put back.
          await client.del(keys.journal);
          await client.set(keys.journal, 'not a list');
          assert.equal(await room.snapshot(), false);
          await waitFor(() => evicted.length > 0, 'the editors sent away', 5000);
          assert.deepEqual(evicted, ['unavailable']);
          const lapsedBy = Date.now() + 5000;
          while ((await client.exists(keys.lease)) === 1) {
            assert.ok(Date.now() < lapsedBy, 'the lease lapses');
            await delay(50);
          }
          await client.del(keys.journal);
          if (journal !== null) await client.restore(keys.journal, 0, journal);
          await waitFor(() => evicted.length > 1, 'the repair', 15_000);
          assert.deepEqual(evicted, ['unavailable', 'stale']);
          const stored = await store.load(room.docId);
          assert.notEqual(stored?.epoch, epoch);
          assert.equal(stored?.version, 2);
          assert.equal(schema.nodeFromJSON(stored!.snapshot!.doc).textContent, 'ba');
        } finally {
          await client.close();
        }
      },
    );
  });

  it('keeps its copy through an outage longer than the lease, and repairs a Redis that came back empty', async (t) => {
    const redisProcess = new RedisProcess();
    await redisProcess.start();
    const store = new RedisStore({
      url: redisProcess.url,
      keyPrefix,
      commandTimeoutMs: 300,
      pingIntervalMs: 200,
    });
    await store.ready();
    const { rooms, evicted } = leasedRooms(store, 1500);
    const docId = `outage-${randomUUID()}`;
    t.after(async () => {
      rooms.closeAll();
      await store.close();
      await redisProcess.kill();
    });
    const room = (await rooms.get(docId, true))!;
    const epoch = room.epoch;
    assert.deepEqual(await send(room, 'p', 'a'), { ok: true, version: 1 });
    assert.deepEqual(await send(room, 'p', 'b'), { ok: true, version: 2 });
    // Redis gone for longer than the lease; it comes back without the document (it kept
    // nothing on disk: the extreme of an older file).
    await redisProcess.kill();
    // The editors go at once (another node may serve them); the copy stays.
    await waitFor(() => evicted.length > 0, 'the editors sent away', 10_000);
    assert.deepEqual(evicted, ['moved']);
    assert.equal(room.state, 'closed');
    await delay(600);
    assert.equal(rooms.peek(docId), room, 'the copy is kept while the store cannot be read');
    await redisProcess.start();
    await waitFor(() => rooms.peek(docId) === undefined, 'the repair', 15_000);
    assert.deepEqual(evicted, ['moved', 'stale']);
    const stored = await store.load(docId);
    assert.ok(stored?.snapshot);
    assert.notEqual(stored.epoch, epoch);
    assert.equal(stored.version, 2);
    assert.equal(schema.nodeFromJSON(stored.snapshot.doc).textContent, 'ba');
  });

  it('repairs it when the lease renewal is the first to find the lease gone', async () => {
    // Renewals every 500 ms, and nobody types until the next one.
    await afterRegression(
      1500,
      (client, key) => client.del(key),
      async ({ room, epoch, store, evicted }) => {
        await waitFor(() => evicted.length > 0, 'the editors sent away', 5000);
        assert.deepEqual(evicted, ['stale']);
        const stored = await store.load(room.docId);
        assert.notEqual(stored?.epoch, epoch);
        assert.equal(stored?.version, 2);
      },
    );
  });
});
