import type { StepsAnswer, SyncAnswer, SyncRequest } from '../../schema/events.js';
import {
  answerSync,
  loadRefusal,
  overRate,
  readerCannotCreate,
  refusal,
  takeAck,
  tokenExpired,
} from './answers.js';
import { eventName, guarded, handlerFailed, payloadGate } from './guard.js';
import type { ProtocolOptions } from './options.js';
import { attachPresence } from './presence.js';
import { checkSteps, parseSyncRequest } from './requests.js';
import { hasExpired, roomOf, type ScriptoriumSocket } from './socket.js';
import { strike } from './strikes.js';
import type { Room } from '../rooms/room.js';

/// The events a client may send; any other is answered `protocol-error` and struck.
const events: ReadonlySet<unknown> = new Set(['join', 'pull', 'steps', 'presence']);

/// Wires the events of one admitted socket, in this order: the payload gate (first, so no
/// handler, presence's included, ever sees a payload over the limits), `presence`, `join`,
/// `pull`, `steps`, the refusal of unknown events, and the leaving of its room on disconnect.
/// Every handler runs behind `guarded`: a throw is logged, answered `internal` and fails the
/// socket's room rather than end the process.
export function attachHandlers(options: ProtocolOptions, socket: ScriptoriumSocket): void {
  const { io, log, owners } = options;
  const strikeIt = (): void => strike(socket, options);
  // First, so no handler (presence's included) ever sees a payload over the limits.
  socket.use(payloadGate(socket, options.json, strikeIt));
  attachPresence(io, socket, log, strikeIt, (shown) => {
    // A reader binds no client id, so it may have connected with one a writer took since:
    // its caret must not be shown as that writer's.
    const { readOnly, user, clientID, docId } = shown.data;
    return !readOnly || user === null || owners.mayUse(docId, clientID, user, performance.now());
  });
  socket.on('join', guarded(socket, 'join', log, onJoin(options, socket)));
  socket.on('pull', guarded(socket, 'pull', log, onPull(options, socket)));
  socket.on('steps', guarded(socket, 'steps', log, onSteps(options, socket)));
  // After the payload gate (a middleware, unlike `onAny`, runs after the ones before it),
  // so an unknown event over a limit is answered and counted once.
  socket.use((packet, next) => {
    const event = packet[0];
    if (events.has(event)) return next();
    const name = eventName(event);
    strikeIt();
    socket.emit('protocol-error', {
      code: 'bad-request',
      message: `Unknown event "${name}"`,
      event: name,
    });
  });
  socket.on(
    'disconnect',
    guarded(socket, 'disconnect', log, () => {
      const room = socket.data.room;
      if (room) {
        socket.data.room = null;
        options.rooms.detach(room);
      }
    }),
  );
}

/// The `join` handler: loads the socket's document (creating it for a writer) and joins its
/// room, answered with the document or the steps since the client's version and the batch
/// limits; a second `join` is answered as a `pull`.
function onJoin(options: ProtocolOptions, socket: ScriptoriumSocket): (...args: unknown[]) => void {
  const { admission, rooms, log } = options;
  return (...args) => {
    const ack = takeAck(socket, 'join', args);
    if (!ack) return strike(socket, options);
    // A join's answers tell the client how big its batches may be.
    const answer = (sync: SyncAnswer): void =>
      ack(sync.ok ? { ...sync, limits: options.batchLimits } : sync);
    const request = parseSyncRequest(args[0]);
    if (typeof request === 'string') {
      strike(socket, options);
      return ack(refusal('bad-request', request));
    }
    if (hasExpired(socket.data)) return ack(refusal('unauthorized', tokenExpired));
    const limited = overRate(socket.data.pulls);
    if (limited) return ack(limited);
    // A second join answers like a pull.
    if (socket.data.room) {
      return answerJoined(options, socket, socket.data.room, request, answer, 'join');
    }
    const address = socket.data.address;
    // A reader may follow a document, not make one: one the store does not know is
    // answered `not-found` and nothing is created for it, and one another node serves is
    // answered `moved` without asking that node to hand it over (a reader must not move
    // a document away from its editors).
    const create = socket.data.readOnly
      ? false
      : { take: () => admission.mayCreate(address), giveBack: () => admission.giveBack(address) };
    rooms
      .get(socket.data.docId, create)
      .then(
        (room) => joinLoaded(options, socket, room, request, answer),
        (err: unknown) => ack(loadRefusal(log, socket.data.docId, err, 'document load failed')),
      )
      // A throw in either continuation is past `guarded`: answered and logged the same way,
      // not left an unhandled rejection (which ends a host that has no handler for them).
      .catch((err: unknown) => handlerFailed(socket, 'join', log, err, ack));
  };
}

