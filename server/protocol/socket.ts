import type { IncomingHttpHeaders } from 'node:http';
import type { Namespace, Server, Socket } from 'socket.io';
import type { ClientToServerEvents, ServerToClientEvents } from '../../schema/events.js';
import type { Room } from '../rooms/room.js';
import type { TokenBucket } from './token_bucket.js';

// The socket types every part of the protocol shares (the handshake, the handlers, presence,
// the payload gate, the outbound checks), kept apart from all of them so that none imports
// another for its types.

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
  /// Malformed messages counted against the socket, less those forgiven since
  /// (`maxProtocolErrors` closes the socket).
  protocolErrors: number;
  /// When the next strike is forgiven from (`performance.now()` ms): the first strike counted
  /// since the count was last 0, moved on by a forgiveness interval for each one forgiven.
  protocolErrorsSince: number;
  /// True from a writer's handshake whose claim of its client id found no binding until its
  /// first answer to `join` or `pull`: that answer says nothing of what was written under the
  /// id before (see `ClientOwners.claim`).
  unproven: boolean;
  /// Who the host's `authenticate` said this is; null in open mode (no `authenticate`).
  user: string | null;
  /// When the socket's credentials expire (ms since the epoch): its steps are refused
  /// `unauthorized` from then on, until it reconnects with fresh ones. Infinity: never.
  expiresAt: number;
}

/// What the host's `authenticate` hook is given for each connection: the handshake's `auth`
/// object (where clients put `token`), its HTTP headers and query, and the document asked for.
export interface AuthenticateContext {
  auth: Readonly<Record<string, unknown>>;
  headers: Readonly<IncomingHttpHeaders>;
  query: Readonly<Record<string, unknown>>;
  docId: string;
}

/// Who a connection is and what it may do, as `authenticate` answers.
export interface Identity {
  user: string;
  access: 'read' | 'write';
  /// When these credentials stop being valid (ms since the epoch, as `Date.now()`).
  expiresAt?: number;
}

/// The host's check of a connection: resolves with its identity, or throws to refuse it
/// (`unauthorized`; an error whose `code` is `'forbidden'` for a document out of scope).
export type Authenticate = (context: AuthenticateContext) => Identity | Promise<Identity>;

/// The Socket.io server a collab is attached to, typed with the protocol's events and
/// `SocketData`.
export type ScriptoriumServer = Server<
  ClientToServerEvents,
  ServerToClientEvents,
  Record<string, never>,
  SocketData
>;
/// The namespace the protocol is attached to (`/` unless the host chose another).
export type ScriptoriumNamespace = Namespace<
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

/// True once the token `data` was admitted with has expired at `now`. Its socket may then do
/// nothing, reads included, since expiry is how a token's access ends.
export function hasExpired(data: SocketData, now = Date.now()): boolean {
  return now >= data.expiresAt;
}

/// The Socket.io room of a document's sockets. Socket.io puts every socket in a room named by
/// its own id, and a socket id is a valid document id: named by the id alone, a document
/// called like another socket's id would share that socket's room, and the socket would
/// receive the document's steps and presence (and be sent away with it). No socket id holds a
/// space.
export function roomOf(docId: string): string {
  return `doc ${docId}`;
}
