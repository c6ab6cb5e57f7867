import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import { Server } from 'socket.io';
import type { Config } from '../config.js';
import { limitsOf } from '../settings.js';
import {
  createCollab,
  createMetricsRegistry,
  MetricsRecorder,
  type Collab,
  type Store,
} from '../index.js';
import type { ScriptoriumServer } from '../protocol/socket.js';
import { registerDocumentMetrics } from './document_metrics.js';
import { createHttpApp, finishHttpApp } from './http.js';
import { metricsRouter } from './metrics_http.js';
import {
  docIdRedactor,
  documentGuard,
  documentReadGuard,
  openReadGuard,
  openWriteGuard,
  metricsGuard,
  originCheck,
  tokenAuthenticate,
  verifierFor,
} from './access.js';
import { historyRouter } from './history_http.js';
import { createWebRouter } from './web.js';

/// A running Scriptorium server: HTTP and Socket.io on one port.
export interface Scriptorium {
  readonly http: HttpServer;
  readonly io: ScriptoriumServer;
  /// The embedded authority (what a host app would make with `createCollab`).
  readonly collab: Collab;
  readonly metrics: MetricsRecorder;
  /// Starts listening; resolves with the bound port (useful with port 0).
  listen(): Promise<number>;
  /// Graceful shutdown: refuses new connections, finishes in-flight batches, writes
  /// snapshots, tells every socket to reconnect later, closes the store. Bounded by
  /// `shutdownTimeoutMs`; resolves true when everything was saved in time.
  close(): Promise<boolean>;
}

/// Builds the server from a validated configuration and its dependencies: an express app
/// (health, `GET /docs/:id` and its history routes, metrics, dashboard, the web editor) and
/// Socket.io on one port, with the protocol from `createCollab`. Nothing listens until `listen()`. `metrics` may be
/// injected (tests with a fake clock); by default one is made from the configuration.
export function createScriptorium(
  config: Readonly<Config>,
  deps: { store: Store; log: Logger; metrics?: MetricsRecorder },
): Scriptorium {
  const { store, log } = deps;
  const { metricsEnabled, nodeId, allowedOrigins, metricsToken, metricsDocIds } = config;
  // Everything but the process's own settings is a limit of the collab.
  const limits = limitsOf(config);
  const verifier = verifierFor(config);
  const redact = metricsDocIds ? null : docIdRedactor();
  const metrics: MetricsRecorder =
    deps.metrics ??
    new MetricsRecorder(
      { enabled: metricsEnabled },
      {
        editors: (): number => collab.editors,
        documents: (): number => collab.stats().documents,
        logger: log,
      },
    );
  const collab = createCollab({
    store,
    logger: log,
    metrics,
    limits,
    nodeId,
    // Open mode is warned about at start by the entry point (which knows about AUTH=off).
    authenticate: verifier ? tokenAuthenticate(verifier) : null,
  });
  const app = createHttpApp({
    collab,
    storeKind: store.kind,
    nodeId,
    draining: () => closing !== null,
    healthCounts: !metricsToken,
    readGuard: verifier ? documentReadGuard(verifier) : openReadGuard(allowedOrigins),
  });
  app.use(
    historyRouter(collab, {
      read: verifier ? documentGuard(verifier, 'read') : openReadGuard(allowedOrigins),
      write: verifier ? documentGuard(verifier, 'write') : openWriteGuard(allowedOrigins),
    }),
  );
  const registry = metricsRegistry(metrics, collab, nodeId);
  app.use(
    metricsRouter(metrics, registry, {
      guard: metricsToken ? metricsGuard(metricsToken) : null,
      redact,
    }),
  );
  app.use(createWebRouter());
  finishHttpApp(app);
  const http = createServer(app);
  const io = socketServer(http, collab, allowedOrigins, verifier === null);
  collab.attach(io);
  logWindows(metrics, log, redact);

  let closing: Promise<boolean> | null = null;
  return {
    http,
    io,
    collab,
    metrics,
    listen() {
      return new Promise((resolve, reject) => {
        http.once('error', reject);
        http.listen(config.port, config.host, () => {
          http.off('error', reject);
          resolve((http.address() as AddressInfo).port);
        });
      });
    },
    close() {
      closing ??= shutdown(http, io, collab);
      return closing;
    },
  };
}

/// The Prometheus registry for /metrics: the recorder's windows, the document gauges, and
/// `scriptorium_node_info` naming this node.
function metricsRegistry(
  metrics: MetricsRecorder,
  collab: Collab,
  nodeId: string,
): ReturnType<typeof createMetricsRegistry> {
  const registry = createMetricsRegistry(metrics);
  registerDocumentMetrics(registry, collab);
  // Which node this is, for dashboards over several nodes (each node is scraped on its own).
  new Gauge({
    name: 'scriptorium_node_info',
    help: 'Always 1; its node label is this node (NODE_ID)',
    labelNames: ['node'],
    registers: [registry],
  }).set({ node: nodeId }, 1);
  return registry;
}

/// The Socket.io server on `http`, with the collab's socket options and the origin check.
function socketServer(
  http: HttpServer,
  collab: Collab,
  allowedOrigins: Config['allowedOrigins'],
  open: boolean,
): ScriptoriumServer {
  return new Server(http, {
    ...collab.socketOptions,
    // Browsers: only the server's own origin and ALLOWED_ORIGINS may open sockets (and make
    // cross-origin polling requests); clients without an Origin are not browsers.
    allowRequest: originCheck(allowedOrigins, open),
    ...(allowedOrigins.length > 0 ? { cors: { origin: allowedOrigins } } : {}),
  });
}

/// Logs one line per metrics window, in the units of /metrics/windows, with document ids
/// redacted when `redact` is given. A throwing logger must not break the window timer.
function logWindows(
  metrics: MetricsRecorder,
  log: Logger,
  redact: ReturnType<typeof docIdRedactor> | null,
): void {
  metrics.onWindow((window) => {
    // Nothing happened: no line (an idle server's log stays quiet).
    if (window.batchesReceived === 0) return;
    try {
      log.info({ window: redact ? redact(window) : window }, 'metrics window');
    } catch {
      // Logging is best effort.
    }
  });
}

/// Stops accepting connections, closes the collab (which saves and sends editors away), gives
/// the sent-away sockets a moment to flush, then closes Socket.io. Resolves with whether the
/// collab saved everything in time.
async function shutdown(http: HttpServer, io: ScriptoriumServer, collab: Collab): Promise<boolean> {
  // No new connections from here on; sockets already open stay until the collab sends
  // them away, after saving.
  http.close();
  const saved = await collab.close();
  // The sockets it sent away close once their last packets (acknowledgements of the
  // batches it finished, the `closing` notice) are written: `io.close` would discard what
  // is still queued, and its client would learn only on rejoining that its batch landed. A
  // moment for them.
  const drainedBy = performance.now() + 500;
  while (io.engine.clientsCount > 0 && performance.now() < drainedBy) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  // The engine's own sockets (handshakes in progress, other namespaces): bounded by the
  // same timeout as the rest, which `collab.close` has mostly used.
  await Promise.race([
    new Promise<void>((resolve) => io.close(() => resolve())),
    new Promise<void>((resolve) => setTimeout(resolve, 1000).unref()),
  ]);
  return saved;
}