/// A first `join` once its document is loaded (`room`; null: a reader's, of a document the
/// store does not know): joins the socket to the document's broadcasts and answers.
function joinLoaded(
  options: ProtocolOptions,
  socket: ScriptoriumSocket,
  room: Room | null,
  request: SyncRequest,
  answer: (sync: SyncAnswer) => void,
): void {
  // The socket may have left while the document loaded, or joined twice.
  if (!socket.connected) return;
  if (socket.data.room) {
    return answerJoined(options, socket, socket.data.room, request, answer, 'join');
  }
  if (!room) return answer(refusal('not-found', readerCannotCreate));
  if (room.state !== 'open') return answer(refusal('unavailable'));
  // Joining the Socket.io room and answering happen in one synchronous step: every
  // broadcast after the answer's version reaches this socket, and none before it.
  void socket.join(roomOf(room.docId));
  socket.data.room = room;
  options.rooms.attach(room);
  // Its lease was confirmed by `get` just before.
  answerSync(socket, room, request, answer, options.maxSocketBufferBytes);
}

/// The `pull` handler: the steps since the client's version (or the whole document), from
/// the room the socket joined.
function onPull(options: ProtocolOptions, socket: ScriptoriumSocket): (...args: unknown[]) => void {
  return (...args) => {
    const ack = takeAck(socket, 'pull', args);
    if (!ack) return strike(socket, options);
    const request = parseSyncRequest(args[0]);
    if (typeof request === 'string') {
      strike(socket, options);
      return ack(refusal('bad-request', request));
    }
    const room = socket.data.room;
    if (!room) {
      strike(socket, options);
      return ack(refusal('bad-request', 'Send join before pull'));
    }
    if (hasExpired(socket.data)) {
      return ack(refusal('unauthorized', tokenExpired, room.publishedVersion));
    }
    const limited = overRate(socket.data.pulls, room.publishedVersion);
    if (limited) return ack(limited);
    answerJoined(options, socket, room, request, ack, 'pull');
  };
}

/// The `steps` handler: a batch checked (`checkSteps`, then the socket's batch rate) goes to
/// the room, which answers it; a refused one is answered here, struck when malformed, and
/// reported to the observer as the room reports the others.
function onSteps(
  options: ProtocolOptions,
  socket: ScriptoriumSocket,
): (...args: unknown[]) => void {
  const { observer } = options;
  return (...args) => {
    const received = performance.now();
    const ack = takeAck(socket, 'steps', args) as ((answer: StepsAnswer) => void) | null;
    if (!ack) return strike(socket, options);
    const room = socket.data.room;
    const refused =
      checkSteps(socket.data, room, args[0], options.draining()) ??
      overRate(socket.data.batches, room?.publishedVersion);
    if (refused) {
      if (refused.code === 'bad-request' || refused.code === 'invalid-step') {
        strike(socket, options);
      }
      ack(refused);
      if (observer) {
        const now = performance.now();
        observer.record(socket.data.docId, refused.code, 0, received, now, NaN, now);
      }
      return;
    }
    const { version, steps } = args[0] as { version: number; steps: unknown[] };
    room!.receive(version, steps, socket.data.clientID, ack, received, socket.data.user);
  };
}

/// Answers a `pull`, or a second `join`, from `room`, which `socket` has joined. While the
/// room's lease is unconfirmed the answer waits for a renewal, as a first join's does in
/// `Rooms.get`: answered once it is held, refused `moved` when it is lost and `unavailable`
/// (with `retryAfterMs`) when it fails. The answer is made and sent in one synchronous step
/// either way: the socket receives the document's broadcasts meanwhile, and after its answer
/// none older than the answer's version.
function answerJoined(
  options: ProtocolOptions,
  socket: ScriptoriumSocket,
  room: Room,
  request: SyncRequest,
  ack: (answer: SyncAnswer) => void,
  event: 'join' | 'pull',
): void {
  const { log, maxSocketBufferBytes } = options;
  if (room.leaseFresh()) return answerSync(socket, room, request, ack, maxSocketBufferBytes);
  options.rooms
    .confirm(room)
    .then(
      () => {
        if (!socket.connected) return;
        // The token may have run out during the wait.
        if (hasExpired(socket.data)) {
          return ack(refusal('unauthorized', tokenExpired, room.publishedVersion));
        }
        answerSync(socket, room, request, ack, maxSocketBufferBytes);
      },
      (err: unknown) => ack(loadRefusal(log, socket.data.docId, err, `${event} refused`)),
    )
    // As for a join's load: a throw in either continuation is answered, never left an
    // unhandled rejection.
    .catch((err: unknown) => handlerFailed(socket, event, log, err, ack));
}
