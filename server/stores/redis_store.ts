import { createHash } from 'node:crypto';
import { createClient, ErrorReply } from 'redis';
import { docKeys } from './redis_keys.js';
import { entriesAfter, entryEnd, parseJournalEntry, parseSnapshot } from './journal_entry.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type JournalEntry,
  type LeaseStore,
  type ResetOutcome,
  type Snapshot,
  type SnapshotOutcome,
  type Store,
  type StoredDocument,
  type StoredPosition,
} from './store.js';

// What `load` and `exists` throw for a document's journal or snapshot without its meta hash.
const orphanKeys = 'redis store: journal or snapshot keys without a meta version';

/// The few logger methods the Redis store uses; a pino logger fits.
export interface RedisStoreLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/// How to reach Redis and how long to wait for it.
export interface RedisStoreOptions {
  /// `redis://host:port[/db]`.
  url: string;
  /// A command (or the first connection) not answered within this many milliseconds is
  /// rejected with `StoreUnavailableError`. Default 2000.
  commandTimeoutMs?: number;
  /// Prepended to every key (before the `{docId}` hash tag). Default `scriptorium:`.
  keyPrefix?: string;
  /// How often the connection is checked with a PING. A connection that has not answered one
  /// for `pingIntervalMs + commandTimeoutMs` is dropped and a new one opened. Default 1000.
  pingIntervalMs?: number;
  logger?: RedisStoreLogger;
}

/// The longest pause between two reconnection attempts. Short enough that a Redis restart costs
/// seconds, not minutes; long enough not to hammer a Redis that is down.
const maxReconnectDelayMs = 2000;

// Journal entries are stored as "<endVersion>\n<entry JSON>", so that the snapshot script can
// tell which entries a snapshot covers by reading a number at the front of each string instead
// of decoding (with cjson, in Redis's single thread) whole entries full of steps. JSON.stringify
// never emits a raw newline, so the first newline is always the separator.

// KEYS: meta, journal, lease, snapshot. ARGV: epoch, baseVersion, endVersion, encoded entry, lease token
// ('' for none). Returns {1, version} when appended, {0, storedVersion, storedEpoch} on
// conflict ('' when the document does not exist), {2, storedVersion, storedEpoch} when the
// lease is not (or no longer) the writer's: the fencing that keeps a process that lost its
// lease from writing (the position lets it tell a Redis that went back to an older state). Never returns a
// Lua false: RESP3 would turn it into a boolean.
//
// A document is created (base 0, no meta hash) only where none of its keys exist: a journal or
// snapshot left without its meta hash (evicted, partly lost, deleted by hand) would otherwise
// be extended, and the next load would mix the old entries into the new history and refuse
// every acknowledged step of it. Such leftovers answer as a conflict: the room reloads, and the
// load quarantines the document as corrupt.
const appendScript = `
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if ARGV[5] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[5] then
  return {2, tonumber(meta[1]) or 0, meta[2] or ''}
end
local base = tonumber(ARGV[2])
if not meta[1] then
  if base ~= 0 or redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4]) > 0 then return {0, 0, ''} end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) ~= base then
  return {0, tonumber(meta[1]), meta[2] or ''}
end
redis.call('RPUSH', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'epoch', ARGV[1])
return {1, tonumber(ARGV[3])}
`;

