import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Server } from 'socket.io';
import { createMetricsRegistry, MetricsRecorder } from '../../metrics/index.js';
import type { Config } from './config.js';
import { Admission } from '../protocol/admission.js';
import { attachProtocol } from '../protocol/connection.js';
import type { ScriptoriumServer } from '../protocol/socket.js';
import { createHttpApp, finishHttpApp } from './http.js';
import { metricsRouter } from './metrics_http.js';
import type { RoomTransport } from '../core/room.js';
import { registerRoomMetrics } from '../core/room_metrics.js';
import { Rooms } from '../core/rooms.js';
import type { Store } from '../stores/store.js';
import { createWebRouter } from './web.js';

/// A running Scriptorium server: HTTP and Socket.io on one port.
export interface Scriptorium {
  readonly http: HttpServer;
  readonly io: ScriptoriumServer;
  readonly rooms: Rooms;
  readonly metrics: MetricsRecorder;
  /// Starts listening; resolves with the bound port (useful with port 0).
  listen(): Promise<number>;
  /// Graceful shutdown: refuses new connections, finishes in-flight batches, writes
  /// snapshots, tells every socket to reconnect later, closes the store. Bounded by
  /// `shutdownTimeoutMs`; resolves true when everything was saved in time.
  close(): Promise<boolean>;
}

/// Builds the server from a validated configuration and its dependencies. Nothing listens
/// until `listen()`. `metrics` may be injected (tests with a fake clock); by default one is
/// made from the configuration.
export function createScriptorium(
  config: Readonly<Config>,
  deps: { store: Store; log: Logger; metrics?: MetricsRecorder },
): Scriptorium {
  const { store, log } = deps;
  const metrics: MetricsRecorder =
    deps.metrics ??
    new MetricsRecorder(
      { enabled: config.metricsEnabled },
      { editors: (): number => io.engine.clientsCount, documents: (): number => rooms.size },
    );
  // The observer is left out entirely when metrics are off, so the hot path skips the call.
  const observer = metrics.config.enabled ? metrics : null;
  let draining = false;
  const isDraining = () => draining;

  let io!: ScriptoriumServer;
  const transport: RoomTransport = {
    broadcast(docId, message) {
      io.to(docId).emit('steps', message);
    },
    evict(docId, code, message) {
      io.to(docId).emit('closing', { code, message, retryAfterMs: 0 });
      io.in(docId).disconnectSockets(true);
    },
  };
  const rooms: Rooms = new Rooms({
    store,
    transport,
    observer,
    log,
    options: config,
  });
  const app = createHttpApp({
    rooms,
    storeKind: store.kind,
    draining: isDraining,
    sockets: () => io.engine.clientsCount,
  });
  const registry = createMetricsRegistry(metrics);
  registerRoomMetrics(registry, rooms);
  app.use(metricsRouter(metrics, registry));
  app.use(createWebRouter());
  finishHttpApp(app);
  const http = createServer(app);
  io = new Server(http, {
    // The engine's hard cap closes the connection; below it, the payload gate answers a
    // message over `maxMessageBytes` with a code (its size is measured after parsing, so the
    // cap leaves room for JSON escapes).
    maxHttpBufferSize: 2 * config.maxMessageBytes,
    // Steps are small and latency-bound; compressing them costs more than it saves.
    perMessageDeflate: false,
    httpCompression: false,
    cors: { origin: true },
  });
  const stopProtocol = attachProtocol(io, rooms, log, isDraining, observer, {
    json: {
      maxDepth: config.maxJsonDepth,
      maxBytes: config.maxMessageBytes,
      maxStringBytes: config.maxAttributeBytes,
    },
    admission: new Admission(config),
    batchesPerSecond: config.batchesPerSecond,
    batchesBurst: config.batchesBurst,
    pullsPerSecond: config.pullsPerSecond,
    pullsBurst: config.pullsBurst,
    maxProtocolErrors: config.maxProtocolErrors,
    maxSocketBufferBytes: config.maxSocketBufferBytes,
  });
  // One line per window, in the units of /metrics/windows. A throwing logger must not break
  // the window timer.
  metrics.onWindow((window) => {
    try {
      log.info({ window }, 'metrics window');
    } catch {
      // Logging is best effort.
    }
  });

  let closing: Promise<boolean> | null = null;
  return {
    http,
    io,
    rooms,
    metrics,
    listen() {
      return new Promise((resolve, reject) => {
        http.once('error', reject);
        http.listen(config.port, config.host, () => {
          http.off('error', reject);
          metrics.start();
          resolve((http.address() as AddressInfo).port);
        });
      });
    },
    close() {
      closing ??= shutdown();
      return closing;
    },
  };

  async function shutdown(): Promise<boolean> {
    // One budget for everything below: a wedged document (a hung disk, a store that does not
    // answer) must not hold the process past it, at any step.
    const deadline = performance.now() + config.shutdownTimeoutMs;
    const inTime = <T>(promise: Promise<T>, late: T): Promise<T> => {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<T>((resolve) => {
        timer = setTimeout(() => resolve(late), Math.max(0, deadline - performance.now()));
      });
      return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
    };
    draining = true;
    // No new connections from here on; sockets already open stay until they are told to go.
    http.close();
    log.info('shutting down: finishing in-flight batches and writing snapshots');
    const saved = await inTime(
      rooms.flushAll().then((failed) => failed === 0),
      false,
    );
    if (!saved) log.warn('shutdown: not every document could be saved in time');
    io.emit('closing', {
      code: 'shutting-down',
      message: 'The server is restarting: reconnect in a moment',
      retryAfterMs: 1000,
    });
    stopProtocol();
    io.disconnectSockets(true);
    rooms.closeAll();
    metrics.stop();
    const closed = await inTime(
      Promise.all([
        new Promise<void>((resolve) => io.close(() => resolve())),
        store.close().then(
          () => true,
          (err: unknown) => {
            log.warn({ err }, 'store close failed');
            return false;
          },
        ),
      ]).then(([, storeClosed]) => storeClosed),
      false,
    );
    // A store that could not close may still have writes running: not everything is saved.
    if (!closed) log.warn('shutdown: the store did not close cleanly in time');
    return saved && closed;
  }
}
