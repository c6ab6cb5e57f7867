import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../../server/config.js';

// REDIS_CLUSTER_NODES and REDIS_MIN_REPLICAS_ACKED as an operator sets them.

describe('Redis Cluster settings', () => {
  it('reads seed nodes as host:port or URLs, and the replicas to wait for', () => {
    const config = loadConfig(
      {},
      {
        REDIS_CLUSTER_NODES: '10.0.0.1:7000, rediss://u:p%40ss@10.0.0.2:7001 ,',
        REDIS_MIN_REPLICAS_ACKED: '1',
      },
    );
    assert.deepEqual(config.redisClusterNodes, [
      'redis://10.0.0.1:7000',
      'rediss://u:p%40ss@10.0.0.2:7001',
    ]);
    assert.equal(config.redisMinReplicasAcked, 1);
    assert.equal(config.redisUrl, null);
  });

  it('refuses what cannot be meant, naming the setting', () => {
    const refused = (env: Record<string, string>, message: RegExp) =>
      assert.throws(
        () => loadConfig({}, env),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
      );
    refused(
      { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_CLUSTER_NODES: '127.0.0.1:7000' },
      /REDIS_URL contradicts REDIS_CLUSTER_NODES/,
    );
    refused({ REDIS_CLUSTER_NODES: '127.0.0.1:7000/2' }, /REDIS_CLUSTER_NODES takes no/);
    refused({ REDIS_CLUSTER_NODES: 'http://127.0.0.1:7000' }, /REDIS_CLUSTER_NODES must start/);
    // The file store has no replicas to wait for.
    refused({ REDIS_MIN_REPLICAS_ACKED: '1' }, /REDIS_MIN_REPLICAS_ACKED needs REDIS_URL/);
    refused(
      { REDIS_CLUSTER_NODES: '127.0.0.1:7000', REDIS_MIN_REPLICAS_ACKED: '17' },
      /REDIS_MIN_REPLICAS_ACKED must be a whole number from 0 to 16/,
    );
    refused({ REDIS_CLUSTER_NODES: '127.0.0.1:7000', STORE: 'memory' }, /STORE=memory/);
  });
});
