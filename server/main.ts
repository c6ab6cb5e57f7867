import { writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { pino } from 'pino';
import { createScriptorium } from './app/app.js';
import { ConfigError, loadConfig, redactUrl, type Config } from './config.js';
import { FileStore, MemoryStore, RedisStore, type Store } from './index.js';

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

// JSON lines for log collectors; on a terminal, readable lines (pino-pretty, in a worker
// thread so that formatting never runs on the event loop).
const log = pino({
  level: config.logLevel,
  base: { service: 'scriptorium', node: config.nodeId },
  ...(process.stdout.isTTY
    ? { transport: { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l' } } }
    : {}),
});
if (config.authSecret === null && config.authPublicKey === null) {
  log.warn(
    config.auth === 'off'
      ? 'AUTH=off: open mode, anyone who can reach the server may read and write every document'
      : 'open mode (no AUTH_SECRET): anyone who can reach the server may read and write every document',
  );
}

// Kept to ask, at exit, whether file operations are still running (see `exit`).
let fileStore: FileStore | null = null;

/// How long after `shutdownTimeoutMs` the process exits even if the shutdown has not returned.
const shutdownGraceMs = 500;

/// Ends the process with `code`. `process.exit` first joins libuv's thread pool, so a file
/// operation stuck in a system call (a hung disk, a network mount gone away) would hold the
/// exit forever. When file operations are still running on a failed shutdown, the process
/// kills itself instead: the supervisor sees SIGKILL rather than exit code 1, a failure all the
/// same, and nothing acknowledged is lost (every acknowledged step was fsync'd).
function exit(code: number): void {
  if (code === 0 || !fileStore || fileStore.operationsInFlight === 0) process.exit(code);
  writeSync(
    2,
    `scriptorium: ${fileStore.operationsInFlight} file operation(s) still stuck; ` +
      'exiting with SIGKILL, since a normal exit would wait for them\n',
  );
  // pino writes through libuv's pool (its flush callback does not wait for that write), and
  // nothing is written after SIGKILL: give what the shutdown logged a moment to get out.
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), 200);
}

let stopping = false;
/// Set by an uncaught exception: the shutdown still saves what it can, but the exit code is 1
/// whatever it saved, so that a supervisor restarting on failure (systemd `on-failure`,
/// Docker, Kubernetes) brings the process back.
let crashed = false;
/// True once the server listens: from then on a signal starts the graceful shutdown.
let listening = false;
/// The first signal that arrived during start-up, acted on once start-up reaches a point it can
/// stop from (the store opened, or the server listening).
let startupStop: string | null = null;
let onStartupStop: () => void = () => {};
/// Resolves when a signal arrives during start-up: what start-up waits for (a Redis that does
/// not answer yet) stops waiting.
const startupStopped = new Promise<void>((resolve) => (onStartupStop = resolve));
// Installed before anything is awaited. As PID 1 (node in a container without an init) a
// signal without a handler is ignored, not fatal: a SIGTERM while start-up waited for Redis
// was lost, and the server then served until it was killed.
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping || startupStop !== null) {
      log.warn({ signal }, 'second signal: exiting without waiting for the shutdown');
      exit(1);
      return;
    }
    if (!listening) {
      startupStop = signal;
      log.info({ signal }, 'stopping once start-up ends');
      onStartupStop();
      return;
    }
    stop(signal);
  });
}

/// Where Redis is, for logs: the URL or the cluster's seed nodes, passwords hidden.
function redisWhere(): string {
  return config.redisUrl !== null
    ? redactUrl(config.redisUrl)
    : config.redisClusterNodes.map(redactUrl).join(',');
}

/// Stops the process for Redis's refusal of the configured credentials or database number: a
/// configuration error, which no retry mends.
async function refuseRedisUrl(store: RedisStore, refused: string): Promise<never> {
  await store.close().catch(() => {});
  const setting = config.redisClusterNodes.length > 0 ? 'REDIS_CLUSTER_NODES' : 'REDIS_URL';
  const what = /^ERR DB index/.test(refused) ? 'database number' : 'credentials';
  console.error(`scriptorium: ${setting}: Redis refused its ${what} (${refused.split('\n')[0]})`);
  process.exit(1);
}

/// Until Redis first answers, looks once a second for its refusal of the URL: a refusal that
/// comes after the start-up wait (a slow Redis, a loaded machine) stops the process as one
/// within it does, instead of leaving it running and never ready.
async function watchForRefusal(store: RedisStore): Promise<void> {
  while (!stopping) {
    try {
      await store.ready(1_000);
      return;
    } catch {
      // Not connected yet.
    }
    const refused = store.urlRefused;
    if (refused !== null && !stopping) await refuseRedisUrl(store, refused);
  }
}

