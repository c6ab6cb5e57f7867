import type { Logger } from 'pino';
import { type JsonLimits } from '../../schema/json_limits.js';
import {
  clientIdPattern,
  docIdPattern,
  type BatchLimits,
  type ErrorAnswer,
  type StepsAnswer,
  type SyncAnswer,
  type SyncRequest,
} from '../../schema/events.js';
import { errorBody, isErrorCode, type ErrorCode } from '../../schema/errors.js';
import type { Admission } from './admission.js';
import { eventName, guarded, handlerFailed, loadFailureCode, payloadGate } from './guard.js';
import { dropIfSlow, sendAway, sweepSockets } from './outbound.js';
import { TokenBucket } from './token_bucket.js';
import type { ClientOwners } from './client_owners.js';
import type { EngineGuard } from './engine_guard.js';
import { attachPresence } from './presence.js';
import {
  hasExpired,
  roomOf,
  type Authenticate,
  type Identity,
  type ScriptoriumNamespace,
  type ScriptoriumSocket,
  type SocketData,
} from './socket.js';
import type { Rooms } from '../rooms/registry.js';
import type { Room } from '../rooms/room.js';
import type { BatchObserver } from '../rooms/room_options.js';

/// What `attachProtocol` enforces per socket, from the server configuration.
export interface ProtocolOptions {
  /// Bounds of every incoming payload (message bytes, JSON depth, string length).
  json: Readonly<JsonLimits>;
  admission: Admission;
  /// Client ids bound to users (one for every namespace of a collab, as `admission` is).
  owners: ClientOwners;
  /// The connections' counts and frame budgets (one per collab, as `admission` is): told of
  /// every socket admitted, so that a connection closed over budget tells it why.
  guard: EngineGuard;
  batchesPerSecond: number;
  batchesBurst: number;
  pullsPerSecond: number;
  pullsBurst: number;
  /// Malformed messages a socket may send in a burst: the count at which it is closed.
  maxProtocolErrors: number;
  /// One counted malformed message is forgiven per this many milliseconds.
  protocolErrorForgiveMs: number;
  maxSocketBufferBytes: number;
  /// Told to every client in its `join` answers, to size its batches by.
  batchLimits: Readonly<BatchLimits>;
  /// The host's check of each connection; null: open mode, anyone may read and write.
  authenticate: Authenticate | null;
}

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

