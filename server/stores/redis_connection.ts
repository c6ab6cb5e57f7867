import { createHash } from 'node:crypto';
import { createClient, createCluster, ErrorReply } from 'redis';
import { StoreUnavailableError } from './store.js';

/// The few logger methods the Redis store uses; a pino logger fits.
export interface RedisStoreLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/// Where Redis is: one server (`url`) or a Redis Cluster (`cluster.rootNodes`, a few of its
/// nodes, from which the client learns the rest and which slot each serves).
export interface RedisTarget {
  url?: string;
  cluster?: { rootNodes: { url: string }[] };
}

/// How long to wait for Redis and how to watch the connection.
export interface RedisConnectionOptions {
  commandTimeoutMs: number;
  pingIntervalMs: number;
  logger: RedisStoreLogger | null;
}

/// A Lua script and its SHA1 (for EVALSHA).
export interface Script {
  source: string;
  sha1: string;
}

/// Builds a `Script` from its source.
export function script(source: string): Script {
  return { source, sha1: createHash('sha1').update(source).digest('hex') };
}

/// The longest pause between two reconnection attempts. Short enough that a Redis restart costs
/// seconds, not minutes; long enough not to hammer a Redis that is down.
const maxReconnectDelayMs = 2000;

/// How long after a cluster node's connection starts failing the client asks the cluster for
/// its slots again: a killed master's replica is promoted after `cluster-node-timeout` plus an
/// election, and until the client learns of it every command for those slots fails.
const clusterRefreshMs = 500;

/// How often, and how far apart, a command answered TRYAGAIN is sent again.
const tryAgainLimit = 20;
const tryAgainDelayMs = 25;

// Redis refusing the credentials of the connection itself (the URL's user or password).
const credentialReplies = /^(WRONGPASS|NOAUTH|NOPERM)/;

// Redis refusing what the URL asks of the connection: its credentials, or its database number
// (`ERR DB index is out of range`, from the SELECT of the handshake). Neither is mended by
// connecting again.
const urlReplies = new RegExp(`${credentialReplies.source}|^ERR DB index`);

// Redis answers that mean "not now" or "not allowed" rather than "your script is wrong": out of
// memory under noeviction, a replica or a loading server after failover, a script still
// running, writes stopped after a failed save (MISCONF: a full disk), a slot being migrated or
// a cluster missing a master, and the credentials or ACL refusing a command. None says
// anything about the document, which must not be quarantined as damaged for them: the store
// is unavailable until the operator or Redis mends it.
const unavailableReplies = new RegExp(
  `^(OOM|READONLY|LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|MISCONF|MOVED|ASK)|${credentialReplies.source}`,
);

type SingleClient = ReturnType<typeof createClient>;
type ClusterClient = ReturnType<typeof createCluster>;

/// The connection of a `RedisStore`: one node-redis client (or cluster client) that connects in
/// the background, reconnects by itself, and fails calls at once while it is not connected
/// rather than queueing them. Every call is bounded by `commandTimeoutMs` and rejects with
/// `StoreUnavailableError` when Redis cannot be reached, does not answer in time, or answers
/// "not now" (`unavailableReplies`); other error replies (a bug) are rethrown as they are.
///
/// On one server, a connection that has not answered (a PING or anything else) for
/// `pingIntervalMs + commandTimeoutMs` is dropped and a new one opened: node-redis alone does
/// not notice a connection that died silently (a host that lost power, a NAT that forgot the
/// flow), as its PING has no reply timeout. On a cluster, node-redis keeps one connection per
/// node, follows MOVED and ASK, and asks for the slots again once a node's connection fails
/// (`clusterRefreshMs`), which is how a promoted replica is found.
export class RedisConnection {
  readonly isCluster: boolean;
  private client: SingleClient | ClusterClient;
  private readonly target: RedisTarget;
  private readonly options: RedisConnectionOptions;
  /// False from the first connection error until the next 'ready': logs once per outage.
  private healthy = true;
  private refusal: string | null = null;
  private closed = false;
  private connected = false;
  private lastAnswerAt: number;
  private lastCheckAt: number;
  private readonly watchdog: NodeJS.Timeout;
  private readonly readyWaiters = new Set<() => void>();

  constructor(target: RedisTarget, options: RedisConnectionOptions) {
    if (!target.url && !target.cluster) throw new TypeError('redis store: no url and no cluster');
    this.target = target;
    this.isCluster = target.cluster !== undefined;
    this.options = options;
    this.lastAnswerAt = performance.now();
    this.lastCheckAt = this.lastAnswerAt;
    this.client = this.isCluster ? this.connectCluster(0) : this.connectSingle();
    this.watchdog = setInterval(() => this.checkAlive(), options.pingIntervalMs);
    // The store must not keep a process alive that has nothing else to do.
    this.watchdog.unref();
  }

  /// Whether the client is connected now (on a cluster: has learnt the slots).
  get isReady(): boolean {
    return this.connected && (this.isCluster || (this.client as SingleClient).isReady);
  }

  /// Redis's answer when it last refused the connection's credentials or database number, or
  /// null once it takes them, or when it never refused them.
  get urlRefused(): string | null {
    return this.refusal;
  }

