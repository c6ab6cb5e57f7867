import { io, type Socket } from 'socket.io-client';
import { errorBody, errors, isErrorCode, type ErrorBody } from '../schema/errors.js';
import { type ClientToServerEvents, type ServerToClientEvents } from '../schema/events.js';
import type { ClientParts, ClientState } from './client_state.js';

/// The client's socket.
export type ClientSocket = Socket<ServerToClientEvents, ClientToServerEvents>;

/// Opens the socket of `state`'s client: WebSocket only, the configured backoff, the document
/// in the query, and a handshake `auth` with the client id and a token fetched anew for every
/// handshake.
export function openSocket(state: ClientState): ClientSocket {
  const { options, delays } = state;
  return io(options.url, {
    transports: ['websocket'],
    reconnectionDelay: delays.reconnectDelayMs,
    reconnectionDelayMax: delays.reconnectDelayMaxMs,
    randomizationFactor: delays.reconnectJitter,
    ...options.socketOptions,
    query: { doc: options.docId },
    // Socket.io calls the function for every handshake, reconnections included.
    auth: (send: (auth: Record<string, unknown>) => void) => {
      const auth: Record<string, unknown> = {
        clientID: state.clientID,
        readOnly: options.readOnly === true,
      };
      const token = options.token;
      if (token === undefined) return send(auth);
      if (typeof token === 'string') return send({ ...auth, token });
      Promise.resolve()
        .then(token)
        .then(
          (fresh) => send({ ...auth, token: fresh }),
          // Without a token the server refuses the handshake (`unauthorized`), and the
          // client tries again later, calling the function again.
          () => send(auth),
        );
    },
  });
}

/// The socket's life cycle: what a connection, a disconnection and a refused handshake do to
/// the client's state, reconnections (for a fresh token, after an eviction, to another node),
/// their backoff, and closing or failing for good.
export class Connection {
  constructor(
    private readonly s: ClientState,
    private readonly parts: ClientParts,
    readonly socket: ClientSocket,
  ) {
    socket.on('connect', () => this.onConnect());
    socket.on('disconnect', (reason) => this.onDisconnect(reason));
    socket.on('connect_error', (err) => this.onConnectError(err));
    socket.on('closing', (notice) => {
      s.closingNotice = notice;
    });
  }

  /// Disconnects for good, stops every timer and rejects the waiters.
  close(): void {
    const s = this.s;
    s.link = { kind: 'closed' };
    s.clearTimers();
    this.socket.close();
    s.setStatus('offline');
    s.rejectWaiters('the client is closed');
  }

  /// Fails the client for good: the server refused it (`error` says why).
  fail(error: ErrorBody): void {
    const s = this.s;
    s.error = error;
    s.link = { kind: 'closed' };
    s.clearTimers();
    this.socket.close();
    s.setStatus('failed');
    s.rejectWaiters(error.message);
  }

  /// Drops the connection and opens a new one (a new handshake, routed anew by a gateway).
  /// Unconfirmed steps stay in the editor state and are sent again after the join.
  reconnectNow(): void {
    if (this.s.closed) return;
    this.socket.disconnect();
    this.s.reconnects++;
    this.socket.connect();
  }

  /// The token expired while connected (a request was refused `unauthorized`, or the server
  /// sent the socket away for it). With a way to get a fresh one, reconnect (the handshake
  /// asks for it) and send the unconfirmed steps again; they are kept. The first time at once;
  /// again and again (a handshake that keeps admitting a token the server then refuses) with a
  /// growing delay, since every round trip is a new handshake and join for the server. An
  /// accepted batch resets it, and so does a token that lasted longer than the longest wait.
  renewToken(message: string): void {
    const s = this.s;
    if (typeof s.options.token === 'function') {
      // A token that served longer than the longest wait was a good one (a reader, whose
      // batches never reset the count, renews at each expiry): start over. One that died
      // sooner (an issuer whose clock is behind the server's) keeps the wait growing, or a
      // client would come back once per token lifetime for good.
      const joinedAt = s.link.kind === 'joined' || s.link.kind === 'offline' ? s.link.joinedAt : -1;
      const lasted = joinedAt < 0 ? 0 : Date.now() - joinedAt;
      if (lasted > s.delays.reconnectDelayMaxMs) s.tokenRetries = 0;
      this.retryAfter(this.backoff(s.tokenRetries++), () => this.reconnectNow());
      return;
    }
    // A fixed token cannot be renewed here: stop, keeping the state and its unconfirmed
    // steps for the application to save or hand to a new client.
    this.fail(errorBody('unauthorized', message));
  }

