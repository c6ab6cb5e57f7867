/// Everything the server can be told, with units in the names. Built once by `loadConfig`,
/// validated and frozen; nothing else reads `process.env`.
export interface Config {
  port: number;
  host: string;
  /// `redis://…` to persist in Redis; null for the embedded file store under `dataDir`.
  redisUrl: string | null;
  dataDir: string;
  /// 'memory' keeps documents in this process only (tests, demos).
  store: 'auto' | 'memory';
  maxHistorySteps: number;
  maxStepsPerBatch: number;
  maxDocSize: number;
  maxRebaseSteps: number;
  maxMessageBytes: number;
  snapshotEverySteps: number;
  snapshotEveryMs: number;
  idleUnloadMs: number;
  storeTimeoutMs: number;
  shutdownTimeoutMs: number;
  metricsEnabled: boolean;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
}

/// The defaults: what `npm start` runs with when nothing is set.
export const defaults: Readonly<Config> = Object.freeze({
  port: 4000,
  host: '0.0.0.0',
  redisUrl: null,
  dataDir: './data',
  store: 'auto',
  maxHistorySteps: 10_000,
  maxStepsPerBatch: 1_000,
  maxDocSize: 4_000_000,
  maxRebaseSteps: 1_000,
  maxMessageBytes: 4 * 1024 * 1024,
  snapshotEverySteps: 500,
  snapshotEveryMs: 30_000,
  idleUnloadMs: 30_000,
  storeTimeoutMs: 2_000,
  shutdownTimeoutMs: 10_000,
  metricsEnabled: true,
  logLevel: 'info',
});

/// Environment variables and the config field each sets.
export const environment = {
  PORT: 'port',
  HOST: 'host',
  REDIS_URL: 'redisUrl',
  DATA_DIR: 'dataDir',
  STORE: 'store',
  MAX_HISTORY_STEPS: 'maxHistorySteps',
  MAX_STEPS_PER_BATCH: 'maxStepsPerBatch',
  MAX_DOC_SIZE: 'maxDocSize',
  MAX_REBASE_STEPS: 'maxRebaseSteps',
  MAX_MESSAGE_BYTES: 'maxMessageBytes',
  SNAPSHOT_EVERY_STEPS: 'snapshotEverySteps',
  SNAPSHOT_EVERY_MS: 'snapshotEveryMs',
  IDLE_UNLOAD_MS: 'idleUnloadMs',
  STORE_TIMEOUT_MS: 'storeTimeoutMs',
  SHUTDOWN_TIMEOUT_MS: 'shutdownTimeoutMs',
  METRICS: 'metricsEnabled',
  LOG_LEVEL: 'logLevel',
} as const satisfies Record<string, keyof Config>;

/// Thrown by `loadConfig` for a value it cannot accept; the message names the setting.
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

const integerRanges: Partial<Record<keyof Config, [number, number]>> = {
  port: [0, 65_535],
  maxHistorySteps: [1, 10_000_000],
  maxStepsPerBatch: [1, 100_000],
  maxDocSize: [16, 1_000_000_000],
  maxRebaseSteps: [0, 1_000_000],
  maxMessageBytes: [1024, 1024 * 1024 * 1024],
  snapshotEverySteps: [1, 10_000_000],
  snapshotEveryMs: [100, 86_400_000],
  idleUnloadMs: [0, 86_400_000],
  storeTimeoutMs: [10, 600_000],
  shutdownTimeoutMs: [100, 600_000],
};

const logLevels = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/// Builds the configuration from `overrides` (typed values, as tests pass them) and `env`
/// (strings, as the entry point passes `process.env`), over `defaults`. Throws `ConfigError`
/// for an unknown or invalid value; returns a frozen object.
export function loadConfig(
  overrides: Partial<Config> = {},
  env: Record<string, string | undefined> = {},
): Readonly<Config> {
  const config: Config = { ...defaults };
  for (const [name, field] of Object.entries(environment)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    (config as unknown as Record<string, unknown>)[field] = parseEnv(name, field, raw);
  }
  for (const [field, value] of Object.entries(overrides)) {
    if (!(field in defaults)) throw new ConfigError(`Unknown setting "${field}"`);
    if (value !== undefined) (config as unknown as Record<string, unknown>)[field] = value;
  }
  validate(config);
  return Object.freeze(config);
}

function parseEnv(name: string, field: keyof Config, raw: string): unknown {
  if (field in integerRanges) {
    if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
    return Number(raw);
  }
  if (field === 'metricsEnabled') {
    if (raw === 'on' || raw === 'true' || raw === '1') return true;
    if (raw === 'off' || raw === 'false' || raw === '0') return false;
    throw new ConfigError(`${name} must be on or off, got "${raw}"`);
  }
  return raw;
}

function validate(config: Config): void {
  for (const [field, [min, max]] of Object.entries(integerRanges) as [keyof Config, number[]][]) {
    const value = config[field];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min! || value > max!) {
      throw new ConfigError(`${field} must be a whole number from ${min} to ${max}, got ${value}`);
    }
  }
  if (typeof config.host !== 'string' || config.host === '') {
    throw new ConfigError('host must be a host name or address');
  }
  if (config.redisUrl !== null && !/^rediss?:\/\/./.test(config.redisUrl)) {
    throw new ConfigError(
      `REDIS_URL must start with redis:// or rediss://, got "${config.redisUrl}"`,
    );
  }
  if (typeof config.dataDir !== 'string' || config.dataDir === '') {
    throw new ConfigError('dataDir must be a directory path');
  }
  if (config.store !== 'auto' && config.store !== 'memory') {
    throw new ConfigError(`STORE must be auto or memory, got "${config.store}"`);
  }
  if (!logLevels.has(config.logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${[...logLevels].join(', ')}`);
  }
  if (typeof config.metricsEnabled !== 'boolean') {
    throw new ConfigError('metricsEnabled must be true or false');
  }
}
