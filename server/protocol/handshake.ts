import { clientIdPattern, docIdPattern } from '../../schema/events.js';
import { errorBody, isErrorCode, type ErrorCode } from '../../schema/errors.js';
import { tokenExpired, tooManyHandshakes } from './answers.js';
import type { ProtocolOptions } from './options.js';
import { identityProblem, spellingProblem } from './requests.js';
import type { Authenticate, Identity, ScriptoriumSocket } from './socket.js';
import { TokenBucket } from './token_bucket.js';

// The handshake, in three steps: `check` (the handshake's own fields and the address's
// handshake rate, before the host is asked anything), `identify` (the host's `authenticate`)
// and `admit` (the user's handshake rate, the client id's owner, the caps, then the socket's
// state). Each step answers a refusal as a value; only `next()` turns it into the client's
// `connect_error`.

/// An error for `next()` in the handshake middleware: Socket.io sends `message` and `data` to
/// the client as its `connect_error`.
class HandshakeError extends Error {
  readonly data: ReturnType<typeof errorBody>;
  constructor(code: ErrorCode, detail?: string, retryAfterMs?: number) {
    const body = errorBody(code, detail, retryAfterMs);
    super(body.message);
    this.data = body;
  }
}

/// A handshake's own fields, once checked.
interface Handshake {
  doc: string;
  clientID: string;
  readOnly: boolean;
}

/// Installs the handshake middleware on `options.io`: a handshake is checked, identified by
/// the host's `authenticate` (when there is one) and admitted, or refused with its code as
/// its `connect_error`. The host's own errors are answered as `identify` says; a throw of
/// ours in `check`, or in `admit` after `authenticate`, is logged and refused `internal`
/// rather than answered with the error's own message.
export function attachHandshake(options: ProtocolOptions): void {
  const { io, log, authenticate } = options;
  io.use((socket, done) => {
    // A refused handshake's connection is closed once the refusal is written, unless it holds
    // sockets of other namespaces: it counts under the caps on connections until it closes,
    // and is of no use to its client (the reference client reconnects to retry).
    const next = (err?: HandshakeError): void => {
      done(err);
      if (err) setImmediate(() => closeIfUnused(socket));
    };
    const failed = (err: unknown): void => {
      log.error({ err }, 'handshake failed');
      next(new HandshakeError('internal'));
    };
    let checked: HandshakeError | Handshake;
    try {
      checked = check(options, socket);
    } catch (err) {
      return failed(err);
    }
    if (checked instanceof HandshakeError) return next(checked);
    if (!authenticate) return next(admit(options, socket, checked, null));
    identify(options, authenticate, socket, checked).then((identity) => {
      if (identity instanceof HandshakeError) return next(identity);
      try {
        next(admit(options, socket, checked, identity));
      } catch (err) {
        failed(err);
      }
    }, failed);
  });
}

/// The handshake's own fields, checked before the host's `authenticate` sees them: the server
/// is not draining, the address may make a handshake now, `query.doc` is a document id spelled
/// as a gateway routes it, `auth.clientID` a client id and `auth.readOnly` a boolean if given.
function check(options: ProtocolOptions, socket: ScriptoriumSocket): HandshakeError | Handshake {
  const { admission } = options;
  if (options.draining()) return new HandshakeError('shutting-down');
  // Before `authenticate`, which a handshake makes the server run; the user's own count
  // follows in `admit`.
  const wait = admission.mayHandshake(admission.address(socket.request), null);
  if (wait > 0) return new HandshakeError('rate-limited', tooManyHandshakes, wait);
  const doc = socket.handshake.query['doc'];
  if (typeof doc !== 'string' || !docIdPattern.test(doc)) {
    return new HandshakeError('bad-document-id');
  }
  const spelling = spellingProblem(socket.request.url, doc);
  if (spelling) return new HandshakeError('bad-document-id', spelling);
  const auth = socket.handshake.auth as Record<string, unknown> | undefined;
  const clientID = auth?.['clientID'];
  if (typeof clientID !== 'string' || !clientIdPattern.test(clientID)) {
    return new HandshakeError('bad-client-id');
  }
  const readOnly = auth?.['readOnly'];
  if (readOnly !== undefined && typeof readOnly !== 'boolean') {
    return new HandshakeError('bad-request');
  }
  return { doc, clientID, readOnly: readOnly === true };
}

/// Asks the host who this is. Resolves with the identity, or with the refusal: an error
/// `authenticate` throws with one of the protocol's codes (`forbidden`, `unavailable`, ...)
/// is answered with that code and its message; any other is `unauthorized` with the table's
/// message (its own could be anything, an internal address say) and is logged, since it may
/// be the host's outage rather than a bad credential. An identity that is not one is the
/// host's bug, answered `internal` and logged.
async function identify(
  options: ProtocolOptions,
  hook: Authenticate,
  socket: ScriptoriumSocket,
  handshake: Handshake,
): Promise<Identity | HandshakeError> {
  const { log } = options;
  let identity: unknown;
  try {
    identity = await hook({
      auth: (socket.handshake.auth ?? {}) as Record<string, unknown>,
      headers: socket.handshake.headers,
      query: socket.handshake.query,
      docId: handshake.doc,
    });
  } catch (err) {
    const code = (err as { code?: unknown } | null)?.code;
    if (isErrorCode(code)) {
      log.debug({ err, doc: handshake.doc }, 'connection refused by authenticate');
      const detail = err instanceof Error && err.message ? err.message : undefined;
      return new HandshakeError(code, detail);
    }
    log.warn({ err, doc: handshake.doc }, 'authenticate threw an error without a code');
    return new HandshakeError('unauthorized');
  }
  const problem = identityProblem(identity);
  if (problem) {
    log.error({ doc: handshake.doc, problem }, 'authenticate returned no valid identity');
    return new HandshakeError('internal');
  }
  if (options.draining()) return new HandshakeError('shutting-down');
  // Expired already (a host that verifies with a clock tolerance passes the token's own
  // expiry): admitted, it could do nothing but be refused and sent away again.
  if (((identity as Identity).expiresAt ?? Infinity) <= Date.now()) {
    return new HandshakeError('unauthorized', tokenExpired);
  }
  return identity as Identity;
}