/// Wires the protocol onto `io`: the handshake check (document id from `query.doc`, client id
/// from `auth.clientID`, the caps per address and per client id) and the `join`, `pull` and
/// `steps` handlers, each behind the payload gate and its socket's token bucket. `draining`
/// tells whether the server is shutting down (new connections are refused with
/// `shutting-down`). Refusals made here, before a batch reaches its room, are reported to
/// `observer` like the others. Returns a function that stops the sweep of the sockets
/// (expired tokens, slow consumers), for shutdown.
export function attachProtocol(
  io: ScriptoriumNamespace,
  rooms: Rooms,
  log: Logger,
  draining: () => boolean,
  observer: BatchObserver | null,
  options: ProtocolOptions,
): () => void {
  const { admission, authenticate, owners, guard } = options;

  io.use((socket, done) => {
    // A refused handshake's connection is closed once the refusal is written, unless it holds
    // sockets of other namespaces: it counts under the caps on connections until it closes,
    // and is of no use to its client (the reference client reconnects to retry).
    const next = (err?: HandshakeError): void => {
      done(err);
      if (err) setImmediate(() => closeIfUnused(socket));
    };
    let checked: HandshakeError | Handshake;
    try {
      checked = check(socket);
    } catch (err) {
      log.error({ err }, 'handshake failed');
      return next(new HandshakeError('internal'));
    }
    if (checked instanceof HandshakeError) return next(checked);
    if (!authenticate) return next(admit(socket, checked, null));
    identify(authenticate, socket, checked).then(
      (identity) => {
        if (identity instanceof HandshakeError) return next(identity);
        try {
          next(admit(socket, checked, identity));
        } catch (err) {
          log.error({ err }, 'handshake failed');
          next(new HandshakeError('internal'));
        }
      },
      (err: unknown) => {
        log.error({ err }, 'handshake failed');
        next(new HandshakeError('internal'));
      },
    );
  });

  /// The handshake's own fields, checked before the host's `authenticate` sees them.
  function check(socket: ScriptoriumSocket): HandshakeError | Handshake {
    if (draining()) return new HandshakeError('shutting-down');
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
    hook: Authenticate,
    socket: ScriptoriumSocket,
    handshake: Handshake,
  ): Promise<Identity | HandshakeError> {
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
    if (draining()) return new HandshakeError('shutting-down');
    // Expired already (a host that verifies with a clock tolerance passes the token's own
    // expiry): admitted, it could do nothing but be refused and sent away again.
    if (((identity as Identity).expiresAt ?? Infinity) <= Date.now()) {
      return new HandshakeError('unauthorized', tokenExpired);
    }
    return identity as Identity;
  }

  /// The last checks (the client id's owner, the caps) and the socket's state. Synchronous
  /// from the caps on, so that nothing can slip between counting and admitting.
  function admit(
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
    const { doc, clientID } = handshake;
    const user = identity?.user ?? null;
    const readOnly = handshake.readOnly || identity?.access === 'read';
    const address = admission.address(socket.request);
    if (user !== null) {
      const wait = admission.mayHandshake(address, user);
      if (wait > 0) return new HandshakeError('rate-limited', tooManyHandshakes, wait);
    }
    if (user !== null && !owners.mayUse(doc, clientID, user, performance.now())) {
      return new HandshakeError('forbidden', 'This client id belongs to another user');
    }
    const cap = admission.enter(address, clientID, user, doc);
    if (cap === 'address') {
      return new HandshakeError('too-many-connections', 'Too many connections from this address');
    }
    if (cap === 'client') {
      return new HandshakeError('too-many-connections', 'Too many connections with this client id');
    }
    if (cap === 'documents') {
      return new HandshakeError(
        'too-many-documents',
        user === null
          ? 'This address has as many documents open as it may: close one and try again'
          : 'This user has as many documents open as it may: close one and try again',
      );
    }
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
    guard.track(socket);
    // Counted from here, and released once: when the socket disconnects, or when its
    // connection closes first (a socket that never finished connecting has no 'disconnect';
    // one that left the namespace has no 'close' until its connection goes).
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
    return undefined;
  }

  /// Answers a `pull`, or a second `join`, from `room`, which `socket` has joined. While the
  /// room's lease is unconfirmed the answer waits for a renewal, as a first join's does in
  /// `Rooms.get`: answered once it is held, refused `moved` when it is lost and `unavailable`
  /// (with `retryAfterMs`) when it fails. The answer is made and sent in one synchronous step
  /// either way: the socket receives the document's broadcasts meanwhile, and after its answer
  /// none older than the answer's version.
  function answerJoined(
    socket: ScriptoriumSocket,
    room: Room,
    request: SyncRequest,
    ack: (answer: SyncAnswer) => void,
    event: 'join' | 'pull',
  ): void {
    if (room.leaseFresh()) {
      return answerSync(socket, room, request, ack, options.maxSocketBufferBytes);
    }
    rooms
      .confirm(room)
      .then(
        () => {
          if (!socket.connected) return;
          // The token may have run out during the wait.
          if (hasExpired(socket.data)) {
            return ack(refusal('unauthorized', tokenExpired, room.publishedVersion));
          }
          answerSync(socket, room, request, ack, options.maxSocketBufferBytes);
        },
        (err: unknown) => ack(loadRefusal(socket, err, `${event} refused`)),
      )
      // As for a join's load: a throw in either continuation is answered, never left an
      // unhandled rejection.
      .catch((err: unknown) => handlerFailed(socket, event, log, err, ack));
  }

  /// The refusal of a `join` or `pull` whose document could not be loaded or its lease
  /// confirmed (`err`, from `Rooms.get` or `Rooms.confirm`), with the error's `retryAfterMs`;
  /// `unavailable` and `internal` are logged with `what`.
  function loadRefusal(socket: ScriptoriumSocket, err: unknown, what: string): ErrorAnswer {
    const code = loadFailureCode(err);
    // The store's own words (a path, an address inside the network) stay in the log: the
    // client gets the table's message for these two, as a handshake does.
    const ours = code === 'unavailable' || code === 'internal';
    if (ours) log.warn({ doc: socket.data.docId, err }, what);
    const body = refusal(code, ours ? undefined : (err as Error)?.message);
    const retryAfterMs = (err as { retryAfterMs?: unknown } | null)?.retryAfterMs;
    if (typeof retryAfterMs === 'number') body.retryAfterMs = retryAfterMs;
    return body;
  }

  /// Counts a malformed message of `socket`; at `maxProtocolErrors` counted the socket is
  /// closed with `too-many-errors`. A leaky bucket: while any are counted, one is forgiven
  /// every `protocolErrorForgiveMs`, worked out here from the clock rather than by a timer per
  /// socket. A client with honest refusals it could not foresee (a step the server refuses for
  /// a reason the client cannot check, struck with its batch, then alone) thus keeps its
  /// connection for hours of editing, while one that sends them in a loop is still closed
  /// after its burst. Forgiven whole intervals at a time, so a burst of `maxProtocolErrors`
  /// within one interval closes the socket, as before.
  function strike(socket: ScriptoriumSocket): void {
    const data = socket.data;
    const now = performance.now();
    if (data.protocolErrors > 0) {
      const forgiven = Math.floor(
        (now - data.protocolErrorsSince) / options.protocolErrorForgiveMs,
      );
      if (forgiven >= data.protocolErrors) {
        data.protocolErrors = 0;
      } else if (forgiven > 0) {
        data.protocolErrors -= forgiven;
        // Not `now`: the part of an interval already served counts toward the next one.
        data.protocolErrorsSince += forgiven * options.protocolErrorForgiveMs;
      }
    }
    // An empty bucket does not leak: a quiet hour earns no credit for the next burst.
    if (data.protocolErrors === 0) data.protocolErrorsSince = now;
    if (++data.protocolErrors < options.maxProtocolErrors || !socket.connected) return;
    sendAway(socket, { ...errorBody('too-many-errors'), retryAfterMs: 0 }, true);
  }

  /// A refusal for a request over its socket's bucket, or null when a token was there.
  function overRate(bucket: TokenBucket, version?: number): ErrorAnswer | null {
    const wait = bucket.take(performance.now());
    if (wait === 0) return null;
    const body: ErrorAnswer = { ok: false, ...errorBody('rate-limited', undefined, wait) };
    if (version !== undefined) body.version = version;
    return body;
  }

  // Every 250 ms: a socket whose token expired is sent away (`closing unauthorized`; a client
  // that can get a fresh token reconnects with it), or it would go on receiving the document's
  // steps for as long as it stays connected; one that does not read what it is sent is dropped.
  const stopSweeping = sweepSockets(io, 250, (socket, now) => {
    if (!socket.connected) return;
    if (hasExpired(socket.data, now)) {
      sendAway(socket, { ...errorBody('unauthorized', tokenExpired), retryAfterMs: 0 });
    } else if (dropIfSlow(socket, options.maxSocketBufferBytes)) {
      log.info({ doc: socket.data.docId, address: socket.data.address }, 'slow consumer dropped');
    }
  });

  io.on('connection', (socket: ScriptoriumSocket) => {
    // First, so no handler (presence's included) ever sees a payload over the limits.
    socket.use(payloadGate(socket, options.json, () => strike(socket)));
    attachPresence(
      io,
      socket,
      log,
      () => strike(socket),
      (shown) => {
        // A reader binds no client id, so it may have connected with one a writer took since:
        // its caret must not be shown as that writer's.
        const { readOnly, user, clientID, docId } = shown.data;
        return (
          !readOnly || user === null || owners.mayUse(docId, clientID, user, performance.now())
        );
      },
    );

    socket.on(
      'join',
      guarded(socket, 'join', log, (...args: unknown[]) => {
        const ack = takeAck(socket, 'join', args);
        if (!ack) return strike(socket);
        // A join's answers tell the client how big its batches may be.
        const answer = (sync: SyncAnswer): void =>
          ack(sync.ok ? { ...sync, limits: options.batchLimits } : sync);
        const request = parseSyncRequest(args[0]);
        if (typeof request === 'string') {
          strike(socket);
          return ack(refusal('bad-request', request));
        }
        if (hasExpired(socket.data)) return ack(refusal('unauthorized', tokenExpired));
        const limited = overRate(socket.data.pulls);
        if (limited) return ack(limited);
        // A second join answers like a pull.
        if (socket.data.room)
          return answerJoined(socket, socket.data.room, request, answer, 'join');
        const address = socket.data.address;
        // A reader may follow a document, not make one: one the store does not know is
        // answered `not-found` and nothing is created for it, and one another node serves is
        // answered `moved` without asking that node to hand it over (a reader must not move
        // a document away from its editors).
        const create = socket.data.readOnly
          ? false
          : {
              take: () => admission.mayCreate(address),
              giveBack: () => admission.giveBack(address),
            };
        rooms
          .get(socket.data.docId, create)
          .then(
            (room) => {
              // The socket may have left while the document loaded, or joined twice.
              if (!socket.connected) return;
              if (socket.data.room) {
                return answerJoined(socket, socket.data.room, request, answer, 'join');
              }
              if (!room) return ack(refusal('not-found', readerCannotCreate));
              if (room.state !== 'open') return ack(refusal('unavailable'));
              // Joining the Socket.io room and answering happen in one synchronous step: every
              // broadcast after the answer's version reaches this socket, and none before it.
              void socket.join(roomOf(room.docId));
              socket.data.room = room;
              rooms.attach(room);
              // Its lease was confirmed by `get` just before.
              answerSync(socket, room, request, answer, options.maxSocketBufferBytes);
            },
            (err: unknown) => ack(loadRefusal(socket, err, 'document load failed')),
          )
          // A throw in either continuation is past `guarded`: answered and logged the same way,
          // not left an unhandled rejection (which ends a host that has no handler for them).
          .catch((err: unknown) => handlerFailed(socket, 'join', log, err, ack));
      }),
    );

    socket.on(
      'pull',
      guarded(socket, 'pull', log, (...args: unknown[]) => {
        const ack = takeAck(socket, 'pull', args);
        if (!ack) return strike(socket);
        const request = parseSyncRequest(args[0]);
        if (typeof request === 'string') {
          strike(socket);
          return ack(refusal('bad-request', request));
        }
        const room = socket.data.room;
        if (!room) {
          strike(socket);
          return ack(refusal('bad-request', 'Send join before pull'));
        }
        if (hasExpired(socket.data)) {
          return ack(refusal('unauthorized', tokenExpired, room.publishedVersion));
        }
        const limited = overRate(socket.data.pulls, room.publishedVersion);
        if (limited) return ack(limited);
        answerJoined(socket, room, request, ack, 'pull');
      }),
    );

    socket.on(
      'steps',
      guarded(socket, 'steps', log, (...args: unknown[]) => {
        const received = performance.now();
        const ack = takeAck(socket, 'steps', args) as ((answer: StepsAnswer) => void) | null;
        if (!ack) return strike(socket);
        const room = socket.data.room;
        const refused =
          checkSteps(socket.data, room, args[0], draining()) ??
          overRate(socket.data.batches, room?.publishedVersion);
        if (refused) {
          if (refused.code === 'bad-request' || refused.code === 'invalid-step') strike(socket);
          ack(refused);
          if (observer) {
            const now = performance.now();
            observer.record(socket.data.docId, refused.code, 0, received, now, NaN, now);
          }
          return;
        }
        const { version, steps } = args[0] as { version: number; steps: unknown[] };
        room!.receive(version, steps, socket.data.clientID, ack, received, socket.data.user);
      }),
    );

    // After the payload gate (a middleware, unlike `onAny`, runs after the ones before it),
    // so an unknown event over a limit is answered and counted once.
    socket.use((packet, next) => {
      const event = packet[0];
      if (event === 'join' || event === 'pull' || event === 'steps' || event === 'presence') {
        return next();
      }
      const name = eventName(event);
      strike(socket);
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
          rooms.detach(room);
        }
      }),
    );
  });
  return stopSweeping;
}