// KEYS: meta, journal, snapshot, lease. ARGV: epoch, snapshot version, snapshot JSON, lease
// token ('' for none). Returns 'ok', 'conflict', 'outdated' or 'lost' (the meanings of
// `SnapshotOutcome`), or 'corrupt' when a journal entry it must read has no numeric end
// prefix. Redis does not roll a script back when it fails half-way, so every check, the
// prefixes of the entries to trim included, comes before the first write: a failed snapshot
// writes nothing. The entries are read in chunks with LRANGE and trimmed with one LTRIM rather
// than one LPOP each.
const snapshotScript = `
if ARGV[4] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[4] then return 'lost' end
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch', 'snapshotVersion')
local sv = tonumber(ARGV[2])
if not meta[1] then
  if sv ~= 0 or redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then return 'conflict' end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) < sv then
  return 'conflict'
elseif meta[3] and tonumber(meta[3]) >= sv then
  return 'outdated'
end
local covered = 0
while true do
  local head = redis.call('LRANGE', KEYS[2], covered, covered + 127)
  local done = #head < 128
  for i = 1, #head do
    local prefix = string.match(head[i], '^(%d+)\\n')
    if not prefix then return 'corrupt' end
    if tonumber(prefix) > sv then
      done = true
      break
    end
    covered = covered + 1
  end
  if done then break end
end
if not meta[1] then redis.call('HSET', KEYS[1], 'version', 0, 'epoch', ARGV[1]) end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[1], 'snapshotVersion', ARGV[2])
if covered > 0 then redis.call('LTRIM', KEYS[2], covered, -1) end
return 'ok'
`;

// KEYS: meta, journal, snapshot, lease. ARGV: expected epoch ('' for a document that must not
// exist), expected version, new epoch, snapshot version, snapshot JSON, lease token ('' for
// none), '1' when nobody may hold the lease. Returns 'ok', 'conflict' (the document is not where
// the caller saw it) or 'lost'.
// Replaces the whole history: journal gone, snapshot and meta hash of the new epoch.
const resetScript = `
if ARGV[6] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[6] then return 'lost' end
if ARGV[7] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then return 'lost' end
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if ARGV[1] == '' then
  if meta[1] then return 'conflict' end
elseif meta[2] ~= ARGV[1] or tonumber(meta[1]) ~= tonumber(ARGV[2]) then
  return 'conflict'
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[1], 'version', ARGV[4], 'epoch', ARGV[3], 'snapshotVersion', ARGV[4])
return 'ok'
`;

// KEYS: meta, journal, snapshot. Returns '' for an unknown document, 'orphan' when there is no
// meta version but one of the keys exists (a journal or snapshot whose meta hash is gone, or a
// meta hash without its version), else {version, epoch or '', snapshot JSON or '',
// {encoded entries}}: one script, so the three reads see one state even while appends and
// snapshots of the document run on other servers. A missing epoch is sent as '' because a nil
// would end the reply's array early.
const loadScript = `
local meta = redis.call('HMGET', KEYS[1], 'version', 'epoch')
if not meta[1] then
  if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then return 'orphan' end
  return ''
end
local snapshot = redis.call('GET', KEYS[3]) or ''
return {meta[1], meta[2] or '', snapshot, redis.call('LRANGE', KEYS[2], 0, -1)}
`;

// KEYS: lease, fence, wanted, home. ARGV: holder, ttl (ms), node id, node key prefix. A holder
// that already has the lease gets it back (extended); otherwise it is taken only when free,
// with the next fencing number. The document's home (the node the gateway routes it to) then
// becomes this node, unless the home is another node that is down: this node only stands in
// for it (see renewScript). Node liveness keys are outside the document's hash slot: leases
// need one Redis, not a Redis Cluster. Returns {1, token} or {0, current token, remaining ms}.
const acquireScript = `
local current = redis.call('GET', KEYS[1])
if current then
  if string.sub(current, 1, #ARGV[1] + 1) == ARGV[1] .. '#' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, current}
  end
  return {0, current, redis.call('PTTL', KEYS[1])}
end
local token = ARGV[1] .. '#' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
local home = redis.call('GET', KEYS[4])
if not home or home == ARGV[3] or redis.call('EXISTS', ARGV[4] .. home) == 1 then
  redis.call('SET', KEYS[4], ARGV[3])
end
return {1, token}
`;

// KEYS: none. ARGV: node key, ttl (ms). A node's liveness: the key holds the Redis time (ms)
// at which the node was first seen alive since it was last down, and expires unless renewed.
const heartbeatScript = `
if redis.call('PEXPIRE', ARGV[1], ARGV[2]) == 0 then
  local now = redis.call('TIME')
  redis.call('SET', ARGV[1], now[1] * 1000 + math.floor(now[2] / 1000), 'PX', ARGV[2])
end
return 'ok'
`;

