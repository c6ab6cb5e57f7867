import type { Logger } from 'pino';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import {
  type ErrorAnswer,
  type StepsAnswer,
  type SyncAnswer,
  type SyncRequest,
} from '../../schema/events.js';
import { loadFailureCode } from './guard.js';
import { dropIfSlow } from './outbound.js';
import type { ScriptoriumSocket } from './socket.js';
import type { TokenBucket } from './token_bucket.js';
import type { Room } from '../rooms/room.js';

// What the protocol answers: refusals with their codes, and the answers to `join` and `pull`.
// Every refusal is a value from the error table (`errorBody`), so clients branch on its code.

/// The message of a refusal to a socket whose token has run out.
export const tokenExpired = 'The token has expired: reconnect with a fresh one';

/// The message of a handshake refused for its address's or user's handshake rate.
export const tooManyHandshakes = 'Too many connections opened in a short time: retry later';

/// The message of a reader's `join` to a document the store does not know.
export const readerCannotCreate =
  'No document has this id, and a read-only connection cannot create one: a writer must join it first';

/// An acknowledgement of a `join`, `pull` or `steps`.
export type Ack = (answer: SyncAnswer | StepsAnswer) => void;

/// A refusal with `code` and the table's message (or `message`), at the document's `version`
/// when one is given (a client at that version need not pull before it retries).
export function refusal(code: ErrorCode, message?: string, version?: number): ErrorAnswer {
  const body = { ok: false as const, ...errorBody(code, message) };
  return version === undefined ? body : { ...body, version };
}

/// A refusal `rate-limited` (with `retryAfterMs`) for a request over its socket's `bucket`, or
/// null when a token was there (and is taken).
export function overRate(bucket: TokenBucket, version?: number): ErrorAnswer | null {
  const wait = bucket.take(performance.now());
  if (wait === 0) return null;
  const body: ErrorAnswer = { ok: false, ...errorBody('rate-limited', undefined, wait) };
  if (version !== undefined) body.version = version;
  return body;
}

/// The acknowledgement of a request `args` (an event's arguments), or null when it is
/// malformed and has been answered: through the acknowledgement when it came without a
/// payload (the client would otherwise wait for an answer that never comes), or with a
/// `protocol-error` when there is none. The caller counts the null as a malformed message.
export function takeAck(socket: ScriptoriumSocket, event: string, args: unknown[]): Ack | null {
  const ack = args[args.length - 1];
  const message = `${event} expects a payload and an acknowledgement callback`;
  if (typeof ack === 'function') {
    if (args.length >= 2) return ack as Ack;
    (ack as (answer: ErrorAnswer) => void)(refusal('bad-request', message));
    return null;
  }
  socket.emit('protocol-error', { code: 'bad-request', message, event });
  return null;
}

/// The refusal of a `join` or `pull` whose document could not be loaded or its lease
/// confirmed (`err`, from `Rooms.get` or `Rooms.confirm`), with the error's `retryAfterMs`.
/// `unavailable` and `internal` are logged with `what` and answered with the table's message:
/// the store's own words (a path, an address inside the network) stay in the log, as a
/// handshake's do.
export function loadRefusal(log: Logger, docId: string, err: unknown, what: string): ErrorAnswer {
  const code = loadFailureCode(err);
  const ours = code === 'unavailable' || code === 'internal';
  if (ours) log.warn({ doc: docId, err }, what);
  const body = refusal(code, ours ? undefined : (err as Error)?.message);
  const retryAfterMs = (err as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  if (typeof retryAfterMs === 'number') body.retryAfterMs = retryAfterMs;
  return body;
}

/// Answers a `join` or `pull` from `room`, then drops the socket if the answer (a whole
/// document, say) left more than `maxBytes` waiting for it: a client that asks for documents
/// and never reads them must not pile them up in this process. Synchronous: the caller makes
/// and sends the answer in the same step as whatever it checked before.
export function answerSync(
  socket: ScriptoriumSocket,
  room: Room,
  request: SyncRequest,
  ack: (answer: SyncAnswer) => void,
  maxBytes: number,
): void {
  const data = socket.data;
  let answer = room.sync(request, data.clientID);
  if (data.unproven && answer.ok) {
    answer = asNewcomer(room, answer, data.clientID);
    data.unproven = false;
  }
  ack(answer);
  dropIfSlow(socket, maxBytes);
}

/// `answer` for a socket whose claim of `clientID` found no binding (`ClientOwners.claim`):
/// whatever was written under that id before was not shown to be this client's, so nothing
/// in the answer may say it was. A whole document loses its `acceptedThrough`; steps of which
/// any carries the id become the whole document instead (prosemirror-collab would take them
/// for its own unconfirmed steps, unapplied). The client then sends again what it has not
/// seen confirmed, by its own count (docs/protocol.md, "Client ids").
function asNewcomer(
  room: Room,
  answer: Extract<SyncAnswer, { ok: true }>,
  clientID: string,
): SyncAnswer {
  if ('doc' in answer) {
    if (answer.acceptedThrough === undefined) return answer;
    const { acceptedThrough: _dropped, ...rest } = answer;
    return rest;
  }
  if (!answer.clientIDs.includes(clientID)) return answer;
  // Without a version the room answers with its whole document, and without a client id with
  // no `acceptedThrough`. Synchronous, like the answer it replaces: the same version.
  return room.sync({});
}
