import { randomUUID } from 'node:crypto';
import type { Node, Schema } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import { pino, type Logger } from 'pino';
import type { Server } from 'socket.io';
import { docIdPattern, type StepJSON, type StepsAnswer } from '../schema/events.js';
import { errorBody, isErrorCode, type ErrorCode } from '../schema/errors.js';
import { schema as builtInSchema, schemaVersion as builtInSchemaVersion } from '../schema/index.js';
import { MetricsRecorder } from '../metrics/index.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { healthOf, statsOf, type CollabHealth, type CollabStats } from './collab_health.js';
import { processSettings, type LimitSettings } from './settings.js';
import { CodedError } from './rooms/coded_error.js';
import { Rooms } from './rooms/registry.js';
import type { AcceptedBatch, RoomHooks } from './rooms/room_hooks.js';
import type { RoomTransport } from './rooms/room_options.js';
import { Admission } from './protocol/admission.js';
import { ClientOwners } from './protocol/client_owners.js';
import { attachProtocol } from './protocol/connection.js';
import { EngineGuard } from './protocol/engine_guard.js';
import { loadFailureCode } from './protocol/guard.js';
import { sendAway } from './protocol/outbound.js';
import { roomOf, type Authenticate, type ScriptoriumNamespace } from './protocol/socket.js';
import { MemoryStore } from './stores/memory_store.js';
import type { Store } from './stores/store.js';

/// The settings `createCollab` takes as `limits`: every setting of the standalone server that
/// is not about its own process (port, host, store, access control, logging). Same names,
/// defaults and ranges as docs/configuration.md, which lists them from the same table.
export type CollabLimits = LimitSettings;

/// A document as the hooks and `document()` see it: the published (durable) state.
export interface DocumentEvent {
  docId: string;
  version: number;
  doc: Node;
}

/// A batch made durable: what `onAccepted` receives. `user` is who sent it as `authenticate`
/// named them (null in open mode, or for `change` without one); `steps` are JSON, as applied.
export interface AcceptedEvent {
  docId: string;
  version: number;
  steps: readonly StepJSON[];
  clientID: string;
  user: string | null;
}

/// A hook's answer: nothing, or a promise of nothing. Hooks are awaited only where the
/// server must wait for them (`onLoad`); a rejection anywhere is logged and, where there is
/// a request, answered with a code.
type HookResult = void | Promise<void>;

export interface CollabOptions {
  /// Any ProseMirror schema; the built-in one when omitted. Clients must use the same one.
  schema?: Schema;
  /// Written into snapshots; raise it when a schema change makes old documents invalid, and
  /// snapshots written by a newer version are refused (`corrupt`) instead of misread.
  /// Defaults to the built-in schema's version.
  schemaVersion?: number;
  /// Where documents persist. A `MemoryStore` (nothing survives the process) when omitted.
  store?: Store;
  /// Called for every connection before it may do anything. Omitted: anyone may read and
  /// write (open mode), and `attach` logs a warning saying so; `null`: open mode on purpose,
  /// without the warning.
  authenticate?: Authenticate | null;
  /// Awaited when a document is loaded into memory (or created), before anyone is served from
  /// it. Throwing refuses the load: with the error's `code` when it is one of the protocol's
  /// codes (`forbidden`, say), `internal` otherwise.
  onLoad?: (event: DocumentEvent) => HookResult;
  /// Called after every accepted batch is durable, broadcast and acknowledged.
  onAccepted?: (event: AcceptedEvent) => HookResult;
  /// Called once for every load (that `onLoad` did not refuse), when the document has left
  /// memory, whichever way: unloaded when idle or for another document (after its snapshot),
  /// handed to another node or its lease lost, closed after a failure or after finding that
  /// another writer (or a store gone back to an older state) changed it, or at `close`.
  /// `version` and `doc` are what this process last published (all of it durable); after a
  /// move or a conflict the document may have gone on elsewhere.
  onUnload?: (event: DocumentEvent) => HookResult;
  limits?: Partial<CollabLimits>;
  /// A pino logger (or a child of the host's); warnings and errors only by default.
  logger?: Logger;
  /// Latency windows and counters (see metrics/): a recorder to share, false for none.
  metrics?: MetricsRecorder | false;
  /// This process's node name, in its document leases (a store shared by several processes,
  /// Redis, gives each document to one of them at a time). The host name by default.
  nodeId?: string;
}

