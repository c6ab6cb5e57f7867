import { resolve } from 'node:path';
import { pino } from 'pino';
import { createScriptorium } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { MemoryStore } from './memory_store.js';
import type { Store } from './store.js';

// The entry point: the one place that reads the environment.
let config: Readonly<Config>;
try {
  config = loadConfig({}, process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(`scriptorium: ${err.message}`);
    process.exit(1);
  }
  throw err;
}

const log = pino({ level: config.logLevel, base: { service: 'scriptorium' } });

async function openStore(): Promise<Store> {
  if (config.store === 'memory') {
    log.info('store: memory (documents are lost when the process exits)');
    return new MemoryStore();
  }
  if (config.redisUrl) {
    const { RedisStore } = await import('./redis_store.js');
    const store = new RedisStore({
      url: config.redisUrl,
      commandTimeoutMs: config.storeTimeoutMs,
      logger: log,
    });
    // Start even when Redis is down: loads and steps are refused with `unavailable` until it
    // answers, and the client reconnects by itself.
    await store.ready(config.storeTimeoutMs).catch(() => {
      log.warn(
        { url: redact(config.redisUrl!) },
        'Redis does not answer yet; retrying in the background',
      );
    });
    log.info({ url: redact(config.redisUrl) }, 'store: redis');
    return store;
  }
  const { FileStore } = await import('./file_store.js');
  const dir = resolve(config.dataDir);
  log.info({ dir }, 'store: file (set REDIS_URL to use Redis)');
  return new FileStore({ dataDir: dir });
}

function redact(url: string): string {
  return url.replace(/\/\/([^@/]*)@/, '//***@');
}

const store = await openStore();
const server = createScriptorium(config, { store, log });
const port = await server.listen();
const shown = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
log.info({ port, host: config.host }, `listening on http://${shown}:${port}`);

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    server.close().then(
      (saved) => process.exit(saved ? 0 : 1),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