// KEYS: lease, wanted, home. ARGV: token, ttl (ms), holder, node id, node key prefix, settle
// (ms). Returns 'held'; 'wanted' when another holder asked for the document, or when this node
// stands in for a home node that has been back for `settle` (long enough for the gateway to
// route to it again); or 'lost'.
const renewScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'lost' end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local wanted = redis.call('GET', KEYS[2])
if wanted and wanted ~= ARGV[3] then return 'wanted' end
local home = redis.call('GET', KEYS[3])
if home and home ~= ARGV[4] then
  local since = redis.call('GET', ARGV[5] .. home)
  local now = redis.call('TIME')
  if since and now[1] * 1000 + math.floor(now[2] / 1000) - tonumber(since) >= tonumber(ARGV[6]) then
    return 'wanted'
  end
end
return 'held'
`;

// KEYS: lease, meta, journal, snapshot, fence, home. ARGV: token. Deletes the lease only if it
// is still this one. A document that was never written (a creation refused once its lease was
// held, an editor that joined a new document and left without a change) also loses its fencing
// counter and home, which would otherwise stay for good, two keys per made-up id: nobody holds
// the lease now, so no fenced writer can be confused by numbers starting over (a token names
// its holder, one per process, as well as the number).
const releaseScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'ok' end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) == 0 then redis.call('DEL', KEYS[5], KEYS[6]) end
return 'ok'
`;

type RedisClient = ReturnType<typeof createClient>;

interface Script {
  source: string;
  sha1: string;
}

function script(source: string): Script {
  return { source, sha1: createHash('sha1').update(source).digest('hex') };
}

const scripts = {
  append: script(appendScript),
  snapshot: script(snapshotScript),
  reset: script(resetScript),
  load: script(loadScript),
  acquire: script(acquireScript),
  renew: script(renewScript),
  heartbeat: script(heartbeatScript),
  release: script(releaseScript),
};

// Redis refusing the credentials of the connection itself (the URL's user or password).
const credentialReplies = /^(WRONGPASS|NOAUTH|NOPERM)/;

// Redis refusing what the URL asks of the connection: its credentials, or its database number
// (`ERR DB index is out of range`, from the SELECT of the handshake). Neither is mended by
// connecting again.
const urlReplies = new RegExp(`${credentialReplies.source}|^ERR DB index`);

// Redis answers that mean "not now" or "not allowed" rather than "your script is wrong": out of
// memory under noeviction, a replica or a loading server after failover, a script still
// running, writes stopped after a failed save (MISCONF: a full disk), and the credentials or
// ACL refusing a command. None says anything about the document, which must not be
// quarantined as damaged for them: the store is unavailable until the operator or Redis mends
// it.
const unavailableReplies = new RegExp(
  `^(OOM|READONLY|LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|MISCONF)|${credentialReplies.source}`,
);

/// A version as Redis holds it: decimal digits only (no sign, exponent, fraction or spaces,
/// which `Number` would all accept).
const decimal = /^\d+$/;