  /// Runs `retry` after `delayMs`, as the client's one pending retry: nothing is sent before.
  retryAfter(delayMs: number, retry: () => void): void {
    this.s.retryTimer = setTimeout(() => {
      this.s.retryTimer = null;
      retry();
    }, delayMs);
  }

  /// The delay before retrying a retryable refusal: doubling from the reconnection delay up to
  /// its bound, with jitter, and back to the start after a success.
  nextRetryDelay(): number {
    const s = this.s;
    s.retryDelayMs = Math.min(
      Math.max(s.retryDelayMs * 2, s.delays.reconnectDelayMs),
      s.delays.reconnectDelayMaxMs,
    );
    return this.jittered(s.retryDelayMs);
  }

  /// A new connection: answers meant for the last one are ignored from now on, and the
  /// client joins again.
  private onConnect(): void {
    const s = this.s;
    s.generation++;
    if (s.delivery === 'in-flight') s.delivery = 'idle';
    if (!s.closed) s.link = { kind: 'joining' };
    s.closingNotice = null;
    s.setStatus('connecting');
    this.parts.join();
  }

  private onDisconnect(reason: Socket.DisconnectReason): void {
    const s = this.s;
    const link = s.link;
    if (link.kind !== 'closed')
      s.link = { kind: 'offline', joinedAt: link.kind === 'joined' ? link.joinedAt : -1 };
    if (s.delivery === 'in-flight') {
      // Its fate is unknown until the next join says whether the server has it.
      s.delivery = 'lost';
      // A server closes a connection whose message is far over its limit instead of answering
      // it: whatever the reason, the next try of that batch goes in halves.
      if (reason === 'transport close' || reason === 'transport error')
        s.batchLimit = Math.max(1, Math.floor(s.sent.steps.length / 2));
    } else if (s.delivery === 'reloading') {
      // The reload's answer is lost with the connection; the join after it catches up instead
      // (and a refused step sent again is refused again).
      s.delivery = 'idle';
    }
    s.generation++;
    s.clearTimers();
    s.setStatus('offline');
    if (s.closed) return;
    if (reason === 'io server disconnect') this.sentAway();
    else if (reason !== 'io client disconnect') {
      // Our own `reconnectNow` counted it already.
      s.reconnects++;
    }
  }

  /// The server sent us away on purpose (shutdown, a reload of its copy, a slow reader).
  /// Socket.io does not reconnect by itself after that; come back after the hinted delay,
  /// with jitter, unless the reason says coming back cannot help (`too-many-errors`).
  private sentAway(): void {
    const s = this.s;
    const notice = s.closingNotice;
    if (notice?.code === 'unauthorized') {
      this.renewToken(notice.message);
      return;
    }
    if (notice && isErrorCode(notice.code) && !errors[notice.code].retryable) {
      this.fail(errorBody(notice.code, notice.message));
      return;
    }
    // Evictions that keep coming (a document whose room fails again on every load) wait
    // longer each time; one after a quiet spell of a minute starts over.
    const now = Date.now();
    if (now - s.lastEvictionAt > 60_000) s.evictions = 0;
    s.lastEvictionAt = now;
    const hint = Math.max(notice?.retryAfterMs ?? 1000, this.backoff(s.evictions++));
    this.retryAfter(hint + Math.random() * Math.max(hint, 250), () => {
      s.reconnects++;
      this.socket.connect();
    });
  }

  private onConnectError(err: Error & { data?: unknown }): void {
    const data = err.data as Partial<ErrorBody> | undefined;
    if (!data || !isErrorCode(data.code)) return; // a transport error: Socket.io retries
    // A refused token is worth another try only when the client can get a fresh one.
    const refreshable = data.code === 'unauthorized' && typeof this.s.options.token === 'function';
    if (!data.retryable && !refreshable) {
      this.fail(errorBody(data.code, data.message));
      return;
    }
    // Refused by the server's handshake check but retryable (shutting down): Socket.io does
    // not retry middleware refusals itself.
    this.retryAfter(1000 + Math.random() * 1000, () => this.socket.connect());
  }

  /// The delay before the `attempt`th retry of a kind (0: at once), doubling from the
  /// reconnection delay up to its bound, with the configured jitter.
  private backoff(attempt: number): number {
    if (attempt === 0) return this.jittered(0);
    const { reconnectDelayMs, reconnectDelayMaxMs } = this.s.delays;
    return this.jittered(Math.min(reconnectDelayMs * 2 ** (attempt - 1), reconnectDelayMaxMs));
  }

  /// `delay` spread by the configured jitter (0–1) either way, so that clients sent away
  /// together do not come back together.
  private jittered(delay: number): number {
    return delay * (1 + (Math.random() - 0.5) * this.s.delays.reconnectJitter);
  }
}
