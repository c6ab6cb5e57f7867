import type { ClosingNotice } from '../../schema/events.js';
import type { ScriptoriumNamespace, ScriptoriumSocket } from './socket.js';

// Socket.io has no per-socket count of bytes waiting to go out, and a reader that never reads
// makes them pile up in this process: every broadcast is queued for it. Two places hold them:
// - engine.io's `writeBuffer`: packets not yet handed to the transport (for websocket, while
//   the previous write is in flight; for polling, until the client polls);
// - for websocket, the `ws` socket's `bufferedAmount`: frames handed to it that the kernel has
//   not taken yet (its socket buffer is full because the peer does not read).
// Both are read, not modified, through fields that engine.io and ws have kept stable across
// their 6.x and 8.x lines.

interface EnginePacket {
  data?: unknown;
}

interface EngineSocket {
  writeBuffer?: EnginePacket[];
  transport?: { socket?: { bufferedAmount?: number } };
}

/// What `bufferedBytes` has counted of a socket's `writeBuffer`: that array, how many of its
/// packets, and their bytes. engine.io only ever appends to the array and replaces it whole
/// when it flushes, so the packets counted stay counted until the array changes.
interface Counted {
  queue: EnginePacket[];
  packets: number;
  bytes: number;
}

const counted = new WeakMap<ScriptoriumSocket, Counted>();

/// Bytes the server holds for `socket` that its client has not read yet (estimated: string
/// packets count their length). Each packet is counted once: a slow reader's queue grows
/// until it is dropped, and walking every such queue whole on every sweep would let the sweep
/// outlast its interval once a few thousand sockets lag.
export function bufferedBytes(socket: ScriptoriumSocket): number {
  const engine = socket.conn as unknown as EngineSocket;
  let bytes = engine.transport?.socket?.bufferedAmount ?? 0;
  const queue = engine.writeBuffer;
  if (!queue || queue.length === 0) {
    // Not kept: the array counted last was flushed and may hold megabytes.
    counted.delete(socket);
    return bytes;
  }
  let seen = counted.get(socket);
  if (!seen || seen.queue !== queue || seen.packets > queue.length) {
    seen = { queue, packets: 0, bytes: 0 };
    counted.set(socket, seen);
  }
  for (let i = seen.packets; i < queue.length; i++) {
    const data = queue[i]!.data;
    if (typeof data === 'string') seen.bytes += data.length;
    else if (data instanceof Uint8Array) seen.bytes += data.byteLength;
  }
  seen.packets = queue.length;
  bytes += seen.bytes;
  return bytes;
}

/// Disconnects `socket` with `slow-consumer` when more than `maxBytes` wait for it. Returns
/// true when it did. The `closing` notice is best effort: a client that does not read may
/// never see it, and reconnecting catches it up by version either way.
export function dropIfSlow(socket: ScriptoriumSocket, maxBytes: number): boolean {
  if (!socket.connected || bufferedBytes(socket) <= maxBytes) return false;
  sendAway(
    socket,
    {
      code: 'slow-consumer',
      message: 'This connection did not read what the server sent in time: reconnect to catch up',
      retryAfterMs: 0,
    },
    true,
  );
  return true;
}

/// Tells `socket` why it is closed (`closing`, best effort) and disconnects it from the
/// namespace. With `closeConnection` the underlying connection is closed too, which releases
/// whatever was buffered for it (a slow consumer) or ends a client that misbehaves; without,
/// the connection stays for the other namespaces a client may share it with (an embedding
/// host's own, multiplexed on one connection by socket.io-client), which an expired token or a
/// restart is no reason to cut: closed, those sockets are told `io server disconnect`, from
/// which socket.io-client does not reconnect.
export function sendAway(
  socket: ScriptoriumSocket,
  notice: ClosingNotice,
  closeConnection = false,
): void {
  socket.emit('closing', notice);
  socket.disconnect(closeConnection);
}

/// Calls `visit` for every socket of `io` every `intervalMs` (an unref'd timer), with the time
/// of the sweep: the per-socket checks no message triggers (a slow consumer, an expired token)
/// share one pass, O(sockets) reads of a few fields. Returns a function that stops it.
export function sweepSockets(
  io: ScriptoriumNamespace,
  intervalMs: number,
  visit: (socket: ScriptoriumSocket, now: number) => void,
): () => void {
  const timer = setInterval(() => {
    try {
      const now = Date.now();
      for (const socket of io.sockets.values()) visit(socket, now);
    } catch {
      // A timer's throw would end the process; the next sweep tries again.
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