/// A store on Redis (one server; the keys are Cluster-ready). Each append and each snapshot is
/// one Lua script, so the compare-and-set and the fencing hold across any number of server
/// processes. Appends issued in one event-loop turn, for any documents, leave in one write and
/// so cost one round trip (node-redis writes its queue once per `setImmediate`).
///
/// The client connects in the background as soon as the store is constructed and reconnects by
/// itself with capped backoff. While it is not connected, calls fail at once with
/// `StoreUnavailableError` instead of queueing: a queued append could run minutes later, after
/// the server had already told the client it failed, and queued loads would pile up behind a
/// dead connection. A call that gets no answer within `commandTimeoutMs` rejects with
/// `StoreUnavailableError` too; like any timed-out write, such an append may still have been
/// applied, which the next append's compare-and-set will reveal as a conflict.
///
/// A connection can also die silently: the Redis host loses power, a NAT or firewall forgets
/// the flow. Nothing then tells the client; TCP gives up only after its retransmissions run
/// out (about 15 minutes on Linux), and until then every call times out. So the connection is
/// PINGed every `pingIntervalMs` (node-redis's `pingInterval`), and one that has not answered
/// for `pingIntervalMs + commandTimeoutMs` is dropped and replaced by a new client. node-redis
/// alone does not notice: its PING has no reply timeout (its `timeout` option only covers the
/// wait before a command is written), and its socket idle timeout is reset by our own writes.
export class RedisStore implements Store {
  readonly kind = 'redis';
  private client: RedisClient;
  private readonly url: string;
  private readonly commandTimeoutMs: number;
  private readonly pingIntervalMs: number;
  private readonly keyPrefix: string;
  /// Node liveness keys: `<prefix>node:<node id>`.
  private readonly nodeKeyPrefix: string;
  private readonly logger: RedisStoreLogger | null;
  /// False from the first connection error until the next 'ready': logs once per outage.
  private healthy = true;
  /// The last refusal of this store's URL by Redis (its message), while it lasts.
  private refusal: string | null = null;
  private closed = false;
  /// When the current client last showed it was alive: created, ready, or answered a PING.
  private lastAnswerAt: number;
  private lastCheckAt: number;
  private readonly watchdog: NodeJS.Timeout;
  private readonly readyWaiters = new Set<() => void>();

  constructor(options: RedisStoreOptions) {
    this.url = options.url;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2000;
    this.pingIntervalMs = options.pingIntervalMs ?? 1000;
    this.keyPrefix = options.keyPrefix ?? 'scriptorium:';
    this.nodeKeyPrefix = `${this.keyPrefix}node:`;
    this.logger = options.logger ?? null;
    this.lastAnswerAt = performance.now();
    this.lastCheckAt = this.lastAnswerAt;
    this.client = this.connect();
    this.watchdog = setInterval(() => this.checkAlive(), this.pingIntervalMs);
    // The store must not keep a process alive that has nothing else to do.
    this.watchdog.unref();
  }

