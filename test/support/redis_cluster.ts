import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createServer } from 'node:net';

const run = promisify(execFile);

/// One redis-server of a test cluster.
export interface ClusterNode {
  port: number;
  child: ChildProcess | null;
}

/// Options of a throwaway cluster.
export interface RedisClusterOptions {
  /// Masters; each gets one replica. Default 3 (six processes).
  masters?: number;
  /// `cluster-node-timeout`: how long a master may be silent before its replica takes over.
  /// Default 1000.
  nodeTimeoutMs?: number;
}

/// A throwaway Redis Cluster for tests: `masters` masters and as many replicas, each a
/// `redis-server --cluster-enabled yes` on a free port with its files in a temp dir, joined by
/// `redis-cli --cluster create … --cluster-replicas 1`. Nothing is persisted (no AOF, no RDB):
/// what survives a killed master is what its replica had, which is what the failover tests
/// are about. `stop()` kills every process and removes the dir.
export class RedisCluster {
  readonly nodes: ClusterNode[] = [];
  private dir = '';
  private readonly masterCount: number;
  private readonly nodeTimeoutMs: number;

  constructor(options: RedisClusterOptions = {}) {
    this.masterCount = options.masters ?? 3;
    this.nodeTimeoutMs = options.nodeTimeoutMs ?? 1000;
  }

  /// `host:port` of every node: the seed list a store is given.
  get rootNodes(): { url: string }[] {
    return this.nodes.map((node) => ({ url: `redis://127.0.0.1:${node.port}` }));
  }

  /// Starts the processes, creates the cluster and resolves once every node reports
  /// `cluster_state:ok` and every master has its replica.
  async start(): Promise<void> {
    const count = this.masterCount * 2;
    const base = await clusterPorts(count);
    this.dir = await mkdtemp(join(tmpdir(), 'scriptorium-cluster-'));
    for (let i = 0; i < count; i++) {
      const node: ClusterNode = { port: base + i, child: null };
      this.nodes.push(node);
    }
    await Promise.all(this.nodes.map((node) => this.spawn(node)));
    await run('redis-cli', [
      '--cluster',
      'create',
      ...this.nodes.map((node) => `127.0.0.1:${node.port}`),
      '--cluster-replicas',
      '1',
      '--cluster-yes',
    ]);
    await this.waitHealthy();
  }

  /// Runs `redis-cli -p <port> <args…>` and returns its output, trimmed.
  async cli(port: number, ...args: string[]): Promise<string> {
    const { stdout } = await run('redis-cli', ['-p', String(port), ...args]);
    return stdout.trim();
  }

  /// The port of the master now serving `key`'s slot, as the cluster itself says.
  async masterOf(key: string): Promise<number> {
    const alive = this.nodes.find((node) => node.child !== null)!;
    const slot = Number(await this.cli(alive.port, 'CLUSTER', 'KEYSLOT', key));
    const shards = await this.cli(alive.port, 'CLUSTER', 'NODES');
    for (const line of shards.split('\n')) {
      const fields = line.split(' ');
      if (!fields[2]!.includes('master') || fields[2]!.includes('fail')) continue;
      for (const range of fields.slice(8)) {
        if (range.startsWith('[')) continue;
        const [from, to] = range.split('-').map(Number) as [number, number?];
        if (slot >= from && slot <= (to ?? from)) return portOf(fields[1]!);
      }
    }
    throw new Error(`no master serves slot ${slot}`);
  }

  /// Starts one more node and joins it to the cluster as a replica of the master on
  /// `masterPort` (`redis-cli --cluster add-node … --cluster-slave`): a master with two
  /// replicas still has one after a failover, which `WAIT 1` needs to go on acknowledging.
  async addReplica(masterPort: number): Promise<number> {
    const port = await clusterPorts(1);
    const node: ClusterNode = { port, child: null };
    this.nodes.push(node);
    await this.spawn(node);
    const masterId = await this.cli(masterPort, 'CLUSTER', 'MYID');
    await run('redis-cli', [
      '--cluster',
      'add-node',
      `127.0.0.1:${port}`,
      `127.0.0.1:${masterPort}`,
      '--cluster-slave',
      '--cluster-master-id',
      masterId,
    ]);
    await this.waitHealthy();
    return port;
  }

