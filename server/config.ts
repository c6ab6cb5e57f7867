import { createPublicKey, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';
import proxyAddr from 'proxy-addr';
import { defaults, settingRows, settings, type Config } from './settings.js';

export { defaults, type Config } from './settings.js';

/// Environment variables and the config field each sets.
export const environment: Readonly<Record<string, keyof Config>> = Object.freeze(
  Object.fromEntries(settingRows.map(([field, row]) => [row.env, field])),
);

/// Thrown by `loadConfig` for a value it cannot accept; the message names the setting.
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/// The `NODE_ENV` values the server accepts (unset means `development`).
export const nodeEnvironments: readonly string[] = ['development', 'production', 'test'];

/// Dot-separated labels of letters, digits and inner hyphens (RFC 1123), at most 253 in all.
const hostNamePattern =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

const logLevels: ReadonlySet<string> = new Set(settings.logLevel.values);

/// Builds the configuration from `overrides` (typed values, as tests pass them) and `env`
/// (strings, as the entry point passes `process.env`), over `defaults`. Throws `ConfigError`
/// for an unknown or invalid value, naming the setting as its caller knows it: with `env`, by
/// its environment variable (`PORT`), unless `overrides` set it; without, by its field
/// (`port`, as `createCollab`'s `limits` spell it). Returns a frozen object.
export function loadConfig(
  overrides: Partial<Config> = {},
  env?: Record<string, string | undefined>,
): Readonly<Config> {
  const config: Config = { ...defaults };
  const names = new Map<keyof Config, string>();
  for (const [name, field] of Object.entries(environment)) {
    if (env === undefined) break;
    // Unset ones too: an operator meets the default of a setting they left alone under the
    // same name (MAX_DOC_DEPTH=100 is refused for MAX_JSON_DEPTH's default).
    names.set(field, name);
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    (config as unknown as Record<string, unknown>)[field] = parseEnv(name, field, raw);
  }
  for (const [field, value] of Object.entries(overrides)) {
    if (!(field in defaults)) throw new ConfigError(`Unknown setting "${field}"`);
    if (value !== undefined) {
      (config as unknown as Record<string, unknown>)[field] = value;
      names.delete(field as keyof Config);
    }
  }
  validate(config, (field) => names.get(field) ?? field);
  return Object.freeze(config);
}

function parseEnv(name: string, field: keyof Config, raw: string): unknown {
  try {
    return settings[field].parse(raw, name);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

/// Names a setting in a message: by its environment variable when the config came from one,
/// by its field otherwise (see `loadConfig`).
type SettingName = (field: keyof Config) => string;

/// Throws `ConfigError` for the first setting `config` cannot run with; `name` gives the name
/// a message calls a setting by. The checks run in this order, one concern each.
function validate(config: Config, name: SettingName): void {
  const redis = config.redisUrl !== null || config.redisClusterNodes.length > 0;
  checkRanges(config, name);
  checkHost(config);
  checkRedis(config, name, redis);
  checkNodeId(config, name);
  checkAuth(config, name);
  checkNodeEnv(config);
  checkHttp(config, name);
  checkStore(config, name, redis);
  checkLogging(config, name);
  checkTrustProxy(config, name);
  checkCrossLimits(config, name, redis);
}

/// Every numeric setting is a whole number inside its row's range.
function checkRanges(config: Config, name: SettingName): void {
  for (const [field, { range }] of settingRows) {
    if (range === null) continue;
    const [min, max] = range;
    const value = config[field];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw new ConfigError(
        `${name(field)} must be a whole number from ${min} to ${max}, got ${value}`,
      );
    }
  }
}

/// HOST is an IP address or an RFC 1123 host name.
function checkHost(config: Config): void {
  if (
    typeof config.host !== 'string' ||
    (isIP(config.host) === 0 && !hostNamePattern.test(config.host))
  ) {
    throw new ConfigError(`HOST must be an IP address or a host name, got "${config.host}"`);
  }
}

/// The Redis URLs are ones node-redis reads as one server (a cluster's without a database),
/// one Redis or a cluster but not both, replicas asked for only with Redis, and a key prefix
/// that leaves the document id's hash tag in place. `redis` is whether either is set.
function checkRedis(config: Config, name: SettingName, redis: boolean): void {
  if (config.redisUrl !== null) checkRedisUrl(config.redisUrl);
  for (const node of config.redisClusterNodes) {
    checkRedisUrl(node, name('redisClusterNodes'));
    // A cluster has database 0 only.
    if (/^[^/]*\/\/[^/]*\/./.test(node)) {
      throw new ConfigError(
        `${name('redisClusterNodes')} takes no /<database number>, got "${redactUrl(node)}"`,
      );
    }
  }
  if (config.redisUrl !== null && config.redisClusterNodes.length > 0) {
    throw new ConfigError(
      'REDIS_URL contradicts REDIS_CLUSTER_NODES: one Redis or a Redis Cluster. Unset one of them',
    );
  }
  if (config.redisMinReplicasAcked > 0 && !redis) {
    throw new ConfigError(
      `${name('redisMinReplicasAcked')} needs REDIS_URL or REDIS_CLUSTER_NODES: the file store has no replicas`,
    );
  }
  // No braces: a key's `{hash tag}` is the document id's, and a brace before it would move it.
  if (
    typeof config.redisKeyPrefix !== 'string' ||
    !/^[A-Za-z0-9._:-]{1,64}$/.test(config.redisKeyPrefix)
  ) {
    throw new ConfigError(
      `${name('redisKeyPrefix')} must be 1–64 characters of A-Z a-z 0-9 . _ : -, got "${config.redisKeyPrefix}"`,
    );
  }
}

/// NODE_ID is 1–64 characters safe in a lease holder's name.
function checkNodeId(config: Config, name: SettingName): void {
  if (typeof config.nodeId !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(config.nodeId)) {
    throw new ConfigError(
      `${name('nodeId')} must be 1–64 characters of A-Z a-z 0-9 . _ -, got "${config.nodeId}"`,
    );
  }
}

/// The secrets (AUTH_*, METRICS_TOKEN) are non-empty and long enough, the public key is one
/// the verifier can use, and AUTH and the claims agree with the keys given.
function checkAuth(config: Config, name: SettingName): void {
  for (const field of [
    'authSecret',
    'authPublicKey',
    'authAudience',
    'authIssuer',
    'metricsToken',
  ] as const) {
    const value = config[field];
    if (value !== null && (typeof value !== 'string' || value === '')) {
      throw new ConfigError(`${name(field)} must be a non-empty string when set`);
    }
  }
  // A short HS256 secret can be found by brute force from any token it signed.
  if (config.authSecret !== null && config.authSecret.length < 32) {
    throw new ConfigError('AUTH_SECRET must be at least 32 characters (e.g. openssl rand -hex 32)');
  }
  if (config.authPublicKey !== null && !config.authPublicKey.includes('PUBLIC KEY-----')) {
    throw new ConfigError('AUTH_PUBLIC_KEY must be a PEM public key (-----BEGIN PUBLIC KEY-----)');
  }
  // Parsed here, not only when the verifier is built: a damaged key must be one clear line at
  // start, before any store is opened, not a stack trace from deep inside the server.
  if (config.authPublicKey !== null) {
    let key: KeyObject;
    try {
      key = createPublicKey(config.authPublicKey);
    } catch (err) {
      throw new ConfigError(
        `AUTH_PUBLIC_KEY is not a readable PEM public key (${(err as Error).message})`,
      );
    }
    checkVerifierKey(key);
  }
  if (config.metricsToken !== null && config.metricsToken.length < 16) {
    throw new ConfigError('METRICS_TOKEN must be at least 16 characters');
  }
  if (config.auth !== 'auto' && config.auth !== 'off') {
    throw new ConfigError(`AUTH must be off (or unset), got "${config.auth}"`);
  }
  const keyed = config.authSecret !== null || config.authPublicKey !== null;
  if (config.auth === 'off' && keyed) {
    throw new ConfigError(
      'AUTH=off contradicts AUTH_SECRET / AUTH_PUBLIC_KEY: set one or the other',
    );
  }
  // In open mode no token is read: a required claim there would only look like a check.
  if (!keyed && (config.authAudience !== null || config.authIssuer !== null)) {
    throw new ConfigError('AUTH_AUDIENCE and AUTH_ISSUER need AUTH_SECRET or AUTH_PUBLIC_KEY');
  }
}

/// NODE_ENV is a known one, and production runs with keys unless AUTH=off says open.
function checkNodeEnv(config: Config): void {
  const keyed = config.authSecret !== null || config.authPublicKey !== null;
  if (!nodeEnvironments.includes(config.nodeEnv)) {
    throw new ConfigError(
      `NODE_ENV must be ${nodeEnvironments.join(', ')} (or unset), got "${config.nodeEnv}"`,
    );
  }
  if (config.nodeEnv === 'production' && !keyed && config.auth !== 'off') {
    throw new ConfigError(
      'NODE_ENV=production needs AUTH_SECRET (or AUTH_PUBLIC_KEY): without them anyone can read and write every document. Set AUTH=off to run open on purpose.',
    );
  }
}

/// ALLOWED_ORIGINS is a list.
function checkHttp(config: Config, name: SettingName): void {
  if (!Array.isArray(config.allowedOrigins)) {
    throw new ConfigError(`${name('allowedOrigins')} must be a list of origins`);
  }
}

/// DATA_DIR is a path and STORE a known value that does not contradict Redis.
function checkStore(config: Config, name: SettingName, redis: boolean): void {
  if (typeof config.dataDir !== 'string' || config.dataDir === '') {
    throw new ConfigError(`${name('dataDir')} must be a directory path`);
  }
  if (config.store !== 'auto' && config.store !== 'memory') {
    throw new ConfigError(`STORE must be auto or memory, got "${config.store}"`);
  }
  // One of them is a mistake, and taking STORE would lose every document at exit while the
  // operator believes they are in Redis.
  if (config.store === 'memory' && redis) {
    throw new ConfigError(
      'STORE=memory contradicts REDIS_URL: documents would be kept in memory only and lost at exit. Unset one of them',
    );
  }
}

/// LOG_LEVEL is pino's, and the metrics switch a boolean.
function checkLogging(config: Config, name: SettingName): void {
  if (!logLevels.has(config.logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${[...logLevels].join(', ')}`);
  }
  if (typeof config.metricsEnabled !== 'boolean') {
    throw new ConfigError(`${name('metricsEnabled')} must be true or false`);
  }
}

/// TRUST_PROXY is a list proxy-addr compiles, and not one that trusts every peer.
function checkTrustProxy(config: Config, name: SettingName): void {
  if (!Array.isArray(config.trustProxy) || !config.trustProxy.every(isProxyAddress)) {
    throw new ConfigError(
      `${name('trustProxy')} must be a comma list of addresses, CIDR ranges, loopback, linklocal or uniquelocal`,
    );
  }
  // Compiled here as the admission will compile it: proxy-addr refuses more than the check
  // above (a /0 range, which would trust every peer), and its TypeError thrown from inside the
  // server came after the store was opened (the file store's lock left behind).
  try {
    proxyAddr.compile([...config.trustProxy]);
  } catch (err) {
    const everyone = config.trustProxy.some((entry) => /\/0+$/.test(entry));
    throw new ConfigError(
      `${name('trustProxy')}: ${(err as Error).message}` +
        (everyone
          ? " (a /0 range would believe every peer's X-Forwarded-For: list the proxies)"
          : ''),
    );
  }
}

/// The limits that bound each other: a document fits a socket's buffer, an attribute a
/// message, a lease renewal the lease, and a whole document the JSON depth gate.
function checkCrossLimits(config: Config, name: SettingName, redis: boolean): void {
  // A whole document must fit in one socket's buffer (the answer to a join), and its largest
  // attribute in one message.
  if (config.maxSocketBufferBytes < config.maxDocBytes) {
    throw new ConfigError(
      `${name('maxSocketBufferBytes')} (${config.maxSocketBufferBytes}) must be at least ${name('maxDocBytes')} (${config.maxDocBytes})`,
    );
  }
  if (config.maxAttributeBytes > config.maxMessageBytes) {
    throw new ConfigError(
      `${name('maxAttributeBytes')} (${config.maxAttributeBytes}) must be at most ${name('maxMessageBytes')} (${config.maxMessageBytes}), or an attribute it allows could never be sent`,
    );
  }
  // A lease renewal is a store call: one that may wait as long as the lease lasts could keep
  // editors on a document after the lease lapsed and another node took it (their writes are
  // fenced, but they would be answered by a copy that no longer has the last word).
  if (redis && config.storeTimeoutMs >= config.leaseMs) {
    throw new ConfigError(
      `${name('storeTimeoutMs')} (${config.storeTimeoutMs}) must be less than ${name('leaseMs')} (${config.leaseMs}) with REDIS_URL: a lease renewal could wait past the lease`,
    );
  }
  if (config.maxJsonDepth < 2 * config.maxDocDepth + 8) {
    throw new ConfigError(
      `${name('maxJsonDepth')} (${config.maxJsonDepth}) must be at least 2 × ${name('maxDocDepth')} + 8 (${2 * config.maxDocDepth + 8}), or a document could not be sent whole`,
    );
  }
}

/// Throws `ConfigError` unless `key` is one the token verifier can check a signature with:
/// RSA of 2048 bits or more (RS256; jose refuses shorter), EC P-256 (ES256) or Ed25519 (EdDSA),
/// the algorithms server/protocol/auth.ts allows. Any other key (P-384, X25519, DSA) parses
/// and then has every token refused as `unauthorized`, which looks like a client's fault.
function checkVerifierKey(key: KeyObject): void {
  const type = key.asymmetricKeyType;
  const details = key.asymmetricKeyDetails ?? {};
  if (type === 'rsa' && (details.modulusLength ?? 0) >= 2048) return;
  if (type === 'ec' && details.namedCurve === 'prime256v1') return;
  if (type === 'ed25519') return;
  const found =
    type === 'rsa'
      ? `an RSA key of ${details.modulusLength} bits`
      : type === 'ec'
        ? `an EC key on ${details.namedCurve}`
        : `a key of type ${type}`;
  throw new ConfigError(
    `AUTH_PUBLIC_KEY must be an RSA key of 2048 bits or more (RS256), EC P-256 (ES256) or Ed25519 (EdDSA), got ${found}: no token could be verified with it`,
  );
}

/// `url` with anything between `//` and the last `@` (user and password) shown as `***`: for
/// messages and logs. Up to the last `@`, not the first `/`: a password with an unencoded `/` or
/// `#` is what makes a URL unreadable in the first place.
export function redactUrl(url: string): string {
  // [\s\S], not '.': a password may hold a newline, which the URL parser drops.
  return url.replace(/\/\/[\s\S]*@/, '//***@');
}

/// Throws `ConfigError` unless node-redis can read `url` as one server: redis: or rediss:, a
/// host, a port from 1 to 65535, a database that is a whole number, nothing after `?` or `#`
/// (node-redis ignores them; a `#` is most often a password's, unencoded). node-redis itself
/// throws a TypeError at connect whose message quotes the whole URL, password and all, and a
/// database it cannot parse only when the client is created: both are stopped here instead.
function checkRedisUrl(url: unknown, setting = 'REDIS_URL'): void {
  const shown = typeof url === 'string' ? redactUrl(url) : String(url);
  const refuse = (why: string): never => {
    throw new ConfigError(`${setting} ${why}, got "${shown}"`);
  };
  if (typeof url !== 'string') return refuse('must be a string');
  // Before the URL parser, whose message for a port out of range is no better than for a typo.
  const authority = url.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\//, '');
  const port = /^[^/?#]*:(\d+)(?:[/?#]|$)/.exec(authority.slice(authority.lastIndexOf('@') + 1));
  if (port && (Number(port[1]) < 1 || Number(port[1]) > 65_535)) {
    return refuse('must have a port from 1 to 65535');
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return refuse(
      'is not a URL (redis://[user:password@]host:port[/db]; a password with / # ? @ % or : must be percent-encoded)',
    );
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    return refuse('must start with redis:// or rediss://');
  }
  if (parsed.hostname === '') return refuse('must name a host');
  if (parsed.port === '0') return refuse('must have a port from 1 to 65535');
  if (parsed.search !== '' || parsed.hash !== '') {
    return refuse('must not have ? or # (a password with them must be percent-encoded)');
  }
  const db = parsed.pathname.slice(1);
  if (db !== '' && (!/^\d{1,9}$/.test(db) || parsed.pathname[0] !== '/')) {
    return refuse('may end with /<database number> only');
  }
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    return refuse('has a user or password with a % that is not an escape (write %25)');
  }
}

const namedRanges = new Set(['loopback', 'linklocal', 'uniquelocal']);

function isProxyAddress(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  if (namedRanges.has(value)) return true;
  const [address, bits, extra] = value.split('/');
  if (extra !== undefined || address === undefined || isIP(address) === 0) return false;
  if (bits === undefined) return true;
  const max = isIP(address) === 4 ? 32 : 128;
  return /^\d+$/.test(bits) && Number(bits) <= max;
}