async function openStore(): Promise<Store> {
  if (config.store === 'memory') {
    log.info('store: memory (documents are lost when the process exits)');
    return new MemoryStore();
  }
  const cluster = config.redisClusterNodes.length > 0;
  if (config.redisUrl || cluster) {
    const store = new RedisStore({
      ...(cluster
        ? { cluster: { rootNodes: config.redisClusterNodes.map((url) => ({ url })) } }
        : { url: config.redisUrl! }),
      minReplicasAcked: config.redisMinReplicasAcked,
      keyPrefix: config.redisKeyPrefix,
      commandTimeoutMs: config.storeTimeoutMs,
      logger: log,
    });
    // Start even when Redis is down: loads and steps are refused with `unavailable` until it
    // answers, and the client reconnects by itself.
    const answered = await Promise.race([
      store.ready(config.storeTimeoutMs).then(
        () => true,
        () => false,
      ),
      startupStopped.then(() => false),
    ]);
    // Wrong credentials, or a database number the server does not have, are configuration
    // errors, which no retry mends: stop, as for a bad setting, rather than start and stay not
    // ready for good.
    const refused = answered || startupStop !== null ? null : store.urlRefused;
    if (refused !== null) await refuseRedisUrl(store, refused);
    if (!answered && startupStop === null) {
      log.warn({ url: redisWhere() }, 'Redis does not answer yet; retrying in the background');
      void watchForRefusal(store);
    }
    log.info(
      { url: redisWhere(), minReplicasAcked: config.redisMinReplicasAcked },
      cluster ? 'store: redis cluster' : 'store: redis',
    );
    return store;
  }
  const dir = resolve(config.dataDir);
  try {
    // Takes the directory's lock: a second server on it stops here, before it listens.
    fileStore = new FileStore({ dataDir: dir, timeoutMs: config.storeTimeoutMs, logger: log });
  } catch (err) {
    console.error(`scriptorium: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
  log.info({ dir }, 'store: file (set REDIS_URL to use Redis)');
  return fileStore;
}

/// Closes `store`, waiting at most `storeTimeoutMs` for it.
async function closeStore(store: Store): Promise<void> {
  await Promise.race([
    store.close().catch(() => undefined),
    // Not unref'd: with nothing else pending Node would exit 0 before the caller's exit.
    new Promise((resolve) => setTimeout(resolve, config.storeTimeoutMs)),
  ]);
}

const store = await openStore();
if (startupStop !== null) {
  // Nobody has connected: nothing to save or tell, only the store to close (the file store's
  // lock released).
  await closeStore(store);
  log.info({ signal: startupStop }, 'stopped during start-up');
  exit(0);
}
const server = createScriptorium(config, { store, log });
let port: number;
try {
  port = await server.listen();
} catch (err) {
  // A port in use, an address not of this machine, a name that does not resolve: one line,
  // and the store closed first, so the file store's lock is not left behind.
  const { code, message } = err as NodeJS.ErrnoException;
  console.error(`scriptorium: cannot listen on ${config.host}:${config.port} (${code ?? message})`);
  await closeStore(store);
  process.exit(1);
}
listening = true;
const shown = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
log.info({ port, host: config.host }, `listening on http://${shown}:${port}`);
// A signal while it started: nobody can have joined yet, but the shutdown is the one path that
// closes a server that listens.
if (startupStop !== null) stop(startupStop);

/// The graceful shutdown, once: saves, tells editors, closes the store, then exits 0 when
/// everything was saved and nothing crashed, 1 otherwise.
function stop(reason: string): void {
  stopping = true;
  log.info({ signal: reason }, 'stopping');
  // A backstop: `close` bounds itself by the same timeout, so this fires only if something
  // in it does not (a bug, or an event loop blocked for long). Not unref'd: should the
  // shutdown hang with nothing else pending, Node would otherwise exit with code 0.
  setTimeout(() => {
    log.error(
      { shutdownTimeoutMs: config.shutdownTimeoutMs },
      'shutdown did not finish in time; exiting',
    );
    exit(1);
  }, config.shutdownTimeoutMs + shutdownGraceMs);
  server.close().then(
    (saved) => exit(saved && !crashed ? 0 : 1),
    (err: unknown) => {
      log.error({ err }, 'shutdown failed');
      exit(1);
    },
  );
}

// Last lines of defence. Every handler, timer and store callback is guarded, so reaching
// these is a bug. A rejection nobody handled leaves no state half-changed (the code that
// awaited it has already stopped): it is logged and the process keeps serving every other
// document, instead of Node's default of ending the process for all of them. A synchronous
// throw that escaped may have left anything half-done: logged, then a normal shutdown, which
// saves what it can, and exit code 1 (a supervisor restarts the process).
process.on('unhandledRejection', (reason: unknown) => {
  log.error({ err: reason }, 'unhandled rejection (a bug): the process keeps serving');
});
process.on('uncaughtException', (err: unknown) => {
  crashed = true;
  // Another one during the shutdown: that shutdown goes on, bounded by its backstop.
  if (stopping) {
    log.fatal({ err }, 'uncaught exception (a bug) while shutting down');
    return;
  }
  log.fatal({ err }, 'uncaught exception (a bug): shutting down, then exiting 1');
  stop('uncaughtException');
});