/// Where `attach` wires the protocol.
export interface AttachOptions {
  /// The Socket.io namespace clients connect to; `/` by default.
  namespace?: string;
}

/// A collaboration authority to embed: documents, their rooms and the socket protocol, on the
/// host's Socket.io server.
export interface Collab {
  readonly schema: Schema;
  readonly metrics: MetricsRecorder;
  /// The Socket.io server options the limits need (`new Server(http, collab.socketOptions)`):
  /// Engine.IO's frame cap at twice `maxMessageBytes`, so that a frame is refused before it
  /// is parsed, no compression (steps are small and latency-bound), and `handshakeTimeoutMs`
  /// for a connection to connect a namespace.
  readonly socketOptions: {
    maxHttpBufferSize: number;
    perMessageDeflate: false;
    httpCompression: false;
    connectTimeout: number;
  };
  /// Serves the protocol on `io` (in `options.namespace`). Guards `io`'s Engine.IO server as
  /// well, for every connection whichever namespace it is for: the caps on connections per
  /// address and in all (through its `allowRequest`, after the host's own), each
  /// connection's frame budget, and a `connectTimeout` of at most `handshakeTimeoutMs`.
  attach(io: Server, options?: AttachOptions): void;
  /// Edits `docId` on the server, through the same path as an editor's steps: checked against
  /// the limits, journaled, broadcast, `onAccepted`. `edit` adds steps to a transform of the
  /// newest document (creating the document when it does not exist). Resolves with the new
  /// version once durable; rejects with a `CodedError` when the steps are refused, and with
  /// `bad-document-id` for an id outside `docIdPattern`.
  change(
    docId: string,
    edit: (tr: Transform) => void,
    options?: { user?: string | null; clientID?: string },
  ): Promise<number>;
  /// The document's published version, epoch (the identity of its history: a document made
  /// again from empty gets a new one) and content, loading it if needed; null when the store
  /// has no such document. Rejects with a `CodedError`: `bad-document-id` for an id outside
  /// `docIdPattern`, `unavailable` when the store fails (with `retryAfterMs` while the document
  /// is being reloaded after a conflict), `corrupt` for a quarantined document, `moved` (with
  /// `retryAfterMs`) when another node serves it.
  document(docId: string): Promise<{ version: number; epoch: string; doc: Node } | null>;
  /// Connected editors, over every attached namespace.
  readonly editors: number;
  /// Refuses new connections, finishes in-flight batches, writes snapshots, tells every editor
  /// to reconnect later, closes the store. Bounded by `shutdownTimeoutMs`; resolves true when
  /// everything was saved in time.
  close(): Promise<boolean>;
  /// What this authority holds now, as plain numbers (for health pages and gauges).
  stats(): CollabStats;
  /// Whether this authority can serve now, and if not why: what a readiness probe answers. Asks
  /// the store to answer (`ping`, when it has one) only when nothing else already stops it.
  health(): Promise<CollabHealth>;
}

/// Every option `createCollab` takes. A Record over the interface's keys, so the compiler
/// keeps it complete and exact when an option is added.
const optionNames: Record<keyof CollabOptions, true> = {
  schema: true,
  schemaVersion: true,
  store: true,
  authenticate: true,
  onLoad: true,
  onAccepted: true,
  onUnload: true,
  limits: true,
  logger: true,
  metrics: true,
  nodeId: true,
};