const tokenExpired = 'The token has expired: reconnect with a fresh one';

/// Closes `socket`'s connection when no namespace is connected on it. Reads Socket.io's
/// client's `nsps` (its connected namespaces, a field it has kept across its 4.x line); a
/// connection whose client does not show one is left open.
function closeIfUnused(socket: ScriptoriumSocket): void {
  const nsps = (socket.client as unknown as { nsps?: unknown }).nsps;
  if (nsps instanceof Map && nsps.size === 0) socket.conn.close();
}

const tooManyHandshakes = 'Too many connections opened in a short time: retry later';

const readerCannotCreate =
  'No document has this id, and a read-only connection cannot create one: a writer must join it first';

/// A handshake's own fields, once checked.
interface Handshake {
  doc: string;
  clientID: string;
  readOnly: boolean;
}

/// Why `value` is not an `Identity`, or null when it is one.
function identityProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return 'not an object';
  const { user, access, expiresAt } = value as Record<string, unknown>;
  if (typeof user !== 'string' || user === '' || user.length > 256) {
    return 'user must be a string of 1 to 256 characters';
  }
  if (access !== 'read' && access !== 'write') return "access must be 'read' or 'write'";
  if (expiresAt !== undefined && (typeof expiresAt !== 'number' || Number.isNaN(expiresAt))) {
    return 'expiresAt must be a number (ms since the epoch) when given';
  }
  return null;
}

