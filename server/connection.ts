import type { Logger } from 'pino';
import type { Server, Socket } from 'socket.io';
import {
  clientIdPattern,
  docIdPattern,
  errorBody,
  type ClientToServerEvents,
  type ErrorAnswer,
  type ErrorCode,
  type ServerToClientEvents,
  type StepsAnswer,
  type SyncAnswer,
  type SyncRequest,
} from '../schema/index.js';
import { eventName, guarded, loadFailureCode, payloadGate } from './guard.js';
import type { JsonLimits } from './json_limits.js';
import { attachPresence } from './presence.js';
import type { BatchObserver, Room } from './room.js';
import type { Rooms } from './rooms.js';

/// What the server keeps on each socket.
export interface SocketData {
  docId: string;
  clientID: string;
  readOnly: boolean;
  room: Room | null;
}

export type ScriptoriumServer = Server<
  ClientToServerEvents,
  ServerToClientEvents,
  Record<string, never>,
  SocketData
>;
/// A socket of a `ScriptoriumServer`.
export type ScriptoriumSocket = Socket<
  ClientToServerEvents,
  ServerToClientEvents,
  Record<string, never>,
  SocketData
>;

/// An error for `next()` in the handshake middleware: Socket.io sends `message` and `data` to
/// the client as its `connect_error`.
class HandshakeError extends Error {
  readonly data: ReturnType<typeof errorBody>;
  constructor(code: ErrorCode) {
    const body = errorBody(code);
    super(body.message);
    this.data = body;
  }
}

/// Wires the protocol onto `io`: the handshake check (document id from `query.doc`, client id
/// from `auth.clientID`) and the `join`, `pull` and `steps` handlers. `draining` tells whether
/// the server is shutting down (new connections are refused with `shutting-down`). Refusals
/// made here, before a batch reaches its room, are reported to `observer` like the others.
export function attachProtocol(
  io: ScriptoriumServer,
  rooms: Rooms,
  log: Logger,
  draining: () => boolean,
  observer: BatchObserver | null,
  limits: Readonly<JsonLimits>,
): void {
  io.use((socket, next) => {
    if (draining()) return next(new HandshakeError('shutting-down'));
    const doc = socket.handshake.query['doc'];
    if (typeof doc !== 'string' || !docIdPattern.test(doc)) {
      return next(new HandshakeError('bad-document-id'));
    }
    const auth = socket.handshake.auth as Record<string, unknown> | undefined;
    const clientID = auth?.['clientID'];
    if (typeof clientID !== 'string' || !clientIdPattern.test(clientID)) {
      return next(new HandshakeError('bad-client-id'));
    }
    const readOnly = auth?.['readOnly'];
    if (readOnly !== undefined && typeof readOnly !== 'boolean') {
      return next(new HandshakeError('bad-request'));
    }
    socket.data = { docId: doc, clientID, readOnly: readOnly === true, room: null };
    next();
  });

  io.on('connection', (socket: ScriptoriumSocket) => {
    // First, so no handler (presence's included) ever sees a payload over the limits.
    socket.use(payloadGate(socket, limits));
    attachPresence(io, socket, log);

    socket.on(
      'join',
      guarded(socket, 'join', log, (...args: unknown[]) => {
        const ack = takeAck(socket, 'join', args);
        if (!ack) return;
        const request = parseSyncRequest(args[0]);
        if (typeof request === 'string') return ack(refusal('bad-request', request));
        if (socket.data.room) return ack(socket.data.room.sync(request));
        rooms.get(socket.data.docId, true).then(
          (room) => {
            // The socket may have left while the document loaded, or joined twice.
            if (!socket.connected) return;
            if (socket.data.room) return ack(socket.data.room.sync(request));
            if (!room || room.state !== 'open') return ack(refusal('unavailable'));
            // Joining the Socket.io room and answering happen in one synchronous step: every
            // broadcast after the answer's version reaches this socket, and none before it.
            void socket.join(room.docId);
            socket.data.room = room;
            rooms.attach(room);
            ack(room.sync(request));
          },
          (err: unknown) => {
            const code = loadFailureCode(err);
            if (code !== 'corrupt')
              log.warn({ doc: socket.data.docId, err }, 'document load failed');
            ack(refusal(code));
          },
        );
      }),
    );

    socket.on(
      'pull',
      guarded(socket, 'pull', log, (...args: unknown[]) => {
        const ack = takeAck(socket, 'pull', args);
        if (!ack) return;
        const request = parseSyncRequest(args[0]);
        if (typeof request === 'string') return ack(refusal('bad-request', request));
        const room = socket.data.room;
        if (!room) return ack(refusal('bad-request', 'Send join before pull'));
        ack(room.sync(request));
      }),
    );

    socket.on(
      'steps',
      guarded(socket, 'steps', log, (...args: unknown[]) => {
        const received = performance.now();
        const ack = takeAck(socket, 'steps', args) as ((answer: StepsAnswer) => void) | null;
        if (!ack) return;
        const room = socket.data.room;
        const refused = checkSteps(socket.data, room, args[0], draining());
        if (refused) {
          ack(refused);
          if (observer) {
            const now = performance.now();
            observer.record(socket.data.docId, refused.code, 0, received, now, NaN, now);
          }
          return;
        }
        const { version, steps } = args[0] as { version: number; steps: unknown[] };
        room!.receive(version, steps, socket.data.clientID, ack, received);
      }),
    );

    socket.onAny((event: string) => {
      if (event !== 'join' && event !== 'pull' && event !== 'steps' && event !== 'presence') {
        const name = eventName(event);
        socket.emit('protocol-error', {
          code: 'bad-request',
          message: `Unknown event "${name}"`,
          event: name,
        });
      }
    });

    socket.on(
      'disconnect',
      guarded(socket, 'disconnect', log, () => {
        const room = socket.data.room;
        if (room) {
          socket.data.room = null;
          rooms.detach(room);
        }
      }),
    );
  });
}

