import { RedisArchive } from './redis_archive.js';
import { docKeys, nodeKey } from './redis_keys.js';
import {
  RedisConnection,
  script,
  type RedisStoreLogger,
  type RedisTarget,
} from './redis_connection.js';
import {
  acquireScript,
  appendScript,
  claimHomeScript,
  heartbeatScript,
  loadScript,
  nodeAgeScript,
  releaseScript,
  renewScript,
  resetScript,
  snapshotScript,
} from './redis_scripts.js';
import {
  entriesAfter,
  entryEnd,
  entryOf,
  parseJournalEntry,
  parseSnapshot,
} from './journal_entry.js';
import type {
  AppendOutcome,
  AppendRequest,
  JournalEntry,
  LeaseStore,
  ResetOutcome,
  Snapshot,
  SnapshotOutcome,
  Store,
  StoredDocument,
  StoredPosition,
} from './store.js';

export type { RedisStoreLogger } from './redis_connection.js';

// What `load` and `exists` throw for a document's journal or snapshot without its meta hash.
const orphanKeys = 'redis store: journal or snapshot keys without a meta version';

/// How to reach Redis, how long to wait for it, and what an acknowledged write must have.
export interface RedisStoreOptions {
  /// `redis://host:port[/db]` of one server. Required unless `cluster` is given.
  url?: string;
  /// A Redis Cluster instead of one server: a few of its nodes (`redis://[user:pass@]host:port`,
  /// or `rediss://`), from which the client learns the others and the slots. The first node's
  /// credentials and TLS apply to every node. Each script touches one slot (a document's, or
  /// one node liveness key's), so no command ever spans two.
  cluster?: { rootNodes: { url: string }[] };
  /// A command (or the first connection) not answered within this many milliseconds is
  /// rejected with `StoreUnavailableError`. Default 2000.
  commandTimeoutMs?: number;
  /// Prepended to every key (before the `{docId}` hash tag). Default `scriptorium:`.
  keyPrefix?: string;
  /// How often the connection is checked with a PING. On one server, a connection that has not
  /// answered one for `pingIntervalMs + commandTimeoutMs` is dropped and a new one opened.
  /// Default 1000.
  pingIntervalMs?: number;
  /// How many replicas must hold each write of a document (append, snapshot, reset) and each
  /// lease change before it is reported done: `WAIT n timeout` after it. A write that fewer
  /// replicas confirm within `replicaAckTimeoutMs` rejects with `StoreUnavailableError`, so an
  /// append is never acknowledged to an editor unless a promoted replica would have it.
  /// Default 0 (Redis's usual asynchronous replication).
  minReplicasAcked?: number;
  /// How long a write waits for `minReplicasAcked` replicas. Default half of
  /// `commandTimeoutMs`.
  replicaAckTimeoutMs?: number;
  logger?: RedisStoreLogger;
}

const scripts = {
  append: script(appendScript),
  snapshot: script(snapshotScript),
  reset: script(resetScript),
  load: script(loadScript),
  acquire: script(acquireScript),
  claimHome: script(claimHomeScript),
  renew: script(renewScript),
  heartbeat: script(heartbeatScript),
  nodeAge: script(nodeAgeScript),
  release: script(releaseScript),
};

/// A version as Redis holds it: decimal digits only (no sign, exponent, fraction or spaces,
/// which `Number` would all accept).
const decimal = /^\d+$/;

/// A store on Redis: one server, or a Redis Cluster (`cluster`). Each append and each snapshot
/// is one Lua script on the document's keys, which share the document's hash slot, so the
/// compare-and-set and the fencing hold across any number of server processes, and on a
/// cluster each script runs whole on the one master of that slot. Appends issued in one
/// event-loop turn leave in one write per Redis server and so cost one round trip.
///
/// The client connects in the background as soon as the store is constructed and reconnects by
/// itself with capped backoff (`RedisConnection`). While it is not connected, calls fail at
/// once with `StoreUnavailableError` instead of queueing: a queued append could run minutes
/// later, after the server had already told the client it failed. A call that gets no answer
/// within `commandTimeoutMs` rejects with `StoreUnavailableError` too; like any timed-out
/// write, such an append may still have been applied, which the next append's compare-and-set
/// will reveal as a conflict. So may an append whose replicas did not confirm it in time
/// (`minReplicasAcked`): it is refused, never acknowledged, and a failover may or may not
/// keep it.
export class RedisStore implements Store {
  readonly kind = 'redis';
  private readonly connection: RedisConnection;
  private readonly commandTimeoutMs: number;
  private readonly keyPrefix: string;
  private readonly minReplicasAcked: number;
  private readonly replicaAckTimeoutMs: number;
  readonly archive: RedisArchive;

