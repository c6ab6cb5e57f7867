import { attachHandlers } from './handlers.js';
import { attachHandshake } from './handshake.js';
import type { ProtocolOptions } from './options.js';
import type { ScriptoriumSocket } from './socket.js';
import { startSweeper } from './sweeper.js';

/// Wires the protocol onto `options.io`: the handshake (document id from `query.doc`, client
/// id from `auth.clientID`, the host's `authenticate`, the caps per address, client id and
/// user; refused `shutting-down` while `options.draining()`), the `join`, `pull`, `steps` and
/// `presence` handlers of each admitted socket, each behind the payload gate and its socket's
/// token bucket, and the sweep of the sockets (expired tokens, slow consumers). Refusals made
/// here, before a batch reaches its room, are reported to `options.observer` like the others.
/// Returns a function that stops the sweep, for shutdown.
export function attachProtocol(options: ProtocolOptions): () => void {
  attachHandshake(options);
  const stopSweeping = startSweeper(options);
  options.io.on('connection', (socket: ScriptoriumSocket) => attachHandlers(options, socket));
  return stopSweeping;
}