/// Builds a collaboration authority. Throws `ConfigError` for an option it does not know (a
/// misspelt `authenticate` would otherwise run the server open, silently) and for a limit it
/// cannot accept.
export function createCollab(options: CollabOptions = {}): Collab {
  for (const name of Object.keys(options)) {
    if (!Object.hasOwn(optionNames, name)) {
      throw new ConfigError(
        `Unknown option "${name}" (createCollab takes ${Object.keys(optionNames).join(', ')})`,
      );
    }
  }
  for (const field of Object.keys(options.limits ?? {})) {
    if (processSettings.has(field)) {
      throw new ConfigError(`"${field}" is a setting of the standalone server, not a limit`);
    }
  }
  const config = loadConfig({
    ...(options.limits as Partial<Config>),
    ...(options.nodeId === undefined ? {} : { nodeId: options.nodeId }),
  });
  const schema = options.schema ?? builtInSchema;
  const schemaVersion = options.schemaVersion ?? builtInSchemaVersion;
  if (!Number.isSafeInteger(schemaVersion) || schemaVersion < 0) {
    throw new ConfigError(`schemaVersion must be a whole number ≥ 0, got ${schemaVersion}`);
  }
  if (!schema.topNodeType.createAndFill()) {
    throw new ConfigError('the schema cannot make an empty document (its top node needs content)');
  }
  const store: Store = options.store ?? new MemoryStore();
  const log = options.logger ?? pino({ level: 'warn', base: { service: 'scriptorium' } });
  const namespaces: ScriptoriumNamespace[] = [];
  const stops: (() => void)[] = [];
  let draining = false;
  const isDraining = () => draining;
  const editors = () => namespaces.reduce((sum, nsp) => sum + nsp.sockets.size, 0);

  const metrics: MetricsRecorder =
    options.metrics ||
    new MetricsRecorder(
      { enabled: options.metrics !== false },
      { editors, documents: (): number => rooms.size, logger: log },
    );
  // Left out entirely when metrics are off, so the hot path skips the call.
  const observer = metrics.config.enabled ? metrics : null;

  const transport: RoomTransport = {
    broadcast(docId, message) {
      const name = roomOf(docId);
      for (const nsp of namespaces) nsp.to(name).emit('steps', message);
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
  const rooms: Rooms = new Rooms({
    store,
    schema,
    transport,
    observer,
    log,
    options: { ...config, schemaVersion },
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
  const owners = new ClientOwners();
  const guard = new EngineGuard(
    {
      ...config,
      // At least one frame of the largest size Engine.IO lets through.
      frameBytesBurst: Math.max(config.frameBytesBurst, 2 * config.maxMessageBytes),
    },
    (request) => admission.address(request),
  );
  const socketOptions = {
    maxHttpBufferSize: 2 * config.maxMessageBytes,
    perMessageDeflate: false as const,
    httpCompression: false as const,
    connectTimeout: config.handshakeTimeoutMs,
  };

  let closing: Promise<boolean> | null = null;
  const collab: Collab = {
    schema,
    metrics,
    socketOptions,
    get editors() {
      return editors();
    },
    stats() {
      return statsOf(rooms, editors());
    },
    health() {
      return healthOf(rooms, store, draining);
    },
    attach(io, attachOptions = {}) {
      if (draining) throw new Error('this collab is closed');
      const nsp = io.of(attachOptions.namespace ?? '/') as unknown as ScriptoriumNamespace;
      if (namespaces.includes(nsp)) throw new Error(`already attached to ${nsp.name}`);
      const cap = io.engine.opts.maxHttpBufferSize ?? 1e6;
      if (cap > socketOptions.maxHttpBufferSize) {
        // Frames up to the engine's cap are parsed before any limit is checked: a 1 MB frame
        // of nested arrays holds the event loop for hundreds of milliseconds.
        log.warn(
          { maxHttpBufferSize: cap, recommended: socketOptions.maxHttpBufferSize },
          'the Socket.io server accepts frames larger than the limits need: create it with collab.socketOptions',
        );
      }
      if (options.authenticate === undefined) {
        log.warn(
          { namespace: nsp.name },
          'no authenticate hook: open mode, anyone who can reach this server may read and write every document (pass authenticate: null to run open on purpose)',
        );
      }
      namespaces.push(nsp);
      guard.attach(io);
      // A connection counts under the caps until it closes: one that never connects a
      // namespace is closed after this, not Socket.io's default of 45 s.
      if (io.connectTimeout() > config.handshakeTimeoutMs) {
        io.connectTimeout(config.handshakeTimeoutMs);
      }
      stops.push(
        attachProtocol({
          io: nsp,
          rooms,
          log,
          draining: isDraining,
          observer,
          json: {
            maxDepth: config.maxJsonDepth,
            maxBytes: config.maxMessageBytes,
            maxStringBytes: config.maxAttributeBytes,
          },
          admission,
          owners,
          guard,
          batchesPerSecond: config.batchesPerSecond,
          batchesBurst: config.batchesBurst,
          pullsPerSecond: config.pullsPerSecond,
          pullsBurst: config.pullsBurst,
          maxProtocolErrors: config.maxProtocolErrors,
          protocolErrorForgiveMs: config.protocolErrorForgiveMs,
          maxSocketBufferBytes: config.maxSocketBufferBytes,
          batchLimits: {
            maxMessageBytes: config.maxMessageBytes,
            maxStepsPerBatch: config.maxStepsPerBatch,
            // What the payload gate (`json` above) refuses without reading, so that a client
            // drops a step over them itself rather than send it and be struck for it.
            maxAttributeBytes: config.maxAttributeBytes,
            maxJsonDepth: config.maxJsonDepth,
          },
          authenticate: options.authenticate ?? null,
        }),
      );
      if (namespaces.length === 1) metrics.start();
    },
    async change(docId, edit, changeOptions = {}) {
      if (draining) throw new CodedError('shutting-down');
      checkDocId(docId);
      const room = await rooms.get(docId, true);
      if (!room || room.state !== 'open') throw new CodedError('unavailable');
      // Made and handed to the room in one synchronous step, against the newest document:
      // nothing can be applied in between, so the steps never need rebasing.
      const { doc, version } = room.current();
      const tr = new Transform(doc);
      edit(tr);
      if (tr.steps.length === 0) return room.publishedVersion;
      const steps = tr.steps.map((step) => step.toJSON() as StepJSON);
      return new Promise<number>((resolve, reject) => {
        const ack = (answer: StepsAnswer) => {
          if (answer.ok) resolve(answer.version);
          else reject(new CodedError(answer.code, answer.message));
        };
        room.receive(
          version,
          steps,
          changeOptions.clientID ?? 'server',
          ack,
          performance.now(),
          changeOptions.user ?? null,
        );
      });
    },
    async document(docId) {
      checkDocId(docId);
      let room;
      try {
        room = await rooms.get(docId, false);
      } catch (err) {
        // The store's and the registry's own errors are not exported: a host could tell a
        // store that is down from a quarantined document only by their names.
        if (err instanceof CodedError) throw err;
        const retryAfterMs = (err as { retryAfterMs?: unknown } | null)?.retryAfterMs;
        throw new CodedError(loadFailureCode(err), (err as Error)?.message, {
          cause: err,
          ...(typeof retryAfterMs === 'number' ? { retryAfterMs } : {}),
        });
      }
      if (!room) return null;
      return { version: room.publishedVersion, epoch: room.epoch, doc: room.publishedDoc };
    },
    close() {
      closing ??= shutdown();
      return closing;
    },
  };
  registries.set(collab, rooms);
  return collab;

  async function shutdown(): Promise<boolean> {
    // One budget for everything below: a wedged document (a hung disk, a store that does not
    // answer) must not hold the host past it, at any step.
    const deadline = performance.now() + config.shutdownTimeoutMs;
    const inTime = <T>(promise: Promise<T>, late: T): Promise<T> => {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<T>((resolve) => {
        timer = setTimeout(() => resolve(late), Math.max(0, deadline - performance.now()));
      });
      return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
    };
    draining = true;
    log.info('closing: finishing in-flight batches and writing snapshots');
    const saved = await inTime(
      rooms.flushAll().then((failed) => failed === 0),
      false,
    );
    if (!saved) log.warn('close: not every document could be saved in time');
    // Only the sockets of this protocol: a shared namespace may hold the host's own.
    for (const nsp of namespaces) {
      for (const socket of nsp.sockets.values()) {
        if (!socket.data?.docId) continue;
        // The connection too: this process is going away, and a new connection may be routed
        // to another node.
        sendAway(
          socket,
          {
            code: 'shutting-down',
            message: 'The server is restarting: reconnect in a moment',
            retryAfterMs: 1000,
          },
          true,
        );
      }
    }
    for (const stop of stops) stop();
    const closedRooms = rooms.closeAll();
    // Handing the documents to the next node now rather than when their leases expire.
    await inTime(rooms.releaseAll(closedRooms), undefined);
    metrics.stop();
    const closed = await inTime(
      store.close().then(
        () => true,
        (err: unknown) => {
          log.warn({ err }, 'store close failed');
          return false;
        },
      ),
      false,
    );
    // A store that could not close may still have writes running: not everything is saved.
    if (!closed) log.warn('close: the store did not close cleanly in time');
    return saved && closed;
  }
}

/// Each collab's document registry, for this repository's tests and tools (`roomsOf`); hosts
/// see `stats()` and `health()` instead.
const registries = new WeakMap<Collab, Rooms>();

/// The document registry behind `collab`, which the package does not export: tests read a
/// room's state through it. Throws for an object `createCollab` did not make.
export function roomsOf(collab: Collab): Rooms {
  const rooms = registries.get(collab);
  if (!rooms) throw new TypeError('not a collab made by createCollab');
  return rooms;
}

/// The rooms' hooks: the host's, each behind a wrapper, so that what a host's hook throws or
/// rejects is logged (and, for `onLoad`, answered with a code) and never reaches a room.
function roomHooks(options: CollabOptions, log: Logger): RoomHooks {
  const hooks: RoomHooks = {};
  const { onLoad, onAccepted, onUnload } = options;
  const report = (hook: string, docId: string) => (err: unknown) =>
    log.error({ err, doc: docId, hook }, `the host's ${hook} hook failed`);
  /// Calls a hook whose outcome nobody waits for.
  const notify = <E extends { docId: string }>(
    hook: string,
    fn: (event: E) => HookResult,
    event: E,
  ): void => {
    try {
      const result = fn(event);
      if (result && typeof result.then === 'function')
        result.then(undefined, report(hook, event.docId));
    } catch (err) {
      report(hook, event.docId)(err);
    }
  };
  if (onLoad) {
    hooks.loaded = async (room) => {
      try {
        await onLoad({ docId: room.docId, version: room.publishedVersion, doc: room.publishedDoc });
      } catch (err) {
        report('onLoad', room.docId)(err);
        const code = (err as { code?: unknown } | null)?.code;
        const known: ErrorCode = isErrorCode(code) ? code : 'internal';
        throw new CodedError(known, errorBody(known, (err as Error)?.message).message, {
          cause: err,
        });
      }
    };
  }
  if (onAccepted) {
    hooks.accepted = (batch: AcceptedBatch) => notify('onAccepted', onAccepted, batch);
  }
  if (onUnload) {
    hooks.unloaded = (room) =>
      notify('onUnload', onUnload, {
        docId: room.docId,
        version: room.publishedVersion,
        doc: room.publishedDoc,
      });
  }
  return hooks;
}

/// Throws `bad-document-id` for an id outside `docIdPattern`, as the handshake and the http app
/// answer it. Checked before the store sees it: a store that cannot name keys for it (Redis:
/// a `}` breaks the hash tag) throws, and the load would take that for damaged data and
/// quarantine the id.
function checkDocId(docId: string): void {
  if (typeof docId !== 'string' || !docIdPattern.test(docId)) {
    throw new CodedError('bad-document-id');
  }
}