  /// Resolves once connected; rejects with `StoreUnavailableError` when not within `timeoutMs`.
  async ready(timeoutMs: number): Promise<void> {
    if (this.isReady) return;
    let onReady!: () => void;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        onReady = resolve;
        // Ours rather than the client's 'ready' event: the client may be replaced meanwhile.
        this.readyWaiters.add(onReady);
        timer = setTimeout(
          () => reject(new StoreUnavailableError(`redis not connected after ${timeoutMs} ms`)),
          timeoutMs,
        );
      });
    } finally {
      clearTimeout(timer);
      this.readyWaiters.delete(onReady);
    }
  }

  /// Runs a script with EVALSHA, falling back to EVAL when Redis does not know it (after a
  /// restart, a SCRIPT FLUSH, or on a node that never ran it). On a cluster it goes to the
  /// master of `keys[0]`'s slot: every script's keys share one slot. One timer covers both
  /// attempts.
  run(s: Script, keys: string[], args: string[]): Promise<unknown> {
    const tail = [String(keys.length), ...keys, ...args];
    const route = keys[0];
    return this.bounded(
      this.send(route, ['EVALSHA', s.sha1, ...tail]).catch((error: unknown) => {
        if (error instanceof ErrorReply && error.message.startsWith('NOSCRIPT'))
          return this.send(route, ['EVAL', s.source, ...tail]);
        throw error;
      }),
    );
  }

  /// Sends one command, on a cluster to the master of `route`'s slot (any node without one).
  command(route: string | undefined, args: string[]): Promise<unknown> {
    return this.bounded(this.send(route, args));
  }

  /// `WAIT replicas timeoutMs` on the connection that wrote `route`'s last change: resolves
  /// once that many replicas have every write this connection made before it; rejects with
  /// `StoreUnavailableError` when fewer acknowledged them in time. Redis blocks the connection
  /// meanwhile, so writes issued together share one wait.
  async waitReplicas(route: string, replicas: number, timeoutMs: number): Promise<void> {
    const acked = Number(
      await this.bounded(
        this.send(route, ['WAIT', String(replicas), String(timeoutMs)]),
        timeoutMs,
      ),
    );
    if (acked < replicas)
      throw new StoreUnavailableError(
        `redis: ${acked} of ${replicas} replicas acknowledged the write within ${timeoutMs} ms`,
      );
  }

  /// Waits (at most `commandTimeoutMs`) for commands already sent, then disconnects.
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watchdog);
    const client = this.client;
    if (!this.isReady) {
      client.destroy();
      return;
    }
    try {
      await this.bounded(client.close());
    } catch {
      client.destroy();
    }
  }

  private send(route: string | undefined, args: string[], attempt = 0): Promise<unknown> {
    const client = this.client;
    const sent = this.isCluster
      ? (client as ClusterClient).sendCommand(route, false, args)
      : (client as SingleClient).sendCommand(args);
    return sent.then(this.alive, (error: unknown) => {
      // A slot being migrated, with some of the script's keys moved and some not: Redis asks
      // to try again, which takes as long as one MIGRATE of the document's few keys. The
      // caller's timer still bounds the whole.
      if (
        error instanceof ErrorReply &&
        error.message.startsWith('TRYAGAIN') &&
        attempt < tryAgainLimit &&
        !this.closed
      ) {
        return new Promise<unknown>((resolve) => setTimeout(resolve, tryAgainDelayMs)).then(() =>
          this.send(route, args, attempt + 1),
        );
      }
      throw error;
    });
  }

  /// Creates a single-server client and starts connecting it in the background. Its events
  /// count only while it is the current client: a replaced one may still report its death.
  private connectSingle(): SingleClient {
    const client: SingleClient = createClient({
      url: this.target.url!,
      disableOfflineQueue: true,
      pingInterval: this.options.pingIntervalMs,
      socket: {
        connectTimeout: this.options.commandTimeoutMs,
        // Exponential backoff with jitter, never giving up: a store that stopped trying would
        // need a process restart to recover from a Redis restart.
        reconnectStrategy: backoff,
      },
    });
    // Without a listener, an 'error' event (every failed connection attempt emits one) would
    // crash the process.
    client.on('error', (error: unknown) => {
      if (client !== this.client) return;
      this.failed(error);
    });
    client.on('ready', () => {
      if (client === this.client) this.up();
    });
    client.on('ping-interval', () => {
      if (client === this.client) this.lastAnswerAt = performance.now();
    });
    // connect() settles only once connected (or when closed); failures were emitted as 'error'.
    client.connect().catch(() => {});
    return client;
  }

  /// Creates a cluster client and connects it: learns the slots from the first root node that
  /// answers. node-redis gives up when none does, so a failed attempt is retried here, with a
  /// new client, after the same backoff as a single server's.
  private connectCluster(attempt: number): ClusterClient {
    const rootNodes = this.target.cluster!.rootNodes;
    const seed = new URL(rootNodes[0]!.url);
    const client: ClusterClient = createCluster({
      rootNodes: rootNodes.map((node) => ({ url: node.url })),
      // Discovered nodes get these, not the root nodes' URLs: the credentials and TLS of the
      // first root node apply to every node.
      defaults: {
        disableOfflineQueue: true,
        pingInterval: this.options.pingIntervalMs,
        ...(seed.username ? { username: decodeURIComponent(seed.username) } : {}),
        ...(seed.password ? { password: decodeURIComponent(seed.password) } : {}),
        socket: {
          connectTimeout: this.options.commandTimeoutMs,
          reconnectStrategy: backoff,
          ...(seed.protocol === 'rediss:' ? { tls: true as const } : {}),
        },
      },
      topologyRefreshOnReconnectionAttemptStrategy: clusterRefreshMs,
    });
    client.on('error', (error: unknown) => {
      if (client === this.client) this.failed(error);
    });
    client.on('node-error', (error: unknown) => {
      if (client === this.client) this.failed(error);
    });
    client.on('node-ready', () => {
      if (client === this.client && this.connected) this.up();
    });
    client.connect().then(
      () => {
        if (client !== this.client) return;
        this.connected = true;
        this.up();
      },
      (error: unknown) => {
        if (client !== this.client || this.closed) return;
        this.failed(error);
        client.destroy();
        setTimeout(() => {
          if (!this.closed && client === this.client)
            this.client = this.connectCluster(attempt + 1);
        }, backoff(attempt)).unref();
      },
    );
    return client;
  }

  private up(): void {
    this.connected = true;
    this.refusal = null;
    this.lastAnswerAt = performance.now();
    for (const resolve of this.readyWaiters) resolve();
    if (this.healthy) return;
    this.healthy = true;
    this.options.logger?.info({}, 'redis store: connected again');
  }

  private failed(error: unknown): void {
    if (error instanceof ErrorReply && urlReplies.test(error.message)) this.refusal = error.message;
    this.lost({ err: error }, 'redis store: connection lost, reconnecting');
  }

  /// Replaces a single server's client when it has shown no sign of life for too long: a
  /// connection that stopped answering PINGs, or one that never finished its handshake.
  private checkAlive(): void {
    if (this.closed || this.isCluster) return;
    const now = performance.now();
    const sinceCheck = now - this.lastCheckAt;
    this.lastCheckAt = now;
    // After the event loop was blocked (a large document parsed, a long GC), timers run before
    // the replies that arrived meanwhile are read: silence measured then is ours, not Redis's.
    if (sinceCheck > 2 * this.options.pingIntervalMs) {
      this.lastAnswerAt = now;
      return;
    }
    const silentMs = now - this.lastAnswerAt;
    if (silentMs <= this.options.pingIntervalMs + this.options.commandTimeoutMs) return;
    this.lost(
      { silentMs: Math.round(silentMs) },
      'redis store: no answer from Redis, opening a new connection',
    );
    const dead = this.client as SingleClient;
    this.lastAnswerAt = performance.now();
    this.lastCheckAt = this.lastAnswerAt;
    this.client = this.connectSingle();
    // Rejects what is still waiting on the dead connection (as unavailable) and stops its
    // reconnection loop. Commands it already sent may still run if Redis was only slow, as
    // with any timeout; the compare-and-set catches that.
    dead.destroy();
  }

  /// Logs once per outage.
  private lost(obj: object, msg: string): void {
    if (!this.healthy || this.closed) return;
    this.healthy = false;
    this.options.logger?.warn(obj, msg);
  }

  /// Any reply is a sign of life, not only the PINGs': a connection busy with long commands
  /// (node-redis queues its PINGs behind them) is not a dead one.
  private readonly alive = <T>(reply: T): T => {
    this.lastAnswerAt = performance.now();
    return reply;
  };

  /// Races `promise` against a timer that is always cleared, and maps failures to
  /// `StoreUnavailableError` (`unavailable`). node-redis's own `timeout` option only covers the
  /// time before a command is written, not the wait for its reply.
  private bounded<T>(promise: Promise<T>, extraMs = 0): Promise<T> {
    const limitMs = this.options.commandTimeoutMs + extraMs;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new StoreUnavailableError(`redis did not answer within ${limitMs} ms`)),
        limitMs,
      );
    });
    return Promise.race([promise, timeout])
      .finally(() => clearTimeout(timer))
      .catch(unavailable);
  }
}

/// Exponential backoff with jitter, capped at `maxReconnectDelayMs`.
function backoff(retries: number): number {
  return (
    Math.min(maxReconnectDelayMs, 50 * 2 ** Math.min(retries, 10)) + Math.floor(Math.random() * 50)
  );
}

/// Maps a failed Redis call to `StoreUnavailableError`, except Redis error replies that point to
/// a bug (a script error, a key of the wrong type), which are rethrown as they are.
function unavailable(error: unknown): never {
  if (error instanceof StoreUnavailableError) throw error;
  if (error instanceof ErrorReply && !unavailableReplies.test(error.message)) throw error;
  const message = error instanceof Error ? error.message : String(error);
  throw new StoreUnavailableError(`redis unavailable: ${message}`, { cause: error });
}
