import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { RedisStore } from '../../../server/stores/redis_store.js';
import { StoreUnavailableError } from '../../../server/stores/store.js';
import {
  appendOf,
  deleteRedisKeys,
  redisForTests,
  typingHistory,
} from '../../support/store_fixtures.js';
import { TcpProxy } from '../../support/tcp_proxy.js';
import { delay, waitFor } from '../../support/wait.js';

const { redisUrl, redisPort, keyPrefix } = redisForTests();
const history = typingHistory(20);
const epoch = 'epoch-1';

after(() => deleteRedisKeys(redisUrl, keyPrefix));

describe('RedisStore liveness', () => {
  it('replaces a connection that died silently: calls fail with unavailable in bounded time, then work again', async (t) => {
    const proxy = new TcpProxy(redisPort);
    await proxy.start();
    const log: { at: number; msg: string }[] = [];
    const record = (_: object, msg: string) => log.push({ at: performance.now(), msg });
    const pingIntervalMs = 100;
    const commandTimeoutMs = 300;
    const store = new RedisStore({
      url: `redis://127.0.0.1:${proxy.port}`,
      commandTimeoutMs,
      pingIntervalMs,
      keyPrefix,
      logger: { warn: record, info: record },
    });
    const docId = `cut-${randomUUID()}`;
    t.after(async () => {
      await store.close();
      await proxy.stop();
    });
    await store.ready();
    assert.deepEqual(await store.append(docId, appendOf(history, epoch, 0, 1)), {
      ok: true,
      version: 1,
    });
    // The Redis host vanishes: writes still succeed locally, nothing ever answers, and no
    // error reaches the client.
    const cutAt = performance.now();
    proxy.cut();
    for (let i = 0; i < 3; i++) {
      const start = performance.now();
      await assert.rejects(
        store.append(docId, appendOf(history, epoch, 1, 2)),
        StoreUnavailableError,
      );
      assert.ok(performance.now() - start < commandTimeoutMs + 200);
    }
    await waitFor(() => log.some((line) => /no answer/.test(line.msg)), 'the dead connection');
    const noticedMs = log.find((line) => /no answer/.test(line.msg))!.at - cutAt;
    // Silent for a ping interval plus a command timeout, seen within one more interval.
    assert.ok(
      noticedMs < 2 * pingIntervalMs + commandTimeoutMs + 200,
      `noticed after ${noticedMs} ms`,
    );

    // Redis is reachable again (a restart, a failover to the same address). The old
    // connection stays dead, as a real one would: only a new one can succeed.
    await delay(500);
    const healedAt = performance.now();
    proxy.heal();
    let outcome = null;
    while (outcome === null) {
      try {
        outcome = await store.append(docId, appendOf(history, epoch, 1, 2));
      } catch (error) {
        assert.ok(error instanceof StoreUnavailableError);
        assert.ok(performance.now() - healedAt < 5000, 'recovered within 5 s');
        await delay(20);
      }
    }
    // The appends sent to the dead connection never reached Redis.
    assert.deepEqual(outcome, { ok: true, version: 2 });
    assert.ok(log.some((line) => /connected again/.test(line.msg)));
    assert.equal(log.filter((line) => /no answer|connection lost/.test(line.msg)).length, 1);
  });

  it('keeps an idle, healthy connection: PINGs answered, no reconnection', async (t) => {
    const warnings: string[] = [];
    const store = new RedisStore({
      url: redisUrl,
      commandTimeoutMs: 100,
      pingIntervalMs: 50,
      keyPrefix,
      logger: { warn: (_, msg) => warnings.push(msg), info: () => {} },
    });
    t.after(() => store.close());
    await store.ready();
    await delay(1000);
    assert.deepEqual(warnings, []);
    assert.equal(await store.load(`idle-${randomUUID()}`), null);
  });
});
