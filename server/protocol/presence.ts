import {
  presenceColorPattern,
  presenceNameMaxLength,
  type PresenceBroadcast,
} from '../../schema/events.js';
import type { Logger } from 'pino';
import { hasExpired, roomOf, type ScriptoriumNamespace, type ScriptoriumSocket } from './socket.js';
import { guarded } from './guard.js';

/// Shortest time between two presence relays of one socket: at most 20 a second.
export const presenceIntervalMs = 50;

/// Largest position or version a presence update may carry. Documents are bounded far below
/// this (`maxDocSize`); the bound only keeps nonsense out of other clients.
const maxPosition = 2 ** 31 - 1;

/// The presence of one connected socket. Kept in memory while the socket is connected and
/// never stored: a presence is only worth something while its editor is there.
class SocketPresence {
  /// The last update relayed to the room (what a newcomer is told).
  sent: PresenceBroadcast | null = null;
  /// An update that arrived inside the throttle window; replaced by each newer one.
  waiting: PresenceBroadcast | null = null;
  lastSentAt = -Infinity;
  timer: ReturnType<typeof setTimeout> | null = null;
}

const presences = new WeakMap<ScriptoriumSocket, SocketPresence>();

/// Handles the `presence` event of one socket: validates it (a malformed one or one sent before
/// `join` gets a `protocol-error` with code `bad-request` and counts as one through
/// `onMalformed`), relays it to the rest of the document's room as
/// `{clientID, name, color, version, anchor, head}` at most once per `presenceIntervalMs`
/// (extra updates are dropped, but the latest one is always delivered when the window ends),
/// and emits `presence-leave` to the room when the socket disconnects.
///
/// A newcomer learns who is there without anyone being asked: the server keeps the last relayed
/// presence of each connected socket in memory, and answers a socket's first presence with the
/// presences of the others in its room. Those may be at older versions than the newcomer's;
/// clients re-announce themselves when they see a client id for the first time, so the
/// newcomer soon has positions at current versions.
///
/// With an authenticated user (`SocketData.user`), the name relayed is the user's (cut to
/// `presenceNameMaxLength`), whatever name the update carries; in open mode, the update's.
///
/// `mayShow` says whether a socket's presence may be shown under its client id now; one it
/// refuses is dropped quietly (the socket did nothing wrong), and not told to newcomers.
export function attachPresence(
  io: ScriptoriumNamespace,
  socket: ScriptoriumSocket,
  log: Logger,
  onMalformed: () => void = () => {},
  mayShow: (socket: ScriptoriumSocket) => boolean = () => true,
): void {
  socket.on(
    'presence',
    guarded(socket, 'presence', log, (...args: unknown[]) => {
      if (!socket.data.room) {
        onMalformed();
        return protocolError(socket, 'Send join before presence');
      }
      const update = parsePresence(args[0]);
      if (typeof update === 'string') {
        onMalformed();
        return protocolError(socket, update);
      }
      // An expired token reads and shows nothing more; the expiry sweep sends the socket away.
      if (hasExpired(socket.data) || !mayShow(socket)) return;
      const broadcast: PresenceBroadcast = { clientID: socket.data.clientID, ...update };
      // The name others see is the authenticated user's, not one it chose: a client may not
      // show its caret as someone else's.
      if (socket.data.user !== null) broadcast.name = shownName(socket.data.user);
      let presence = presences.get(socket);
      if (!presence) {
        presence = new SocketPresence();
        presences.set(socket, presence);
        introduce(io, socket, mayShow);
      }
      throttle(socket, presence, broadcast, log, mayShow);
    }),
  );

  socket.on(
    'disconnect',
    guarded(socket, 'disconnect', log, () => leave(io, socket, mayShow)),
  );
}

/// Relays `broadcast` now when the socket's throttle window is over, or keeps it as the one
/// to relay when the window ends (replacing any kept before).
function throttle(
  socket: ScriptoriumSocket,
  presence: SocketPresence,
  broadcast: PresenceBroadcast,
  log: Logger,
  mayShow: (socket: ScriptoriumSocket) => boolean,
): void {
  // The monotonic clock: a step of the wall clock back would hold updates that long.
  const now = performance.now();
  if (presence.timer === null && now - presence.lastSentAt >= presenceIntervalMs) {
    relay(socket, presence, broadcast, now);
    return;
  }
  presence.waiting = broadcast;
  if (presence.timer !== null) return;
  presence.timer = setTimeout(
    () => {
      presence.timer = null;
      try {
        if (presence.waiting && socket.connected && mayShow(socket))
          relay(socket, presence, presence.waiting, performance.now());
      } catch (err) {
        // A timer's throw would end the process; a lost cursor update costs nothing.
        log.error({ err, doc: socket.data.docId }, 'presence relay failed');
      }
    },
    presenceIntervalMs - (now - presence.lastSentAt),
  );
}

