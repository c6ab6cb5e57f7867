import type { Node, Schema } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import type { Server } from 'socket.io';
import { docIdPattern, type StepJSON, type StepsAnswer } from '../schema/events.js';
import type { MetricsRecorder } from '../metrics/index.js';
import { attachCollab } from './collab_attach.js';
import { healthOf, statsOf, type CollabHealth, type CollabStats } from './collab_health.js';
import { checkOptions, type AttachOptions, type CollabOptions } from './collab_options.js';
import { buildParts, type CollabParts } from './collab_parts.js';
import { shutdownCollab } from './collab_shutdown.js';
import { historyMethods, type HistoryMethods } from './history/history_api.js';
import { CodedError } from './rooms/coded_error.js';
import type { Rooms } from './rooms/registry.js';
import { loadFailureCode } from './protocol/guard.js';

export type {
  AcceptedEvent,
  AttachOptions,
  CollabLimits,
  CollabOptions,
  DocumentEvent,
} from './collab_options.js';

/// A collaboration authority to embed: documents, their rooms and the socket protocol, on the
/// host's Socket.io server.
/// Its history methods are documented on `HistoryMethods`.
export interface Collab extends HistoryMethods {
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

/// Builds a collaboration authority. Throws `ConfigError` for an option it does not know (a
/// misspelt `authenticate` would otherwise run the server open, silently) and for a limit it
/// cannot accept.
export function createCollab(options: CollabOptions = {}): Collab {
  const parts = buildParts(options, checkOptions(options));
  let closing: Promise<boolean> | null = null;
  const collab: Collab = {
    schema: parts.schema,
    metrics: parts.metrics,
    socketOptions: parts.socketOptions,
    get editors() {
      return parts.editors();
    },
    stats() {
      return statsOf(parts.rooms, parts.editors());
    },
    health() {
      return healthOf(parts.rooms, parts.store, parts.state.draining);
    },
    attach(io, attachOptions = {}) {
      attachCollab(parts, io, attachOptions);
    },
    change(docId, edit, changeOptions = {}) {
      return change(parts, docId, edit, changeOptions);
    },
    document(docId) {
      return readDocument(parts, docId);
    },
    close() {
      closing ??= shutdownCollab(parts);
      return closing;
    },
    ...historyMethods({
      store: parts.store,
      schema: parts.schema,
      rooms: parts.rooms,
      clock: parts.clock,
      checkDocId,
      loadError: codedLoadError,
      draining: () => parts.state.draining,
      maxStepsPerBatch: parts.config.maxStepsPerBatch,
      maxDiffSteps: parts.config.historyMaxDiffSteps,
      maxRevertSteps: parts.config.historyMaxRevertSteps,
      retain: (docId) => parts.retention.fresh(docId),
    }),
  };
  registries.set(collab, parts.rooms);
  return collab;
}

/// `Collab.change`: the steps `edit` adds to a transform of the newest document, through the
/// room like an editor's batch. Resolves with the new version once durable (the current one when
/// `edit` adds nothing); rejects with a `CodedError` when refused.
async function change(
  parts: CollabParts,
  docId: string,
  edit: (tr: Transform) => void,
  options: { user?: string | null; clientID?: string },
): Promise<number> {
  if (parts.state.draining) throw new CodedError('shutting-down');
  checkDocId(docId);
  const room = await parts.rooms.get(docId, true);
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
      options.clientID ?? 'server',
      ack,
      performance.now(),
      options.user ?? null,
    );
  });
}

/// `Collab.document`: the published state of `docId`, loading it if needed; null when the store
/// has none. Rejects with a `CodedError` (see `Collab.document`).
async function readDocument(
  parts: CollabParts,
  docId: string,
): Promise<{ version: number; epoch: string; doc: Node } | null> {
  checkDocId(docId);
  let room;
  try {
    room = await parts.rooms.get(docId, false);
  } catch (err) {
    throw codedLoadError(err);
  }
  if (!room) return null;
  return { version: room.publishedVersion, epoch: room.epoch, doc: room.publishedDoc };
}

/// A room load's failure as the `CodedError` it is answered with. The store's and the
/// registry's own errors are not exported: a host could tell a store that is down from a
/// quarantined document only by their names.
function codedLoadError(err: unknown): CodedError {
  if (err instanceof CodedError) return err;
  const retryAfterMs = (err as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  return new CodedError(loadFailureCode(err), (err as Error)?.message, {
    cause: err,
    ...(typeof retryAfterMs === 'number' ? { retryAfterMs } : {}),
  });
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

/// Throws `bad-document-id` for an id outside `docIdPattern`, as the handshake and the http app
/// answer it. Checked before the store sees it: a store that cannot name keys for it (Redis:
/// a `}` breaks the hash tag) throws, and the load would take that for damaged data and
/// quarantine the id.
function checkDocId(docId: string): void {
  if (typeof docId !== 'string' || !docIdPattern.test(docId)) {
    throw new CodedError('bad-document-id');
  }
}