/// The last checks (the user's handshake rate, the client id's owner, the caps), then the
/// socket's state and the release of what was counted. Synchronous from the caps on, so that
/// nothing can slip between counting and admitting. Returns the refusal, or undefined once
/// the socket is admitted.
function admit(
  options: ProtocolOptions,
  socket: ScriptoriumSocket,
  handshake: Handshake,
  identity: Identity | null,
): HandshakeError | undefined {
  // The connection may have closed while `authenticate` ran: nothing would ever release
  // what is counted below (its 'close' has been emitted, and Socket.io drops the socket
  // without a 'disconnect').
  if (socket.conn.readyState !== 'open') {
    return new HandshakeError('unavailable', 'The connection closed during the handshake');
  }
  const { admission, owners } = options;
  const { doc, clientID } = handshake;
  const user = identity?.user ?? null;
  const address = admission.address(socket.request);
  if (user !== null) {
    const wait = admission.mayHandshake(address, user);
    if (wait > 0) return new HandshakeError('rate-limited', tooManyHandshakes, wait);
  }
  if (user !== null && !owners.mayUse(doc, clientID, user, performance.now())) {
    return new HandshakeError('forbidden', 'This client id belongs to another user');
  }
  const cap = admission.enter(address, clientID, user, doc);
  if (cap !== null) return capRefusal(cap, user);
  settle(options, socket, handshake, identity, address);
  return undefined;
}

/// The refusal of a handshake over one of `Admission.enter`'s caps.
function capRefusal(cap: 'address' | 'client' | 'documents', user: string | null): HandshakeError {
  if (cap === 'address') {
    return new HandshakeError('too-many-connections', 'Too many connections from this address');
  }
  if (cap === 'client') {
    return new HandshakeError('too-many-connections', 'Too many connections with this client id');
  }
  return new HandshakeError(
    'too-many-documents',
    user === null
      ? 'This address has as many documents open as it may: close one and try again'
      : 'This user has as many documents open as it may: close one and try again',
  );
}

/// Gives an admitted socket its state (a writer's claim of its client id included), tells the
/// engine guard of it, and releases what `admit` counted exactly once: when the socket
/// disconnects, or when its connection closes first.
function settle(
  options: ProtocolOptions,
  socket: ScriptoriumSocket,
  handshake: Handshake,
  identity: Identity | null,
  address: string,
): void {
  const { admission, owners } = options;
  const { doc, clientID } = handshake;
  const user = identity?.user ?? null;
  const readOnly = handshake.readOnly || identity?.access === 'read';
  // Buckets and holds run on the monotonic clock: a step of the wall clock back would stop
  // their refills until it caught up (every request `rate-limited` meanwhile).
  const now = performance.now();
  socket.data = {
    docId: doc,
    clientID,
    readOnly,
    user,
    expiresAt: identity?.expiresAt ?? Infinity,
    room: null,
    address,
    batches: new TokenBucket(options.batchesPerSecond, options.batchesBurst, now),
    pulls: new TokenBucket(options.pullsPerSecond, options.pullsBurst, now),
    protocolErrors: 0,
    protocolErrorsSince: now,
    unproven: false,
  };
  // Only a writer claims the client id: its steps carry it. A reader's claim would only
  // lock the writer out.
  const claims = user !== null && !readOnly;
  if (claims) socket.data.unproven = owners.claim(doc, clientID, user);
  options.guard.track(socket);
  // A socket that never finished connecting has no 'disconnect'; one that left the namespace
  // has no 'close' until its connection goes: both are listened to.
  const conn = socket.conn;
  let released = false;
  const release = (): void => {
    // The flag, not only the `off` calls: an emitter calls the listeners it had when the
    // event began, and a transport's close emits the socket's 'disconnect' from within the
    // connection's 'close' (releasing twice would let a client past the caps).
    if (released) return;
    released = true;
    // Off the connection too: a client may leave and join the namespace again and again on
    // one connection, and each round would otherwise leave a listener on it.
    conn.off('close', release);
    socket.off('disconnect', release);
    admission.leave(address, clientID, user, doc);
    if (claims) owners.release(doc, clientID, performance.now());
  };
  conn.on('close', release);
  socket.on('disconnect', release);
}

/// Closes `socket`'s connection when no namespace is connected on it. Reads Socket.io's
/// client's `nsps` (its connected namespaces, a field it has kept across its 4.x line); a
/// connection whose client does not show one is left open.
function closeIfUnused(socket: ScriptoriumSocket): void {
  const nsps = (socket.client as unknown as { nsps?: unknown }).nsps;
  if (nsps instanceof Map && nsps.size === 0) socket.conn.close();
}