/// A `doc` value as a gateway can read it: the id's own characters, with ':' as it is or
/// percent-encoded (socket.io-client encodes it).
const routableDoc = /^(?:[A-Za-z0-9._:-]|%3[Aa])+$/;
/// A path as nginx matches it: no empty or dot segment, no escape (it normalises those before
/// choosing a location, and passes the path on as sent).
const routablePath = /^(?:\/[^/.%][^/%]*)*\/?$/;

/// Why the handshake's URL names its document otherwise than a gateway in front would route it
/// (null when it does not). The gateway hashes `$arg_doc`: the first query key that is `doc` in
/// any letter case, its value decoded only of `%3A` (deploy/nginx.ts), while Engine.IO reads
/// the last key that decodes to exactly `doc`, decoded whole. So: one key that is `doc` in
/// any spelling, spelled `doc`, whose value escapes nothing but ':'. Else `?DOC=a&doc=b`, or
/// `?doc=%61`, would be served as a document the gateway sends to another node (a writer
/// there has two nodes take the document from each other). Likewise a path the gateway
/// normalises (`/socket.io/../docs/x?doc=y` is routed as `GET /docs/x`, and Engine.IO takes it
/// as its own).
function spellingProblem(url: string | undefined, doc: string): string | null {
  const queryAt = url?.indexOf('?') ?? -1;
  if (queryAt < 0) return 'The document must be named in the query, as doc';
  if (!routablePath.test(url!.slice(0, queryAt))) {
    return 'The path must have no empty or dot segments and no escapes';
  }
  let value: string | null = null;
  let keys = 0;
  for (const pair of url!.slice(queryAt + 1).split('&')) {
    const equals = pair.indexOf('=');
    const key = equals < 0 ? pair : pair.slice(0, equals);
    if (key.toLowerCase() !== 'doc' && decodeKey(pair).toLowerCase() !== 'doc') continue;
    keys++;
    if (key === 'doc' && equals >= 0) value = pair.slice(equals + 1);
  }
  if (keys !== 1 || value === null) {
    return 'The document must be named once, as doc (in lower case, and no other key spelled so)';
  }
  // The check of `doc` itself already passed: this is its spelling.
  if (!routableDoc.test(value) || value.replace(/%3a/gi, ':') !== doc) {
    return "The document id must be sent with no escapes but ':' as %3A";
  }
  return null;
}

