import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { createClient } from 'redis';
import { RedisStore } from '../../../server/stores/redis_store.js';
import { StoreUnavailableError } from '../../../server/stores/store.js';
import { RedisProcess, freePort } from '../../support/redis_process.js';
import {
  appendOf,
  deleteRedisKeys,
  redisForTests,
  snapshotOf,
  typingHistory,
} from '../../support/store_fixtures.js';
import { docKeys } from '../../../server/stores/redis_keys.js';
import { TcpProxy } from '../../support/tcp_proxy.js';

const { redisUrl, redisPort, keyPrefix } = redisForTests();
const history = typingHistory(60);
const epoch = 'epoch-1';

after(() => deleteRedisKeys(redisUrl, keyPrefix));

/// Resolves with how long `promise` took to reject, after checking it rejected with
/// `StoreUnavailableError`.
async function rejectsUnavailable(promise: Promise<unknown>): Promise<number> {
  const start = performance.now();
  await assert.rejects(promise, StoreUnavailableError);
  return performance.now() - start;
}

describe('RedisStore', () => {
  it('builds hash-tagged keys and journals entries prefixed by their end version', async () => {
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    await store.ready();
    await store.append('a:b.c', appendOf(history, epoch, 0, 3));
    const client = createClient({ url: redisUrl });
    await client.connect();
    assert.deepEqual(await client.hGetAll(`${keyPrefix}{a:b.c}:meta`), {
      version: '3',
      epoch,
    });
    const [entry] = await client.lRange(`${keyPrefix}{a:b.c}:journal`, 0, -1);
    assert.ok(entry?.startsWith('3\n{'));
    await client.close();
    await store.close();
  });

  it('refuses at once, with StoreUnavailableError, when nothing listens', async () => {
    const store = new RedisStore({ url: 'redis://127.0.0.1:1', commandTimeoutMs: 500 });
    // Bounded well below the command timeout: a disconnected client does not queue.
    assert.ok((await rejectsUnavailable(store.append('d', appendOf(history, epoch, 0, 1)))) < 250);
    assert.ok((await rejectsUnavailable(store.load('d'))) < 250);
    assert.ok((await rejectsUnavailable(store.exists('d'))) < 250);
    assert.ok((await rejectsUnavailable(store.ping())) < 250);
    assert.ok((await rejectsUnavailable(store.ready(300))) < 1000);
    await store.close();
  });

  it('rejects with StoreUnavailableError when Redis stops answering', async (t) => {
    const proxy = new TcpProxy(redisPort);
    await proxy.start();
    const store = new RedisStore({
      url: `redis://127.0.0.1:${proxy.port}`,
      commandTimeoutMs: 300,
      keyPrefix,
    });
    t.after(async () => {
      await store.close();
      await proxy.stop();
    });
    await store.ready();
    const docId = `hang-${randomUUID()}`;
    assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 1)), {
      ok: true,
      version: 1,
    });
    proxy.paused = true;
    const elapsed = await rejectsUnavailable(store.append(docId, appendOf(history, epoch, 1, 2)));
    assert.ok(elapsed >= 250 && elapsed < 1500, `rejected after ${elapsed} ms`);
  });

  it('reconnects by itself when Redis comes back', async (t) => {
    const redis = new RedisProcess(await freePort());
    await redis.start();
    const store = new RedisStore({ url: redis.url, commandTimeoutMs: 500 });
    t.after(async () => {
      await store.close();
      await redis.kill();
    });
    await store.ready();
    assert.deepEqual(await store.append('before', appendOf(history, epoch, 0, 2)), {
      ok: true,
      version: 2,
    });
    await redis.kill();
    assert.ok(
      (await rejectsUnavailable(store.append('before', appendOf(history, epoch, 2, 3)))) < 1000,
    );
    await redis.start();
    await store.ready(5000);
    // A fresh Redis (no persistence): the document is gone and the scripts are not cached,
    // so this also goes through the EVALSHA → EVAL fallback.
    assert.equal(await store.load('before'), null);
    assert.deepEqual(await store.append('after', appendOf(history, epoch, 0, 1)), {
      ok: true,
      version: 1,
    });
  });

  it('sends the appends of one turn, for many documents, together', async (t) => {
    const proxy = new TcpProxy(redisPort);
    await proxy.start();
    const store = new RedisStore({ url: `redis://127.0.0.1:${proxy.port}`, keyPrefix });
    t.after(async () => {
      await store.close();
      await proxy.stop();
    });
    await store.ready();
    const docIds = Array.from({ length: 50 }, (_, i) => `group-${i}-${randomUUID()}`);
    // Load the scripts first, so that no NOSCRIPT round trip blurs the count.
    await store.append(`warm-${randomUUID()}`, appendOf(history, epoch, 0, 1));

    let chunks = proxy.chunksFromClients;
    let bytes = proxy.bytesFromClients;
    const outcomes = await Promise.all(
      docIds.map((docId) => store.append(docId, appendOf(history, epoch, 0, 2))),
    );
    assert.ok(outcomes.every((outcome) => outcome.ok));
    const grouped = proxy.chunksFromClients - chunks;
    const groupedBytes = proxy.bytesFromClients - bytes;

    chunks = proxy.chunksFromClients;
    for (const docId of docIds) await store.append(docId, appendOf(history, epoch, 2, 3));
    const sequential = proxy.chunksFromClients - chunks;

    // node-redis writes everything queued in one turn in one corked write, pausing only when
    // the socket buffer passes 16 KB and resuming on 'drain' (not on replies): one write per
    // 16 KB, not one per append.
    const limit = Math.ceil(groupedBytes / 16384) + 1;
    assert.ok(grouped <= limit, `${grouped} chunks for ${groupedBytes} bytes`);
    assert.equal(sequential, 50);
  });
  it('says whether a document exists exactly when load would not answer null', async (t) => {
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    t.after(() => store.close());
    await store.ready();
    const docId = `exists-${randomUUID()}`;
    assert.equal(await store.exists(docId), false);
    assert.equal(await store.load(docId), null);
    await store.append(docId, appendOf(history, epoch, 0, 2));
    assert.equal(await store.exists(docId), true);
    assert.notEqual(await store.load(docId), null);
  });

  it('never creates a document over keys its meta hash left behind', async (t) => {
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    const client = createClient({ url: redisUrl });
    await client.connect();
    t.after(async () => {
      await client.close();
      await store.close();
    });
    await store.ready();
    for (const leftover of ['journal', 'snapshot'] as const) {
      const docId = `orphan-${leftover}-${randomUUID()}`;
      const keys = docKeys(keyPrefix, docId);
      if (leftover === 'journal') {
        await client.rPush(keys.journal, `2\n${JSON.stringify(appendOf(history, 'old', 0, 2))}`);
      } else {
        await client.set(keys.snapshot, JSON.stringify(snapshotOf(history, 'old', 2)));
      }
      // Extending the leftovers would make a history the next load refuses, acknowledged
      // steps and all: the first append and the first snapshot are refused instead.
      assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 1)), {
        ok: false,
        reason: 'conflict',
        version: 0,
        epoch: null,
      });
      assert.deepEqual(await store.snapshot(docId, snapshotOf(history, epoch, 0)), {
        ok: false,
        reason: 'conflict',
      });
      assert.equal(await client.exists(keys.meta), 0);
      assert.equal(await client.lLen(keys.journal), leftover === 'journal' ? 1 : 0);
      await assert.rejects(store.load(docId), TypeError);
      // Damaged for a look too, which quarantines it before any lease as a read did.
      await assert.rejects(store.exists(docId), TypeError);
    }
  });

  it('writes nothing of a snapshot whose trim meets an entry without its <end> prefix', async (t) => {
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    const client = createClient({ url: redisUrl });
    await client.connect();
    t.after(async () => {
      await client.close();
      await store.close();
    });
    await store.ready();
    const docId = `unprefixed-${randomUUID()}`;
    const keys = docKeys(keyPrefix, docId);
    await client.hSet(keys.meta, { version: '2', epoch });
    await client.rPush(keys.journal, [
      JSON.stringify(appendOf(history, epoch, 0, 1)),
      `2\n${JSON.stringify(appendOf(history, epoch, 1, 2))}`,
    ]);
    await assert.rejects(store.snapshot(docId, snapshotOf(history, epoch, 2)), TypeError);
    // Redis keeps what a script wrote before it failed: the checks come first.
    assert.equal(await client.exists(keys.snapshot), 0);
    assert.equal(await client.hGet(keys.meta, 'snapshotVersion'), null);
    assert.equal(await client.lLen(keys.journal), 2);
    await assert.rejects(store.load(docId), /no <end> prefix/);
  });

  it('calls a Redis that refuses a command (ACL, a failed save) unavailable, not the document damaged', async (t) => {
    // A private Redis whose user may not run scripts: every store call is refused NOPERM, as
    // every write is refused MISCONF once a save failed. Neither says anything of the
    // document, which a load failing otherwise would quarantine as corrupt.
    const redis = new RedisProcess();
    await redis.start();
    const admin = createClient({ url: redis.url });
    await admin.connect();
    const store = new RedisStore({
      url: `redis://limited:a-password@127.0.0.1:${redis.port}`,
      keyPrefix,
    });
    t.after(async () => {
      await store.close();
      await admin.close();
      await redis.kill();
    });
    await admin.sendCommand([
      'ACL',
      'SETUSER',
      'limited',
      'on',
      '>a-password',
      '~*',
      '+@all',
      '-@scripting',
    ]);
    await store.ready();
    await assert.rejects(store.load('refused'), StoreUnavailableError);
    await assert.rejects(
      store.append('refused', appendOf(history, epoch, 0, 1)),
      StoreUnavailableError,
    );
  });
});