function takeAck(
  socket: ScriptoriumSocket,
  event: string,
  args: unknown[],
): ((answer: SyncAnswer | StepsAnswer) => void) | null {
  const ack = args[args.length - 1];
  if (typeof ack === 'function' && args.length >= 2) {
    return ack as (answer: SyncAnswer | StepsAnswer) => void;
  }
  socket.emit('protocol-error', {
    code: 'bad-request',
    message: `${event} expects a payload and an acknowledgement callback`,
    event,
  });
  return null;
}

/// Checks a `steps` message before it reaches the room: the socket must have joined and may
/// write, and the payload must be `{version, steps}` with a non-empty array of objects. Returns
/// the refusal, or null when the room should take it.
function checkSteps(
  data: SocketData,
  room: Room | null,
  request: unknown,
  draining: boolean,
): ErrorAnswer | null {
  if (!room) return refusal('bad-request', 'Send join before steps');
  const version = room.publishedVersion;
  if (draining) return refusal('shutting-down', undefined, version);
  if (data.readOnly) return refusal('forbidden', 'This connection is read-only', version);
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    return refusal('bad-request', 'steps expects {version, steps}', version);
  }
  const fields = request as Record<string, unknown>;
  if (!isVersion(fields['version'])) {
    return refusal('bad-request', 'version must be a whole number ≥ 0', version);
  }
  const steps = fields['steps'];
  if (!Array.isArray(steps) || steps.length === 0) {
    return refusal('bad-request', 'steps must be a non-empty array', version);
  }
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    if (typeof step !== 'object' || step === null || Array.isArray(step)) {
      return refusal('invalid-step', `Step ${i} is not an object`, version);
    }
  }
  return null;
}

function refusal(code: ErrorCode, message?: string, version?: number): ErrorAnswer {
  const body = { ok: false as const, ...errorBody(code, message) };
  return version === undefined ? body : { ...body, version };
}

function isVersion(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/// Narrows a `join`/`pull` payload; returns a reason string when it is malformed.
function parseSyncRequest(value: unknown): SyncRequest | string {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value))
    return 'expects an object {version?, epoch?}';
  const { version, epoch } = value as Record<string, unknown>;
  if (version !== undefined && !isVersion(version)) return 'version must be a whole number ≥ 0';
  if (epoch !== undefined && (typeof epoch !== 'string' || epoch.length > 64)) {
    return 'epoch must be a string of at most 64 characters';
  }
  const request: SyncRequest = {};
  if (version !== undefined) request.version = version;
  if (epoch !== undefined) request.epoch = epoch as string;
  return request;
}