/// Forgets a disconnected socket's presence and tells its room `presence-leave`, unless
/// another socket shown under the same client id is still there.
function leave(
  io: ScriptoriumNamespace,
  socket: ScriptoriumSocket,
  mayShow: (socket: ScriptoriumSocket) => boolean,
): void {
  const presence = presences.get(socket);
  if (!presence) return;
  presences.delete(socket);
  if (presence.timer !== null) clearTimeout(presence.timer);
  const docId = socket.data.docId;
  const clientID = socket.data.clientID;
  // A client that reconnected may have a new socket here before the server noticed the old
  // one was gone (a dropped network is only detected by the ping timeout): its cursor must
  // not vanish for everyone when the old socket finally leaves. Only a socket whose cursor
  // others see counts: a reader that showed itself under this id before a writer took it
  // is not shown, and would keep the writer's cursor on screen after it left.
  for (const other of roomSockets(io, docId)) {
    if (
      other !== socket &&
      other.data.clientID === clientID &&
      presences.get(other)?.sent &&
      mayShow(other)
    )
      return;
  }
  // The socket has already left its rooms by now, so this reaches only the others.
  io.to(roomOf(docId)).emit('presence-leave', { clientID });
}

/// Sends `broadcast` to the rest of the socket's room and remembers it as the last relayed.
function relay(
  socket: ScriptoriumSocket,
  presence: SocketPresence,
  broadcast: PresenceBroadcast,
  now: number,
): void {
  presence.sent = broadcast;
  presence.waiting = null;
  presence.lastSentAt = now;
  socket.to(roomOf(socket.data.docId)).emit('presence', broadcast);
}

/// Tells a socket that has just announced itself where everyone else in its room is.
function introduce(
  io: ScriptoriumNamespace,
  socket: ScriptoriumSocket,
  mayShow: (socket: ScriptoriumSocket) => boolean,
): void {
  for (const other of roomSockets(io, socket.data.docId)) {
    if (other === socket || other.data.clientID === socket.data.clientID || !mayShow(other))
      continue;
    const sent = presences.get(other)?.sent;
    if (sent) socket.emit('presence', sent);
  }
}

function* roomSockets(io: ScriptoriumNamespace, docId: string): Generator<ScriptoriumSocket> {
  const ids = io.adapter.rooms.get(roomOf(docId));
  if (!ids) return;
  for (const id of ids) {
    const socket = io.sockets.get(id);
    if (socket) yield socket;
  }
}

function protocolError(socket: ScriptoriumSocket, message: string): void {
  socket.emit('protocol-error', { code: 'bad-request', message, event: 'presence' });
}

/// Narrows a `presence` payload; returns a reason string when it is malformed.
function parsePresence(value: unknown): Omit<PresenceBroadcast, 'clientID'> | string {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'presence expects {version, anchor, head, name, color}';
  }
  const { version, anchor, head, name, color } = value as Record<string, unknown>;
  if (!isPosition(version) || !isPosition(anchor) || !isPosition(head)) {
    return `version, anchor and head must be whole numbers from 0 to ${maxPosition}`;
  }
  if (typeof name !== 'string' || name.length === 0 || name.length > presenceNameMaxLength) {
    return `name must be a string of 1–${presenceNameMaxLength} characters`;
  }
  if (typeof color !== 'string' || !presenceColorPattern.test(color)) {
    return 'color must be a hex colour #rrggbb';
  }
  return { version, anchor, head, name, color };
}

/// A user name as a presence name: at most `presenceNameMaxLength` UTF-16 units, not cut
/// inside a surrogate pair.
function shownName(user: string): string {
  if (user.length <= presenceNameMaxLength) return user;
  return user.slice(0, presenceNameMaxLength).replace(/[\uD800-\uDBFF]$/, '');
}

function isPosition(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= maxPosition;
}