  /// The ports of the live masters that serve slots.
  async masters(): Promise<number[]> {
    const alive = this.nodes.find((node) => node.child !== null)!;
    const ports: number[] = [];
    for (const line of (await this.cli(alive.port, 'CLUSTER', 'NODES')).split('\n')) {
      const fields = line.split(' ');
      if (fields[2]!.includes('master') && !fields[2]!.includes('fail') && fields.length > 8)
        ports.push(portOf(fields[1]!));
    }
    return ports;
  }

  /// Moves the slot of `key` from the master on `source` to the one on `target`, as
  /// `redis-cli --cluster reshard` does for each slot: IMPORTING on the target, MIGRATING on
  /// the source, MIGRATE of its keys (all at once: a document's keys move together), then the
  /// slot given to the target on every master. Clients meanwhile get ASK (keys already
  /// moved), TRYAGAIN (a script whose keys are split) and then MOVED.
  async migrateSlotOf(key: string, source: number, target: number): Promise<void> {
    const slot = await this.cli(source, 'CLUSTER', 'KEYSLOT', key);
    const sourceId = await this.cli(source, 'CLUSTER', 'MYID');
    const targetId = await this.cli(target, 'CLUSTER', 'MYID');
    await this.cli(target, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceId);
    await this.cli(source, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
    for (;;) {
      const keys = (await this.cli(source, 'CLUSTER', 'GETKEYSINSLOT', slot, '1000'))
        .split('\n')
        .filter((k) => k !== '');
      if (keys.length === 0) break;
      await this.cli(
        source,
        'MIGRATE',
        '127.0.0.1',
        String(target),
        '',
        '0',
        '5000',
        'KEYS',
        ...keys,
      );
    }
    await this.cli(target, 'CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
    await this.cli(source, 'CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
    for (const port of await this.masters())
      if (port !== source && port !== target)
        await this.cli(port, 'CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
  }

  /// SIGKILLs the node on `port` (a crash: no goodbye to the cluster).
  async kill(port: number): Promise<void> {
    const node = this.nodes.find((n) => n.port === port);
    const child = node?.child;
    if (!node || !child) return;
    node.child = null;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }

  /// Resolves once every live node reports `cluster_state:ok` and every live replica has
  /// finished its first sync with its master (`master_link_status:up`); rejects after
  /// `timeoutMs`.
  async waitHealthy(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let ok = true;
      for (const node of this.nodes) {
        if (node.child === null) continue;
        const info = await this.cli(node.port, 'CLUSTER', 'INFO').catch(() => '');
        if (!info.includes('cluster_state:ok')) ok = false;
        const replication = await this.cli(node.port, 'INFO', 'replication').catch(() => '');
        if (replication.includes('role:slave') && !replication.includes('master_link_status:up'))
          ok = false;
      }
      if (ok) return;
      if (Date.now() > deadline) throw new Error('the cluster did not become healthy');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /// Kills every process and removes the temp dir.
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((node) => this.kill(node.port)));
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }

  private async spawn(node: ClusterNode): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(node.port),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(this.dir, `nodes-${node.port}.conf`),
        '--cluster-node-timeout',
        String(this.nodeTimeoutMs),
        '--dir',
        this.dir,
        '--save',
        '',
        '--appendonly',
        'no',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    node.child = child;
    await new Promise<void>((resolve, reject) => {
      let output = '';
      const onData = (chunk: Buffer): void => {
        output += chunk.toString();
        if (output.includes('Ready to accept connections')) resolve();
      };
      child.stdout!.on('data', onData);
      child.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${output}`)));
    });
    child.stdout!.resume();
  }
}

/// The port of a `CLUSTER NODES` address (`ip:port@busport[,hostname]`).
function portOf(address: string): number {
  return Number(address.split('@')[0]!.split(':').pop());
}

/// The first of `count` consecutive free ports whose bus ports (port + 10000, which every
/// cluster node also listens on) are free too, both below Linux's ephemeral range.
async function clusterPorts(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 10_000 + Math.floor(Math.random() * (10_000 - count));
    const servers = [];
    try {
      for (let i = 0; i < count; i++) {
        for (const port of [base + i, base + i + 10_000]) {
          const server = createServer();
          servers.push(server);
          server.listen(port, '127.0.0.1');
          await once(server, 'listening');
        }
      }
      return base;
    } catch {
      // One of them is taken: another range.
    } finally {
      for (const server of servers) server.close();
      await Promise.all(servers.map((server) => once(server, 'close').catch(() => {})));
    }
  }
  throw new Error(`no ${count} free cluster ports`);
}
