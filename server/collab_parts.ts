import { randomUUID } from 'node:crypto';
import type { Schema } from 'prosemirror-model';
import { pino, type Logger } from 'pino';
import { MetricsRecorder } from '../metrics/index.js';
import type { Config } from './config.js';
import { roomHooks } from './collab_hooks.js';
import type { CheckedOptions, CollabOptions } from './collab_options.js';
import { RetentionRunner } from './history/retention_runner.js';
import { Rooms } from './rooms/registry.js';
import type { RoomTransport } from './rooms/room_options.js';
import { Admission } from './protocol/admission.js';
import { ClientOwners } from './protocol/client_owners.js';
import { EngineGuard } from './protocol/engine_guard.js';
import { roomOf, type Authenticate, type ScriptoriumNamespace } from './protocol/socket.js';
import { WriteCork } from './protocol/write_cork.js';
import { MemoryStore } from './stores/memory_store.js';
import type { Store } from './stores/store.js';

/// The Socket.io server options a collab's limits need (`Collab.socketOptions`).
export interface SocketOptions {
  maxHttpBufferSize: number;
  perMessageDeflate: false;
  httpCompression: false;
  connectTimeout: number;
}

/// Everything one collab is made of, shared by its attach, its public methods and its shutdown.
/// `namespaces` and `stops` grow with each `attach`; `state.draining` turns true at `close`.
export interface CollabParts {
  readonly config: Readonly<Config>;
  readonly schema: Schema;
  readonly store: Store;
  readonly log: Logger;
  readonly metrics: MetricsRecorder;
  /// The recorder the hot path calls, or null when metrics are off (so it skips the call).
  readonly observer: MetricsRecorder | null;
  readonly rooms: Rooms;
  readonly admission: Admission;
  readonly owners: ClientOwners;
  readonly guard: EngineGuard;
  readonly socketOptions: SocketOptions;
  /// The host's hook; undefined (open mode, warned about) and null (open on purpose) differ.
  readonly authenticate: Authenticate | null | undefined;
  readonly namespaces: ScriptoriumNamespace[];
  readonly stops: (() => void)[];
  readonly state: { draining: boolean };
  /// The wall clock of the history (`CollabOptions.clock`).
  readonly clock: () => number;
  /// Thins each document's history after its snapshots.
  readonly retention: RetentionRunner;
  /// Connected editors over every attached namespace.
  editors(): number;
}

/// Builds a collab's parts from its checked options: the store (a `MemoryStore` by default),
/// the logger, the metrics recorder, the document registry with its transport and leases, and
/// the admission and Engine.IO guards. Throws nothing the options check has not already caught.
export function buildParts(options: CollabOptions, checked: CheckedOptions): CollabParts {
  const { config, schema, schemaVersion } = checked;
  const store: Store = options.store ?? new MemoryStore();
  const log = options.logger ?? pino({ level: 'warn', base: { service: 'scriptorium' } });
  const namespaces: ScriptoriumNamespace[] = [];
  const editors = () => namespaces.reduce((sum, nsp) => sum + nsp.sockets.size, 0);
  const metrics: MetricsRecorder =
    options.metrics ||
    new MetricsRecorder(
      { enabled: options.metrics !== false },
      { editors, documents: (): number => rooms.size, logger: log },
    );
  const clock = options.clock ?? Date.now;
  const retention = new RetentionRunner({
    store,
    schema,
    schemaVersion,
    limits: config,
    clock,
    log,
  });
  // Left out entirely when metrics are off, so the hot path skips the call.
  const observer = metrics.config.enabled ? metrics : null;
  const rooms: Rooms = new Rooms({
    store,
    schema,
    transport: roomTransport(namespaces),
    observer,
    log,
    options: {
      ...config,
      schemaVersion,
      clock,
      afterSnapshot: (docId) => retention.schedule(docId),
    },
    hooks: roomHooks(options, log),
    // A new holder per process: a new process of the same node (a deploy) takes documents
    // over from the old one like any other node would.
    leases: store.leases
      ? {
          store: store.leases,
          holder: `${config.nodeId}/${randomUUID().slice(0, 8)}`,
          ttlMs: config.leaseMs,
        }
      : null,
  });
  const admission = new Admission(config);
  const guard = new EngineGuard(
    {
      ...config,
      // At least one frame of the largest size Engine.IO lets through.
      frameBytesBurst: Math.max(config.frameBytesBurst, 2 * config.maxMessageBytes),
    },
    (request) => admission.address(request),
  );
  return {
    config,
    schema,
    store,
    log,
    metrics,
    observer,
    rooms,
    admission,
    owners: new ClientOwners(),
    guard,
    socketOptions: socketOptionsOf(config),
    authenticate: options.authenticate,
    namespaces,
    stops: [],
    state: { draining: false },
    clock,
    retention,
    editors,
  };
}

/// Engine.IO's frame cap at twice `maxMessageBytes` (a frame is refused before it is parsed),
/// no compression (steps are small and latency-bound), and `handshakeTimeoutMs` for a
/// connection to connect a namespace.
function socketOptionsOf(config: Readonly<Config>): SocketOptions {
  return {
    maxHttpBufferSize: 2 * config.maxMessageBytes,
    perMessageDeflate: false,
    httpCompression: false,
    connectTimeout: config.handshakeTimeoutMs,
  };
}

/// How rooms reach their editors: over every namespace attached, now or later.
function roomTransport(namespaces: readonly ScriptoriumNamespace[]): RoomTransport {
  const cork = new WriteCork();
  return {
    broadcast(docId, message) {
      const name = roomOf(docId);
      for (const nsp of namespaces) nsp.to(name).emit('steps', message);
    },
    cork(docId) {
      cork.hold(namespaces, roomOf(docId));
    },
    uncork() {
      cork.release();
    },
    evict(docId, code, message, retryAfterMs) {
      for (const nsp of namespaces) {
        nsp.to(roomOf(docId)).emit('closing', { code, message, retryAfterMs });
        // Out of the namespace, not off their connections, which a client may share with an
        // embedding host's own namespaces (see `sendAway`); except for `moved`: another node
        // serves the document, and only a new connection is routed there (one kept would
        // take the client back to this node, which would claim the document back).
        nsp.in(roomOf(docId)).disconnectSockets(code === 'moved');
      }
    },
  };
}