  /// Resolves once the client is connected; rejects with `StoreUnavailableError` when it is not
  /// within `timeoutMs` (default `commandTimeoutMs`). For start-up and readiness checks: the
  /// other methods do not wait for a connection.
  async ready(timeoutMs = this.commandTimeoutMs): Promise<void> {
    if (this.client.isReady) return;
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

  /// Redis's answer when it last refused what this store's URL asks of the connection (a wrong
  /// password or user; a database number beyond the server's `databases`), or null once it
  /// takes them, or when it never refused them. Connecting again cannot mend that: a server
  /// starting with it should stop and say so.
  get urlRefused(): string | null {
    return this.refusal;
  }

  /// Sends PING. Resolves when Redis answers; rejects with `StoreUnavailableError` when it
  /// cannot be reached or does not answer within `commandTimeoutMs`. For health checks.
  async ping(): Promise<void> {
    await this.command(['PING']);
  }

  /// Whether the document exists: its meta hash does. Throws the `TypeError` `load` throws
  /// (the document is then quarantined as corrupt) for journal or snapshot keys without a
  /// meta hash, so that a look finds a damaged document as a read does, before any lease.
  async exists(docId: string): Promise<boolean> {
    const keys = docKeys(this.keyPrefix, docId);
    // One round trip: EXISTS counts a key as often as it is named, so with the meta hash named
    // three times the count is 3 or more exactly when it exists, and 1 or 2 for leftovers.
    const count = Number(
      await this.command(['EXISTS', keys.meta, keys.meta, keys.meta, keys.journal, keys.snapshot]),
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
    const reply = await this.run(scripts.load, [keys.meta, keys.journal, keys.snapshot], []);
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
    const entry: JournalEntry = {
      baseVersion: request.baseVersion,
      steps: request.steps,
      clientIDs: request.clientIDs,
    };
    const end = entryEnd(entry);
    const reply = await this.run(
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
    if (reply[0] === 1) return { ok: true, version: Number(reply[1]) };
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
    const reply = await this.run(
      scripts.snapshot,
      [keys.meta, keys.journal, keys.snapshot, keys.lease],
      [snapshot.epoch, String(snapshot.version), JSON.stringify(snapshot), lease ?? ''],
    );
    if (reply === 'ok') return { ok: true };
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
    const reply = await this.run(
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
    if (reply === 'ok') return { ok: true };
    if (reply === 'conflict' || reply === 'lost') return { ok: false, reason: reply };
    throw new TypeError('redis store: unexpected reset reply');
  }

  /// Document leases in the same Redis (see `LeaseStore`): one script per call, so that the
  /// check and the change are one step for every process sharing the Redis.
  readonly leases: LeaseStore = {
    acquire: async (docId, holder, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      const reply = await this.run(
        scripts.acquire,
        [keys.lease, keys.fence, keys.wanted, keys.home],
        [holder, String(ttlMs), nodeOf(holder), this.nodeKeyPrefix],
      );
      if (!Array.isArray(reply)) throw new TypeError('redis store: unexpected acquire reply');
      const token = String(reply[1]);
      if (reply[0] === 1) return { ok: true, lease: { token, fence: fenceOf(token) } };
      return {
        ok: false,
        holder: token.slice(0, token.lastIndexOf('#')),
        remainingMs: Math.max(0, Number(reply[2])),
      };
    },
    renew: async (docId, holder, lease, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      const reply = await this.run(
        scripts.renew,
        [keys.lease, keys.wanted, keys.home],
        [
          lease.token,
          String(ttlMs),
          holder,
          nodeOf(holder),
          this.nodeKeyPrefix,
          String(homeSettleMs(ttlMs)),
        ],
      );
      if (reply === 'held' || reply === 'wanted' || reply === 'lost') return reply;
      throw new TypeError('redis store: unexpected renew reply');
    },
    release: async (docId, lease) => {
      const keys = docKeys(this.keyPrefix, docId);
      await this.run(
        scripts.release,
        [keys.lease, keys.meta, keys.journal, keys.snapshot, keys.fence, keys.home],
        [lease.token],
      );
    },
    heartbeat: async (node, ttlMs) => {
      await this.run(scripts.heartbeat, [], [this.nodeKeyPrefix + node, String(ttlMs)]);
    },
    depart: async (node) => {
      await this.command(['DEL', this.nodeKeyPrefix + node]);
    },
    requestHandover: async (docId, holder, ttlMs) => {
      const keys = docKeys(this.keyPrefix, docId);
      await this.command(['SET', keys.wanted, holder, 'PX', String(ttlMs)]);
    },
  };

  /// Waits (at most `commandTimeoutMs`) for commands already sent, then disconnects. Resolves
  /// in every case: a store that is shutting down has nobody to report to.
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watchdog);
    if (!this.client.isReady) {
      this.client.destroy();
      return;
    }
    try {
      await this.withTimeout(this.client.close());
    } catch {
      this.client.destroy();
    }
  }

  /// Creates a client and starts connecting it in the background. Its events count only while
  /// it is the current client: a replaced one may still report its death.
  private connect(): RedisClient {
    const client: RedisClient = createClient({
      url: this.url,
      disableOfflineQueue: true,
      pingInterval: this.pingIntervalMs,
      socket: {
        connectTimeout: this.commandTimeoutMs,
        // Exponential backoff with jitter, never giving up: a store that stopped trying would
        // need a process restart to recover from a Redis restart.
        reconnectStrategy: (retries: number) =>
          Math.min(maxReconnectDelayMs, 50 * 2 ** Math.min(retries, 10)) +
          Math.floor(Math.random() * 50),
      },
    });
    // Without a listener, an 'error' event (every failed connection attempt emits one) would
    // crash the process.
    client.on('error', (error: unknown) => {
      if (client !== this.client) return;
      if (error instanceof ErrorReply && urlReplies.test(error.message)) {
        this.refusal = error.message;
      }
      this.lost({ err: error }, 'redis store: connection lost, reconnecting');
    });
    client.on('ready', () => {
      if (client !== this.client) return;
      this.refusal = null;
      this.lastAnswerAt = performance.now();
      for (const resolve of this.readyWaiters) resolve();
      if (this.healthy) return;
      this.healthy = true;
      this.logger?.info({}, 'redis store: connected again');
    });
    client.on('ping-interval', () => {
      if (client === this.client) this.lastAnswerAt = performance.now();
    });
    // connect() settles only once connected (or when closed); failures were emitted as 'error'.
    client.connect().catch(() => {});
    return client;
  }

  /// Replaces the client when it has shown no sign of life for too long: a connection that
  /// stopped answering PINGs, or one that never finished its handshake. While Redis refuses
  /// connections this also restarts the client's backoff every few seconds, which is harmless.
  private checkAlive(): void {
    if (this.closed) return;
    const now = performance.now();
    const sinceCheck = now - this.lastCheckAt;
    this.lastCheckAt = now;
    // After the event loop was blocked (a large document parsed, a long GC), timers run before
    // the replies that arrived meanwhile are read: silence measured then is ours, not Redis's.
    if (sinceCheck > 2 * this.pingIntervalMs) {
      this.lastAnswerAt = now;
      return;
    }
    const silentMs = now - this.lastAnswerAt;
    if (silentMs <= this.pingIntervalMs + this.commandTimeoutMs) return;
    this.lost(
      { silentMs: Math.round(silentMs) },
      'redis store: no answer from Redis, opening a new connection',
    );
    const dead = this.client;
    this.lastAnswerAt = performance.now();
    this.lastCheckAt = this.lastAnswerAt;
    this.client = this.connect();
    // Rejects what is still waiting on the dead connection (as unavailable) and stops its
    // reconnection loop. Commands it already sent may still run if Redis was only slow, as
    // with any timeout; the compare-and-set catches that.
    dead.destroy();
  }

  /// Logs once per outage.
  private lost(obj: object, msg: string): void {
    if (!this.healthy || this.closed) return;
    this.healthy = false;
    this.logger?.warn(obj, msg);
  }

  /// EVALSHA, falling back to EVAL when Redis does not know the script (after a restart or a
  /// SCRIPT FLUSH). The fallback is ours rather than node-redis's `defineScript` so that one
  /// timer covers both attempts.
  private run(s: Script, keys: string[], args: string[]): Promise<unknown> {
    const tail = [String(keys.length), ...keys, ...args];
    const client = this.client;
    return this.withTimeout(
      client
        .sendCommand(['EVALSHA', s.sha1, ...tail])
        .catch((error: unknown) => {
          if (error instanceof ErrorReply && error.message.startsWith('NOSCRIPT'))
            return client.sendCommand(['EVAL', s.source, ...tail]);
          throw error;
        })
        .then(this.alive),
    ).catch(unavailable);
  }

  private command(args: string[]): Promise<unknown> {
    return this.withTimeout(this.client.sendCommand(args).then(this.alive)).catch(unavailable);
  }

  /// Any reply is a sign of life, not only the PINGs': a connection busy with long commands
  /// (node-redis queues its PINGs behind them) is not a dead one.
  private readonly alive = <T>(reply: T): T => {
    this.lastAnswerAt = performance.now();
    return reply;
  };

  /// Races `promise` against a timer that is always cleared. node-redis's own `timeout`
  /// option only covers the time before a command is written, not the wait for its reply.
  private withTimeout<T>(promise: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new StoreUnavailableError(`redis did not answer within ${this.commandTimeoutMs} ms`),
          ),
        this.commandTimeoutMs,
      );
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }
}

/// Maps a failed Redis call to `StoreUnavailableError`, except Redis error replies that point to
/// a bug (a script error, a key of the wrong type), which are rethrown as they are.
function unavailable(error: unknown): never {
  if (error instanceof StoreUnavailableError) throw error;
  if (error instanceof ErrorReply && !unavailableReplies.test(error.message)) throw error;
  const message = error instanceof Error ? error.message : String(error);
  throw new StoreUnavailableError(`redis unavailable: ${message}`, { cause: error });
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
