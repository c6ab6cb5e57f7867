import type { Server, Socket } from 'socket.io';
import type { ClientToServerEvents, ServerToClientEvents } from '../../schema/index.js';
import type { Room } from '../core/room.js';
import type { TokenBucket } from './token_bucket.js';

// The socket types every part of the protocol shares, kept apart from the handlers so that
// presence, the payload gate and the outbound checks need not import the connection module
// (which imports them).

/// What the server keeps on each socket.
export interface SocketData {
  docId: string;
  clientID: string;
  readOnly: boolean;
  room: Room | null;
  /// The client's address (see `Admission.address`), counted while the socket is connected.
  address: string;
  /// `steps` batches, and `join` + `pull` requests, this socket may still send.
  batches: TokenBucket;
  pulls: TokenBucket;
  /// Malformed messages received so far (`maxProtocolErrors` closes the socket).
  protocolErrors: number;
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