  constructor(options: RedisStoreOptions) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2000;
    this.keyPrefix = options.keyPrefix ?? 'scriptorium:';
    this.minReplicasAcked = options.minReplicasAcked ?? 0;
    this.replicaAckTimeoutMs =
      options.replicaAckTimeoutMs ?? Math.max(1, Math.floor(this.commandTimeoutMs / 2));
    if (!Number.isSafeInteger(this.minReplicasAcked) || this.minReplicasAcked < 0)
      throw new TypeError('redis store: minReplicasAcked must be a whole number >= 0');
    const target: RedisTarget = options.cluster
      ? { cluster: options.cluster }
      : { url: options.url ?? '' };
    if (!options.cluster && !options.url) throw new TypeError('redis store: url or cluster needed');
    if (options.cluster && options.cluster.rootNodes.length === 0)
      throw new TypeError('redis store: a cluster needs at least one root node');
    this.connection = new RedisConnection(target, {
      commandTimeoutMs: this.commandTimeoutMs,
      pingIntervalMs: options.pingIntervalMs ?? 1000,
      logger: options.logger ?? null,
    });
    this.archive = new RedisArchive(this.connection, this.keyPrefix);
  }

  /// Resolves once the client is connected (on a cluster: has learnt the slots); rejects with
  /// `StoreUnavailableError` when it is not within `timeoutMs` (default `commandTimeoutMs`).
  /// For start-up and readiness checks: the other methods do not wait for a connection.
  async ready(timeoutMs = this.commandTimeoutMs): Promise<void> {
    await this.connection.ready(timeoutMs);
  }

  /// Redis's answer when it last refused what this store's URL asks of the connection (a wrong
  /// password or user; a database number beyond the server's `databases`), or null once it
  /// takes them, or when it never refused them. Connecting again cannot mend that: a server
  /// starting with it should stop and say so.
  get urlRefused(): string | null {
    return this.connection.urlRefused;
  }

  /// Sends PING (on a cluster, to any one node). Resolves when Redis answers; rejects with
  /// `StoreUnavailableError` when it cannot be reached or does not answer within
  /// `commandTimeoutMs`. For health checks.
  async ping(): Promise<void> {
    await this.connection.command(undefined, ['PING']);
  }

  /// Whether the document exists: its meta hash does. Throws the `TypeError` `load` throws
  /// (the document is then quarantined as corrupt) for journal or snapshot keys without a
  /// meta hash, so that a look finds a damaged document as a read does, before any lease.
  async exists(docId: string): Promise<boolean> {
    const keys = docKeys(this.keyPrefix, docId);
    // One round trip: EXISTS counts a key as often as it is named, so with the meta hash named
    // three times the count is 3 or more exactly when it exists, and 1 or 2 for leftovers.
    const count = Number(
      await this.connection.command(keys.meta, [
        'EXISTS',
        keys.meta,
        keys.meta,
        keys.meta,
        keys.journal,
        keys.snapshot,
      ]),
    );
    if (count >= 3) return true;
    if (count > 0) throw new TypeError(orphanKeys);
    return false;
  }

  /// Loads a document; null when none of its keys exist. Throws a `TypeError` (the document is
  /// then quarantined as corrupt) when what is stored cannot be trusted: a meta hash without a
  /// decimal version or a non-empty epoch, journal or snapshot keys without a meta hash, an
  /// entry whose `<end>` prefix is missing or disagrees with the entry, or a snapshot of
  /// another epoch. Serving such a document would hand out a meaningless epoch ("null"), or
  /// build a new history on top of an old one's leftovers.
  async load(docId: string): Promise<StoredDocument | null> {
    const keys = docKeys(this.keyPrefix, docId);
    const reply = await this.connection.run(
      scripts.load,
      [keys.meta, keys.journal, keys.snapshot],
      [],
    );
    if (reply === '') return null;
    if (reply === 'orphan') throw new TypeError(orphanKeys);
    if (!Array.isArray(reply) || reply.length !== 4 || !Array.isArray(reply[3]))
      throw new TypeError('redis store: unexpected load reply');
    const [version, epoch, snapshotJSON, encoded] = reply as [unknown, unknown, unknown, unknown[]];
    if (typeof version !== 'string' || !decimal.test(version) || !Number.isSafeInteger(+version))
      throw new TypeError(`redis store: meta version ${JSON.stringify(version)} is not a count`);
    if (typeof epoch !== 'string' || epoch === '')
      throw new TypeError('redis store: meta hash without an epoch');
    const snapshot =
      typeof snapshotJSON === 'string' && snapshotJSON !== ''
        ? parseSnapshot(JSON.parse(snapshotJSON))
        : null;
    if (snapshot && snapshot.epoch !== epoch)
      throw new TypeError(`redis store: snapshot of epoch ${snapshot.epoch}, meta says ${epoch}`);
    const journal: JournalEntry[] = [];
    for (let i = 0; i < encoded.length; i++) {
      const text = String(encoded[i]);
      const nl = text.indexOf('\n');
      const prefix = nl < 0 ? '' : text.slice(0, nl);
      if (!decimal.test(prefix))
        throw new TypeError(`redis store: journal entry ${i} has no <end> prefix`);
      const entry = parseJournalEntry(JSON.parse(text.slice(nl + 1)));
      // The snapshot script trims by the prefix: one that lies would trim steps never covered.
      if (Number(prefix) !== entryEnd(entry))
        throw new TypeError(`redis store: journal entry ${i} says it ends at ${prefix}`);
      journal.push(entry);
    }
    return {
      epoch,
      version: Number(version),
      snapshot,
      journal: snapshot ? entriesAfter(journal, snapshot.version) : journal,
    };
  }

  async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    const keys = docKeys(this.keyPrefix, docId);
    const entry = entryOf(request);
    const end = entryEnd(entry);
    const reply = await this.connection.run(
      scripts.append,
      [keys.meta, keys.journal, keys.lease, keys.snapshot],
      [
        request.epoch,
        String(request.baseVersion),
        String(end),
        `${end}\n${JSON.stringify(entry)}`,
        request.lease ?? '',
      ],
    );
    if (!Array.isArray(reply)) throw new TypeError('redis store: unexpected append reply');
    if (reply[0] === 1) {
      await this.replicated(keys.meta);
      return { ok: true, version: Number(reply[1]) };
    }
    const epoch = reply[2] === '' || reply[2] == null ? null : String(reply[2]);
    if (reply[0] === 2) {
      return reply.length >= 3
        ? { ok: false, reason: 'lost', stored: { epoch, version: Number(reply[1]) } }
        : { ok: false, reason: 'lost' };
    }
    return { ok: false, reason: 'conflict', version: Number(reply[1]), epoch };
  }

  async snapshot(docId: string, snapshot: Snapshot, lease?: string): Promise<SnapshotOutcome> {
    const keys = docKeys(this.keyPrefix, docId);
    const reply = await this.connection.run(
      scripts.snapshot,
      [keys.meta, keys.journal, keys.snapshot, keys.lease, keys.history, keys.historyMeta],
      [snapshot.epoch, String(snapshot.version), JSON.stringify(snapshot), lease ?? ''],
    );
    if (reply === 'ok') {
      await this.replicated(keys.meta);
      return { ok: true };
    }
    if (reply === 'conflict' || reply === 'outdated' || reply === 'lost') {
      return { ok: false, reason: reply };
    }
    if (reply === 'corrupt')
      throw new TypeError('redis store: a journal entry has no <end> prefix; nothing was written');
    throw new TypeError('redis store: unexpected snapshot reply');
  }

  /// See `Store.reset`: one script, so the check and the replacement are one step.
  async reset(
    docId: string,
    snapshot: Snapshot,
    expected: StoredPosition,
    lease?: string | null,
  ): Promise<ResetOutcome> {
    const keys = docKeys(this.keyPrefix, docId);
    const reply = await this.connection.run(
      scripts.reset,
      [keys.meta, keys.journal, keys.snapshot, keys.lease],
      [
        expected.epoch ?? '',
        String(expected.version),
        snapshot.epoch,
        String(snapshot.version),
        JSON.stringify(snapshot),
        lease ?? '',
        lease === null ? '1' : '',
      ],
    );
    if (reply === 'ok') {
      await this.replicated(keys.meta);
      return { ok: true };
    }
    if (reply === 'conflict' || reply === 'lost') return { ok: false, reason: reply };
    throw new TypeError('redis store: unexpected reset reply');
  }

  /// Document leases in the same Redis (see `LeaseStore`): one script per call on the
  /// document's keys, so that the check and the change are one step for every process sharing
  /// the Redis. Node liveness keys sit in slots of their own and are read by a second call
  /// where a decision needs them (a home on another node), which only ever delays a handover.
  readonly leases: LeaseStore = {
    acquire: async (docId, holder, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      const node = nodeOf(holder);
      const reply = await this.connection.run(
        scripts.acquire,
        [keys.lease, keys.fence, keys.wanted, keys.home],
        [holder, String(ttlMs), node],
      );
      if (!Array.isArray(reply)) throw new TypeError('redis store: unexpected acquire reply');
      const token = String(reply[1]);
      if (reply[0] !== 1) {
        return {
          ok: false,
          holder: token.slice(0, token.lastIndexOf('#')),
          remainingMs: Math.max(0, Number(reply[2])),
        };
      }
      const home = String(reply[2] ?? '');
      // The home is another node: this node becomes the home when that one is alive (the
      // gateway chose this node), and only stands in for it when it is down.
      if (home !== '' && (await this.nodeAgeMs(home)) >= 0) {
        await this.connection.run(scripts.claimHome, [keys.home, keys.lease], [home, node, token]);
      }
      await this.replicated(keys.lease);
      return { ok: true, lease: { token, fence: fenceOf(token) } };
    },
    renew: async (docId, holder, lease, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      const reply = await this.connection.run(
        scripts.renew,
        [keys.lease, keys.wanted, keys.home],
        [lease.token, String(ttlMs), holder, nodeOf(holder)],
      );
      if (reply === 'lost') return reply;
      if (
        reply !== 'held' &&
        reply !== 'wanted' &&
        !(typeof reply === 'string' && reply.startsWith('home:'))
      )
        throw new TypeError('redis store: unexpected renew reply');
      await this.replicated(keys.lease);
      if (reply === 'held' || reply === 'wanted') return reply;
      // Standing in for the home node: hand the document back once that node has been back
      // long enough for the gateway to route to it again.
      const age = await this.nodeAgeMs(reply.slice('home:'.length));
      return age >= homeSettleMs(ttlMs) ? 'wanted' : 'held';
    },
    release: async (docId, lease) => {
      const keys = docKeys(this.keyPrefix, docId);
      await this.connection.run(
        scripts.release,
        [keys.lease, keys.meta, keys.journal, keys.snapshot, keys.fence, keys.home],
        [lease.token],
      );
      await this.replicated(keys.lease);
    },
    heartbeat: async (node, ttlMs) => {
      await this.connection.run(
        scripts.heartbeat,
        [nodeKey(this.keyPrefix, node)],
        [String(ttlMs)],
      );
    },
    depart: async (node) => {
      const key = nodeKey(this.keyPrefix, node);
      await this.connection.command(key, ['DEL', key]);
    },
    requestHandover: async (docId, holder, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      await this.connection.command(keys.wanted, ['SET', keys.wanted, holder, 'PX', String(ttlMs)]);
      await this.replicated(keys.wanted);
    },
  };

  /// Waits (at most `commandTimeoutMs`) for commands already sent, then disconnects. Resolves
  /// in every case: a store that is shutting down has nobody to report to.
  async close(): Promise<void> {
    await this.connection.close();
  }

  /// With `minReplicasAcked`, waits until that many replicas have this connection's writes so
  /// far, the last one to `route`'s slot included; rejects with `StoreUnavailableError` when
  /// they do not within `replicaAckTimeoutMs`. Without, resolves at once.
  private async replicated(route: string): Promise<void> {
    if (this.minReplicasAcked === 0) return;
    await this.connection.waitReplicas(route, this.minReplicasAcked, this.replicaAckTimeoutMs);
  }

  /// How long `node` has been alive since it was last down (ms), or -1 when it is down.
  private async nodeAgeMs(node: string): Promise<number> {
    return Number(await this.connection.run(scripts.nodeAge, [nodeKey(this.keyPrefix, node)], []));
  }
}

/// The fencing number at the end of a lease token (`<holder>#<fence>`).
function fenceOf(token: string): number {
  return Number(token.slice(token.lastIndexOf('#') + 1));
}

/// The node of a holder (`<node id>/<instance>`).
function nodeOf(holder: string): string {
  const slash = holder.indexOf('/');
  return slash < 0 ? holder : holder.slice(0, slash);
}

/// How long a home node must have been back before the node standing in for it hands its
/// documents back: longer than the gateway takes to route to it again (nginx retries a failed
/// server after `fail_timeout`, 10 s in the rendered config), and never shorter than two lease
/// times.
function homeSettleMs(ttlMs: number): number {
  return Math.max(2 * ttlMs, 10_000);
}
