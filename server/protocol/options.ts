import type { Logger } from 'pino';
import type { BatchLimits } from '../../schema/events.js';
import type { JsonLimits } from '../../schema/json_limits.js';
import type { Admission } from './admission.js';
import type { ClientOwners } from './client_owners.js';
import type { EngineGuard } from './engine_guard.js';
import type { Authenticate, ScriptoriumNamespace } from './socket.js';
import type { BatchObserver } from '../rooms/room_options.js';
import type { Rooms } from '../rooms/registry.js';

/// Everything `attachProtocol` needs for one namespace: where it attaches, the parts it talks
/// to, and what it enforces per socket (from the server configuration, validated before it
/// gets here). The handshake, the handlers and the sweep all read this one object.
export interface ProtocolOptions {
  /// The namespace whose handshakes and sockets the protocol serves.
  io: ScriptoriumNamespace;
  /// The documents served: joins load them, steps go to them.
  rooms: Rooms;
  log: Logger;
  /// True while the server shuts down: new connections are refused `shutting-down`, and so
  /// are steps.
  draining: () => boolean;
  /// Told of every `steps` batch refused before it reaches its room, as rooms tell it of the
  /// others; null: nobody is told.
  observer: BatchObserver | null;
  /// Bounds of every incoming payload (message bytes, JSON depth, string length).
  json: Readonly<JsonLimits>;
  /// The caps on connections and documents and the handshake and creation rates (one for
  /// every namespace of a collab, so a client cannot pass them by using another).
  admission: Admission;
  /// Client ids bound to users (one for every namespace of a collab, as `admission` is).
  owners: ClientOwners;
  /// The connections' counts and frame budgets (one per collab, as `admission` is): told of
  /// every socket admitted, so that a connection closed over budget tells it why.
  guard: EngineGuard;
  /// Each socket's bucket of `steps` batches: refilled at this rate, holding this many.
  batchesPerSecond: number;
  batchesBurst: number;
  /// Each socket's bucket of `join` and `pull` requests.
  pullsPerSecond: number;
  pullsBurst: number;
  /// Malformed messages a socket may send in a burst: the count at which it is closed.
  maxProtocolErrors: number;
  /// One counted malformed message is forgiven per this many milliseconds.
  protocolErrorForgiveMs: number;
  /// Bytes that may wait for one socket's client to read them before it is dropped
  /// `slow-consumer`.
  maxSocketBufferBytes: number;
  /// Told to every client in its `join` answers, to size its batches by.
  batchLimits: Readonly<BatchLimits>;
  /// The host's check of each connection; null: open mode, anyone may read and write.
  authenticate: Authenticate | null;
}
