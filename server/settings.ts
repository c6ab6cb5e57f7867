import { hostname } from 'node:os';
import { parseOrigins } from './protocol/origins.js';

/// Whose a setting is: `process` settings belong to the standalone server (its port, its
/// store, its HTTP access control), `limit` settings to the authority any host embeds, which
/// `createCollab` takes as `limits`.
export type SettingScope = 'process' | 'limit';

/// One setting: its environment variable, default, how the variable's text is read, whose it
/// is, and one line for docs/configuration.md. The option name (`createCollab`'s `limits`, the
/// `Config` field) is its key in `settings`.
export interface Setting<T, S extends SettingScope = SettingScope> {
  readonly env: string;
  readonly default: T;
  readonly scope: S;
  /// For whole-number settings, the smallest and largest value accepted; null for the others,
  /// which `loadConfig` checks one by one.
  readonly range: readonly [number, number] | null;
  /// Reads the variable's text. Throws an Error whose message names `env` for text it cannot
  /// read; `loadConfig` turns it into a `ConfigError`.
  readonly parse: (raw: string, env: string) => T;
  /// The default as docs/configuration.md shows it.
  readonly shown: string;
  readonly doc: string;
}

/// A whole number from `range[0]` to `range[1]`.
function whole<S extends SettingScope>(
  env: string,
  value: number,
  range: readonly [number, number],
  scope: S,
  doc: string,
): Setting<number, S> {
  const parse = (raw: string, name: string): number => {
    if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a whole number, got "${raw}"`);
    return Number(raw);
  };
  return { env, default: value, scope, range, parse, shown: String(value), doc };
}

/// Text taken as written (checked by `loadConfig` where it must have a form).
function text<S extends SettingScope>(
  env: string,
  value: string,
  scope: S,
  doc: string,
  shown: string = value,
): Setting<string, S> {
  return { env, default: value, scope, range: null, parse: (raw) => raw, shown, doc };
}

/// One of `values`, taken as written (`loadConfig` refuses any other, with its own message).
function choice<const T extends string, S extends SettingScope>(
  env: string,
  values: readonly T[],
  value: T,
  scope: S,
  doc: string,
  shown: string = value,
): Setting<T, S> & { readonly values: readonly T[] } {
  return { env, default: value, scope, range: null, parse: (raw) => raw as T, shown, doc, values };
}

/// Text that is unset (null) by default.
function optional<S extends SettingScope>(
  env: string,
  scope: S,
  doc: string,
  parse: (raw: string) => string = (raw) => raw,
): Setting<string | null, S> {
  return { env, default: null, scope, range: null, parse, shown: '—', doc };
}

/// A comma list, empty by default.
function list<S extends SettingScope>(
  env: string,
  scope: S,
  doc: string,
  parse: (raw: string, env: string) => string[],
): Setting<string[], S> {
  return { env, default: [], scope, range: null, parse, shown: '—', doc };
}

/// `on`/`true`/`1` or `off`/`false`/`0`.
function toggle<S extends SettingScope>(
  env: string,
  value: boolean,
  scope: S,
  doc: string,
): Setting<boolean, S> {
  const parse = (raw: string, name: string): boolean => {
    if (raw === 'on' || raw === 'true' || raw === '1') return true;
    if (raw === 'off' || raw === 'false' || raw === '0') return false;
    throw new Error(`${name} must be on or off, got "${raw}"`);
  };
  return { env, default: value, scope, range: null, parse, shown: value ? 'on' : 'off', doc };
}

const kib = 1024;
const mib = 1024 * 1024;

/// Every setting of the server, in the order docs/configuration.md lists them. Adding a row is
/// all a new setting takes: `Config`, the environment, `createCollab`'s limits, their defaults
/// and the docs table follow from it (a check it needs beyond its range goes in `loadConfig`'s
/// validation, and the docs table gets its line: test/unit/docs.test.ts compares them).
export const settings = {
  port: whole('PORT', 4000, [0, 65_535], 'process', 'HTTP and Socket.io port'),
  host: text(
    'HOST',
    '0.0.0.0',
    'process',
    'address to listen on: an IP address or a host name; one the server cannot listen on stops it',
  ),
  /// `redis://…` to persist in Redis; null for the embedded file store under `dataDir`.
  redisUrl: optional(
    'REDIS_URL',
    'process',
    '`redis[s]://[user:password@]host[:port][/db]`, percent-encoded: use Redis, not the file store; a Redis refusing its password or db stops the server',
  ),
  /// Put before every Redis key this server writes: deployments (or test runs) sharing one
  /// Redis keep apart by it. Node liveness keys carry it too.
  redisKeyPrefix: text(
    'REDIS_KEY_PREFIX',
    'scriptorium:',
    'limit',
    'put before every Redis key (documents, leases, node liveness): deployments sharing one Redis keep apart by it',
  ),
  /// Seed nodes of a Redis Cluster (`host:port` means `redis://host:port`), instead of
  /// `redisUrl`: documents are spread over its masters by their hash slot.
  redisClusterNodes: list(
    'REDIS_CLUSTER_NODES',
    'process',
    "comma list of a Redis Cluster's seed nodes (`host:port` or `redis[s]://…`, no database number): use the cluster, not one Redis; contradicts `REDIS_URL` ([operations](operations.md#redis-cluster))",
    (raw) =>
      raw
        .split(',')
        .map((part) => part.trim())
        .filter((part) => part !== '')
        .map((part) => (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(part) ? part : `redis://${part}`)),
  ),
  /// Replicas that must hold each append and lease change (`WAIT`) before a batch is
  /// acknowledged; fewer within half of `storeTimeoutMs` refuses the batch `unavailable`.
  redisMinReplicasAcked: whole(
    'REDIS_MIN_REPLICAS_ACKED',
    0,
    [0, 16],
    'process',
    'replicas that must hold each append and lease change (`WAIT`) before a batch is acknowledged; too few in time: `unavailable`, never acknowledged. Needs Redis',
  ),
  dataDir: text('DATA_DIR', './data', 'process', "the file store's directory"),
  /// 'memory' keeps documents in this process only (tests, demos).
  store: choice(
    'STORE',
    ['auto', 'memory'],
    'auto',
    'process',
    '`memory` keeps documents in the process only (demos, tests); refused next to `REDIS_URL`',
  ),
  maxHistorySteps: whole(
    'MAX_HISTORY_STEPS',
    10_000,
    [1, 10_000_000],
    'limit',
    'recent steps kept per document for catch-up (older clients reload)',
  ),
  /// Recent steps kept per document are also cut to this many bytes (of their JSON).
  maxHistoryBytes: whole(
    'MAX_HISTORY_BYTES',
    256 * kib,
    [kib, 1024 * mib],
    'limit',
    '…and their bytes of JSON: whichever is reached first cuts the history',
  ),
  historyRetentionDays: whole(
    'HISTORY_RETENTION_DAYS',
    30,
    [1, 36_500],
    'limit',
    'version history keeps every step this many days; older steps are coarsened…',
  ),
  historyCoarseMinutes: whole(
    'HISTORY_COARSE_MINUTES',
    60,
    [1, 525_600],
    'limit',
    '…to one version per this many minutes of activity (who wrote is kept; named versions always are); versions in between answer `history-gone`',
  ),
  historyMaxBytes: whole(
    'HISTORY_MAX_BYTES',
    256 * mib,
    [64 * kib, 1024 * 1024 * mib],
    'limit',
    "a document's stored history past this many bytes is coarsened from its oldest end whatever its age, then thinned (`history-gone` there)",
  ),
  historyMaxDiffSteps: whole(
    'HISTORY_MAX_DIFF_STEPS',
    50_000,
    [1, 10_000_000],
    'limit',
    'most steps one `changes` request may span (`too-large` past it): a diff is computed on the event loop',
  ),
  historyMaxRevertSteps: whole(
    'HISTORY_MAX_REVERT_STEPS',
    5_000,
    [1, 10_000_000],
    'limit',
    "most steps from a revert's `fromVersion` to the head (`too-large` past it): its cost grows with the square of the steps",
  ),
  maxStepsPerBatch: whole(
    'MAX_STEPS_PER_BATCH',
    1_000,
    [1, 100_000],
    'limit',
    'steps in one `steps` message (`too-large` beyond)',
  ),
  /// Largest document in ProseMirror positions (`Node.nodeSize`).
  maxDocSize: whole(
    'MAX_DOC_SIZE',
    4_000_000,
    [16, 1_000_000_000],
    'limit',
    'largest document, in ProseMirror positions (`too-large` beyond)',
  ),
  /// Largest document in bytes of its JSON, checked after every step of a batch.
  maxDocBytes: whole(
    'MAX_DOC_BYTES',
    256 * kib,
    [kib, 256 * mib],
    'limit',
    "a document's size in bytes of JSON, checked after every step (`too-large`)",
  ),
  /// Deepest document, the top node at depth 0. The range keeps prosemirror-model's recursive
  /// toJSON/fromJSON/check far from overflowing the stack (a few hundred levels).
  maxDocDepth: whole(
    'MAX_DOC_DEPTH',
    48,
    [4, 200],
    'limit',
    'nesting of nodes in a document, checked after every step (`too-deep`)',
  ),
  /// Longest attribute string (a link's href, an image's src), in UTF-16 code units.
  maxAttributeBytes: whole(
    'MAX_ATTRIBUTE_BYTES',
    4 * kib,
    [64, 64 * mib],
    'limit',
    "any string in a message other than a text node's text (attributes, URLs); at most `MAX_MESSAGE_BYTES`",
  ),
  /// A batch that takes longer than this to validate and apply is refused (`too-large`): a
  /// backstop under the size limits, so no single message holds the event loop for long.
  maxApplyMs: whole(
    'MAX_APPLY_MS',
    20,
    [1, 60_000],
    'limit',
    'time one batch may take to apply (`too-large`): a backstop under the size limits',
  ),
  maxRebaseSteps: whole(
    'MAX_REBASE_STEPS',
    1_000,
    [0, 1_000_000],
    'limit',
    'rebase batches made up to this many steps behind; `0` refuses them as `stale`, and batches are then not held for `FLUSH_INTERVAL_MS`',
  ),
  maxMessageBytes: whole(
    'MAX_MESSAGE_BYTES',
    64 * kib,
    [kib, 256 * mib],
    'limit',
    'one message, in bytes of JSON (`too-large`; twice that on the wire closes the connection)',
  ),
  /// Deepest JSON nesting (objects and arrays) accepted in any message, checked before use.
  maxJsonDepth: whole(
    'MAX_JSON_DEPTH',
    128,
    [8, 500],
    'limit',
    'nesting of objects and arrays in any message, and in stored JSON (`too-deep`); at least 2 × `MAX_DOC_DEPTH` + 8',
  ),
  /// Bytes the server may have queued for one socket before it is dropped (`slow-consumer`).
  maxSocketBufferBytes: whole(
    'MAX_SOCKET_BUFFER_BYTES',
    4 * mib,
    [64 * kib, 1024 * mib],
    'limit',
    'bytes waiting to be sent to one socket that does not read (`slow-consumer`); at least `MAX_DOC_BYTES`',
  ),
  /// Token buckets per socket: `steps` batches, and `join`/`pull` requests (0 = no limit).
  batchesPerSecond: whole(
    'BATCHES_PER_SECOND',
    50,
    [0, 1_000_000],
    'limit',
    '`steps` messages per socket and second (`rate-limited`; `0`: no limit)',
  ),
  batchesBurst: whole('BATCHES_BURST', 100, [1, 1_000_000], 'limit', '…and in a burst'),
  pullsPerSecond: whole(
    'PULLS_PER_SECOND',
    10,
    [0, 1_000_000],
    'limit',
    '`join` and `pull` messages per socket and second (`rate-limited`; `0`: no limit)',
  ),
  pullsBurst: whole('PULLS_BURST', 10, [1, 1_000_000], 'limit', '…and in a burst'),
  /// Caps per client address and per client id (0 = no limit).
  maxConnectionsPerIp: whole(
    'MAX_CONNECTIONS_PER_IP',
    2_000,
    [0, 10_000_000],
    'limit',
    'sockets, and Engine.IO connections from their first request, open from one client address (`too-many-connections`; `0`: no limit)',
  ),
  maxSocketsPerClient: whole(
    'MAX_SOCKETS_PER_CLIENT',
    8,
    [0, 1_000_000],
    'limit',
    'sockets open with one client id, per user (`too-many-connections`; `0`: no limit)',
  ),
  /// Engine.IO connections this process holds at once, from every address (0 = no limit).
  maxConnections: whole(
    'MAX_CONNECTIONS',
    20_000,
    [0, 10_000_000],
    'limit',
    'Engine.IO connections this process holds at once, counted from their first request (HTTP 403 beyond; `0`: no limit)',
  ),
  /// The reference client connects its namespace as soon as the connection opens; the time
  /// left is for the host's `authenticate`.
  handshakeTimeoutMs: whole(
    'HANDSHAKE_TIMEOUT_MS',
    10_000,
    [100, 600_000],
    'limit',
    'a connection that has not joined the protocol by then is closed (Socket.io `connectTimeout`)',
  ),
  handshakesPerMinute: whole(
    'HANDSHAKES_PER_MINUTE',
    3_000,
    [0, 10_000_000],
    'limit',
    'Socket.io handshakes per client address, and per authenticated user, per minute (`rate-limited`; `0`: no limit)',
  ),
  /// Several times what an honest editor sends at most (batches, pulls, presence and a
  /// reconnect's catch-up), a small share of what one socket can make the event loop decode.
  framesPerSecond: whole(
    'FRAMES_PER_SECOND',
    200,
    [0, 10_000_000],
    'limit',
    'frames of any kind one connection may send per second, counted before decoding (closed `rate-limited`; `0`: no limit)',
  ),
  framesBurst: whole('FRAMES_BURST', 500, [1, 10_000_000], 'limit', '…and in a burst'),
  frameBytesPerSecond: whole(
    'FRAME_BYTES_PER_SECOND',
    1024 * 1024,
    [0, 1024 * mib],
    'limit',
    'bytes of frames one connection may send per second (closed `rate-limited`; `0`: no limit)',
  ),
  /// Never less than one frame of twice `maxMessageBytes` (Engine.IO's cap), whatever is set.
  frameBytesBurst: whole(
    'FRAME_BYTES_BURST',
    4 * 1024 * 1024,
    [1024, 1024 * mib],
    'limit',
    '…and in a burst (at least twice `MAX_MESSAGE_BYTES`)',
  ),
  /// Room for an office behind one NAT: a hundred editors typing with presence on stay under
  /// it. Behind a gateway, the address is the one `TRUST_PROXY` believes.
  addressFramesPerSecond: whole(
    'ADDRESS_FRAMES_PER_SECOND',
    2_000,
    [0, 10_000_000],
    'limit',
    "frames all of one client address's connections may send per second together, two seconds' worth in a burst (the connection that goes over is closed `rate-limited`; `0`: no limit)",
  ),
  addressFrameBytesPerSecond: whole(
    'ADDRESS_FRAME_BYTES_PER_SECOND',
    8 * 1024 * 1024,
    [0, 1024 * mib],
    'limit',
    '…and bytes of frames (`0`: no limit)',
  ),
  /// Distinct documents one user (the authenticated user; in open mode, one client address)
  /// may have sockets on at once (0 = no limit): what keeps one client from holding every
  /// one of `maxLoadedDocuments`.
  maxDocumentsPerUser: whole(
    'MAX_DOCUMENTS_PER_USER',
    100,
    [0, 10_000_000],
    'limit',
    'documents one user (in open mode, one address) has sockets on at once (`too-many-documents`; `0`: no limit)',
  ),
  /// New documents one client address may create per minute (0 = no limit).
  newDocumentsPerMinute: whole(
    'NEW_DOCUMENTS_PER_MINUTE',
    300,
    [0, 10_000_000],
    'limit',
    'documents one client address may create per minute (`rate-limited`; `0`: no limit)',
  ),
  /// Documents held in memory; the least recently used idle one is unloaded to make room.
  maxLoadedDocuments: whole(
    'MAX_LOADED_DOCUMENTS',
    2_000,
    [1, 10_000_000],
    'limit',
    'documents in memory; the least recently used one without editors is saved and unloaded first (`too-many-documents`)',
  ),
  /// Malformed messages one socket may send in a burst before it is closed
  /// (`too-many-errors`): one is forgiven every `protocolErrorForgiveMs` while any are counted.
  maxProtocolErrors: whole(
    'MAX_PROTOCOL_ERRORS',
    20,
    [1, 1_000_000],
    'limit',
    'malformed messages one socket may send in a burst before it is closed (`too-many-errors`)',
  ),
  /// How often one counted malformed message is forgiven (a leaky bucket, on the monotonic
  /// clock). A minute: refusals an honest client cannot foresee are far rarer, and a socket
  /// pacing malformed messages to stay open is held to one a minute (at 100 ms, ten a second).
  protocolErrorForgiveMs: whole(
    'PROTOCOL_ERROR_FORGIVE_MS',
    60_000,
    [100, 86_400_000],
    'limit',
    '…one of them forgiven every this many ms while any are counted',
  ),
  /// Proxies whose `X-Forwarded-For` is believed (addresses, CIDR ranges, or `loopback`,
  /// `linklocal`, `uniquelocal`); empty: the peer address is the client's.
  trustProxy: list(
    'TRUST_PROXY',
    'limit',
    "comma list of proxies (addresses, CIDR ranges, `loopback`, `linklocal`, `uniquelocal`) whose `X-Forwarded-For` names the client's address",
    (raw) =>
      raw
        .split(',')
        .map((part) => part.trim())
        .filter((part) => part !== ''),
  ),
  /// When a document flushes (journal append, broadcast, acknowledgements): at once while the
  /// process has headroom; under pressure after `flushUsPerSocket` µs per joined socket; never
  /// after more than `flushIntervalMs`. See `flushWaitMs` (server/rooms/flush_policy.ts).
  flushIntervalMs: whole(
    'FLUSH_INTERVAL_MS',
    40,
    [0, 1_000],
    'limit',
    'most time a batch waits for its flush (one append, one broadcast frame per editor): flushed every event-loop turn while the process has headroom, gathered only under pressure; `0`: every turn',
  ),
  flushUsPerSocket: whole(
    'FLUSH_US_PER_SOCKET',
    500,
    [0, 1_000_000],
    'limit',
    '…under pressure, the gathering time per joined socket, up to `FLUSH_INTERVAL_MS`',
  ),
  /// Where pressure starts for the flush policy: the share of the event loop busy (%) past
  /// which rooms gather; 0 gathers always (a fixed hold of `flushUsPerSocket` per socket).
  flushBusyPercent: whole(
    'FLUSH_BUSY_PERCENT',
    0,
    [0, 100],
    'limit',
    '…the event loop busy (%) past which the process is under pressure; `0` (the default, until the policy keeps large rooms gathering): always gather',
  ),
  snapshotEverySteps: whole(
    'SNAPSHOT_EVERY_STEPS',
    500,
    [1, 10_000_000],
    'limit',
    'write a snapshot after this many steps…',
  ),
  snapshotEveryMs: whole(
    'SNAPSHOT_EVERY_MS',
    30_000,
    [100, 86_400_000],
    'limit',
    '…or this long after the first unsnapshotted step; a failed snapshot is retried after 1 s, 2, 4, … up to this',
  ),
  idleUnloadMs: whole(
    'IDLE_UNLOAD_MS',
    30_000,
    [0, 86_400_000],
    'limit',
    'unload a document this long after its last editor left',
  ),
  storeTimeoutMs: whole(
    'STORE_TIMEOUT_MS',
    2_000,
    [10, 600_000],
    'limit',
    'every store call fails (`unavailable`) after this long; with Redis, must be under `LEASE_MS`',
  ),
  shutdownTimeoutMs: whole(
    'SHUTDOWN_TIMEOUT_MS',
    10_000,
    [100, 600_000],
    'limit',
    'graceful shutdown gives up after this long',
  ),
  /// This node's name in logs, metrics, `x-scriptorium-node` and document leases.
  nodeId: text(
    'NODE_ID',
    hostname(),
    'process',
    "this node's name in document leases, logs and `x-scriptorium-node`",
    'host name',
  ),
  /// How long a document lease lasts without renewal (Redis store): a node that dies holds its
  /// documents this long at most; renewed three times per period.
  leaseMs: whole(
    'LEASE_MS',
    5_000,
    [300, 600_000],
    'limit',
    "document lease time with Redis: a dead node's documents are served elsewhere after at most this long",
  ),
  /// The HS256 secret and/or the PEM public key (RS256, ES256, EdDSA) of tokens; neither: open.
  authSecret: optional(
    'AUTH_SECRET',
    'process',
    'HS256 secret of the access tokens (32 characters at least); none: open mode',
  ),
  // PEM keys in one-line environment variables often carry their newlines as `\n`.
  authPublicKey: optional(
    'AUTH_PUBLIC_KEY',
    'process',
    'PEM public key for RS256/ES256/EdDSA access tokens: RSA of 2048 bits or more, EC P-256 or Ed25519',
    (raw) => raw.replace(/\\n/g, '\n'),
  ),
  /// The `aud` and `iss` claims every token must carry; null: not checked. For keys an
  /// identity service shares between applications.
  authAudience: optional(
    'AUTH_AUDIENCE',
    'process',
    'the `aud` every access token must carry (a string, or listed in an array); needs a key',
  ),
  authIssuer: optional(
    'AUTH_ISSUER',
    'process',
    'the `iss` every access token must carry; needs a key',
  ),
  /// `off`: open mode on purpose, which `NODE_ENV=production` requires.
  auth: choice(
    'AUTH',
    ['auto', 'off'],
    'auto',
    'process',
    '`off`: open mode on purpose (needed with `NODE_ENV=production` and no key)',
    '—',
  ),
  /// `production` refuses open mode unless `auth` is `off`; any value but `nodeEnvironments`'
  /// (`prod`, `Production`) is refused, not taken for not-production, which would skip that.
  nodeEnv: text(
    'NODE_ENV',
    'development',
    'process',
    '`development`, `production` or `test`, exactly; `production` refuses open mode unless `AUTH=off`',
  ),
  /// Browser origins admitted besides the server's own.
  allowedOrigins: list(
    'ALLOWED_ORIGINS',
    'process',
    "browser origins admitted besides the server's own; in open mode, also the host names it answers under besides local ones",
    (raw, env) => {
      try {
        return parseOrigins(raw);
      } catch (err) {
        throw new Error(`${env}: ${(err as Error).message}`);
      }
    },
  ),
  /// A bearer token `/metrics` and `/metrics/windows` require; null: open.
  metricsToken: optional(
    'METRICS_TOKEN',
    'process',
    'bearer token (16 characters at least) `/metrics` and `/metrics/windows` require',
  ),
  /// Whether metrics show document ids, or for each a label stable in the process, not reversible.
  metricsDocIds: toggle('METRICS_DOC_IDS', false, 'process', '`on` shows document ids in metrics'),
  metricsEnabled: toggle('METRICS', true, 'process', '`off` disables latency recording'),
  logLevel: choice(
    'LOG_LEVEL',
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    'info',
    'process',
    'pino level: `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`',
  ),
};

type Settings = typeof settings;

/// Everything the server can be told, one field per row of `settings`, with units in the
/// names. Built once by `loadConfig`, validated and frozen.
export type Config = {
  -readonly [K in keyof Settings]: Settings[K] extends Setting<infer T> ? T : never;
};

/// The names of the settings of one scope.
export type SettingsOf<S extends SettingScope> = {
  [K in keyof Settings]: Settings[K]['scope'] extends S ? K : never;
}[keyof Settings];

/// The settings a host may set through `createCollab`'s `limits`.
export type LimitSettings = Pick<Config, SettingsOf<'limit'>>;

/// Each setting's name and row, in the table's order.
export const settingRows = Object.entries(settings) as [keyof Config, Setting<unknown>][];

/// The default of every setting: what `npm start` runs with when nothing is set.
export const defaults: Readonly<Config> = Object.freeze(
  Object.fromEntries(settingRows.map(([name, row]) => [name, row.default])) as Config,
);

/// The default of every limit a host may set.
export const defaultLimits: Readonly<LimitSettings> = Object.freeze(
  Object.fromEntries(
    settingRows
      .filter(([, row]) => row.scope === 'limit')
      .map(([name, row]) => [name, row.default]),
  ) as LimitSettings,
);

/// The names of the standalone server's own settings, which `createCollab` refuses as limits.
export const processSettings: ReadonlySet<string> = new Set(
  settingRows.filter(([, row]) => row.scope === 'process').map(([name]) => name),
);

/// The limits of `config`: every setting but the standalone server's own, for `createCollab`.
export function limitsOf(config: Readonly<Config>): LimitSettings {
  return Object.fromEntries(
    settingRows.filter(([, row]) => row.scope === 'limit').map(([name]) => [name, config[name]]),
  ) as LimitSettings;
}