/// A query key (of a pair without '&') as URLSearchParams, so Engine.IO, decodes it. After
/// an '&', as in the query: alone, a leading '?' would be dropped.
function decodeKey(pair: string): string {
  return new URLSearchParams(`&${pair}`).keys().next().value ?? '';
}

/// Answers a `join` or `pull`, then drops the socket if the answer (a whole document, say)
/// left more waiting for it than a socket may hold: a client that asks for documents and never
/// reads them must not pile them up in this process.
function answerSync(
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

function takeAck(
  socket: ScriptoriumSocket,
  event: string,
  args: unknown[],
): ((answer: SyncAnswer | StepsAnswer) => void) | null {
  const ack = args[args.length - 1];
  const message = `${event} expects a payload and an acknowledgement callback`;
  if (typeof ack === 'function') {
    if (args.length >= 2) return ack as (answer: SyncAnswer | StepsAnswer) => void;
    // An acknowledgement without a payload: answered through it, or the client would wait
    // for an answer that never comes.
    (ack as (answer: ErrorAnswer) => void)(refusal('bad-request', message));
    return null;
  }
  socket.emit('protocol-error', { code: 'bad-request', message, event });
  return null;
}

/// Checks a `steps` message before it reaches the room: the socket must have joined and may
/// write, and the payload must be `{version, steps}` with a non-empty array of objects. Returns
/// the refusal, or null when the room should take it.
function checkSteps(
  data: SocketData,
  room: Room | null,
  request: unknown,
  draining: boolean,
): ErrorAnswer | null {
  if (!room) return refusal('bad-request', 'Send join before steps');
  const version = room.publishedVersion;
  if (draining) return refusal('shutting-down', undefined, version);
  if (data.readOnly) return refusal('forbidden', 'This connection is read-only', version);
  if (hasExpired(data)) return refusal('unauthorized', tokenExpired, version);
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    return refusal('bad-request', 'steps expects {version, steps}', version);
  }
  const fields = request as Record<string, unknown>;
  if (!isVersion(fields['version'])) {
    return refusal('bad-request', 'version must be a whole number ≥ 0', version);
  }
  const steps = fields['steps'];
  if (!Array.isArray(steps) || steps.length === 0) {
    return refusal('bad-request', 'steps must be a non-empty array', version);
  }
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    if (typeof step !== 'object' || step === null || Array.isArray(step)) {
      return refusal('invalid-step', `Step ${i} is not an object`, version);
    }
  }
  return null;
}

function refusal(code: ErrorCode, message?: string, version?: number): ErrorAnswer {
  const body = { ok: false as const, ...errorBody(code, message) };
  return version === undefined ? body : { ...body, version };
}

function isVersion(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/// Narrows a `join`/`pull` payload; returns a reason string when it is malformed.
function parseSyncRequest(value: unknown): SyncRequest | string {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value))
    return 'expects an object {version?, epoch?}';
  const { version, epoch } = value as Record<string, unknown>;
  if (version !== undefined && !isVersion(version)) return 'version must be a whole number ≥ 0';
  if (epoch !== undefined && (typeof epoch !== 'string' || epoch.length > 64)) {
    return 'epoch must be a string of at most 64 characters';
  }
  const request: SyncRequest = {};
  if (version !== undefined) request.version = version;
  if (epoch !== undefined) request.epoch = epoch as string;
  return request;
}
