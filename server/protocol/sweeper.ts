import { errorBody } from '../../schema/errors.js';
import { tokenExpired } from './answers.js';
import type { ProtocolOptions } from './options.js';
import { dropIfSlow, sendAway, sweepSockets } from './outbound.js';
import { hasExpired } from './socket.js';

/// How often the sweep visits every socket: how late, at most, an expired token is sent away
/// or a slow consumer dropped beyond what a message of its own would trigger.
export const sweepIntervalMs = 250;

/// Starts the sweep of `io`'s sockets, for what no message of theirs triggers: a socket whose
/// token expired is sent away (`closing unauthorized`, its connection kept for the host's
/// other namespaces; a client that can get a fresh token reconnects with it), or it would go
/// on receiving the document's steps for as long as it stays connected; one that does not read
/// what it is sent is dropped `slow-consumer`. Returns a function that stops the sweep.
export function startSweeper(options: ProtocolOptions): () => void {
  const { io, log, maxSocketBufferBytes } = options;
  return sweepSockets(io, sweepIntervalMs, (socket, now) => {
    if (!socket.connected) return;
    if (hasExpired(socket.data, now)) {
      sendAway(socket, { ...errorBody('unauthorized', tokenExpired), retryAfterMs: 0 });
    } else if (dropIfSlow(socket, maxSocketBufferBytes)) {
      log.info({ doc: socket.data.docId, address: socket.data.address }, 'slow consumer dropped');
    }
  });
}
