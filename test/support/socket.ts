import { io, type Socket } from 'socket.io-client';

/// A bare Socket.io client on document `doc` (no CollabClient, no reconnection), for tests that
/// speak the wire protocol themselves. `auth` adds to (or, with `clientID`, replaces) the
/// client id; pass `{}` as `query` to leave the document out.
export function rawSocket(
  url: string,
  doc: string | Record<string, string>,
  auth: Record<string, unknown> | string,
): Socket {
  return io(url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: typeof doc === 'string' ? { doc } : doc,
    auth: typeof auth === 'string' ? { clientID: auth } : auth,
  });
}

/// Emits `event` with `args` and resolves with the acknowledgement. Rejects, naming the event,
/// when none comes within `askTimeoutMs` (the socket was closed, or the server never answered),
/// so that a test fails instead of hanging.
export function ask<T>(socket: Socket, event: string, ...args: unknown[]): Promise<T> {
  return new Promise((resolve, reject) =>
    socket.timeout(askTimeoutMs).emit(event, ...args, (error: Error | null, answer: T) => {
      if (error) reject(new Error(`no answer to '${event}' within ${askTimeoutMs} ms`));
      else resolve(answer);
    }),
  );
}

const askTimeoutMs = 15_000;
