import type { IncomingMessage } from 'node:http';
import type { Server } from 'socket.io';
import { sendAway } from './outbound.js';
import type { ScriptoriumSocket } from './socket.js';

/// What `EngineGuard` bounds, from the server configuration (0 = no limit).
export interface EngineLimits {
  maxConnectionsPerIp: number;
  maxConnections: number;
  handshakeTimeoutMs: number;
  framesPerSecond: number;
  framesBurst: number;
  frameBytesPerSecond: number;
  frameBytesBurst: number;
  /// The budget of all the connections of one address together, per second; its bucket holds
  /// two seconds' worth (0 = no limit).
  addressFramesPerSecond: number;
  addressFrameBytesPerSecond: number;
}

/// Engine.IO's `allowRequest` option.
type AllowRequest = (
  req: IncomingMessage,
  callback: (err: string | null | undefined, ok: boolean) => void,
) => void;

/// An Engine.IO packet as its socket's `packet` event gives it, before Socket.io decodes it.
interface EnginePacket {
  type: string;
  data?: unknown;
}

/// The fields of an Engine.IO socket (one connection) this guard uses. Engine.IO's own type is
/// not exported by socket.io.
interface EngineConnection {
  readonly request: IncomingMessage;
  readonly readyState: string;
  /// A polling transport waiting for its client's next request to close holds its close here
  /// (a field Engine.IO has kept across its 6.x line).
  readonly transport?: { shouldClose?: (() => void) | null };
  on(event: 'packet', listener: (packet: EnginePacket) => void): unknown;
  once(event: 'close', listener: () => void): unknown;
  close(discard?: boolean): unknown;
}

/// Connections an address may hold beyond `maxConnectionsPerIp` (at most as many again): room
/// for handshakes the protocol is refusing, with a code, while the address's sockets fill its
/// cap. A refused handshake's connection is closed at once, so this much is enough; without
/// it the client of a full address would get a bare HTTP 403 instead of
/// `too-many-connections`.
export const handshakeHeadroom = 16;

/// The most connections `maxConnectionsPerIp` lets one address hold (0: no limit).
export function connectionsPerAddress(maxConnectionsPerIp: number): number {
  if (maxConnectionsPerIp === 0) return 0;
  return maxConnectionsPerIp + Math.min(maxConnectionsPerIp, handshakeHeadroom);
}

/// A handshake `allowRequest` let through is counted at once: Engine.IO makes the connection
/// after an await, and concurrent handshakes must not all pass a cap in between. One whose
/// connection never came (a websocket upgrade the client dropped) is given back after this.
const pendingForgetMs = 10_000;

/// How often, and how far apart, a connection still open past the handshake timeout is looked
/// at again for Socket.io's close (see `connected`).
const closeLooks = 5;
const closeLookMs = 100;

/// What each Engine.IO connection may cost before the protocol sees anything of it. Counted
/// from its first request, whether or not it ever connects a Socket.io namespace: its place
/// under `connectionsPerAddress` (by the address `address` names, the same as the protocol's
/// caps use) and `maxConnections` in all; then a budget of frames and bytes per second, charged
/// for every frame it sends (any event, valid or not) on Engine.IO's `packet` event, before
/// Socket.io decodes it. A connection over its budget is sent `closing {code: 'rate-limited'}`
/// on the protocol's sockets and closed: what it sent since is not decoded. One guard serves
/// every namespace a collab is attached to, once per Engine.IO server.
export class EngineGuard {
  private readonly perAddress = new Map<string, number>();
  /// The frame budget each address's connections share, while it has any.
  private readonly addressBudgets = new Map<string, FrameBudget>();
  private total = 0;
  /// Handshakes allowed whose connection is not made yet, in the order they were allowed.
  private readonly pending = new Map<IncomingMessage, { address: string; at: number }>();
  private readonly engines = new WeakSet<object>();
  /// The protocol's sockets on each connection: those told why it closes.
  private readonly sockets = new WeakMap<object, Set<ScriptoriumSocket>>();
  private readonly perAddressCap: number;

  constructor(
    private readonly limits: EngineLimits,
    private readonly address: (request: IncomingMessage) => string,
  ) {
    this.perAddressCap = connectionsPerAddress(limits.maxConnectionsPerIp);
  }

  /// Guards `io`'s Engine.IO server: its `allowRequest` (the host's own, if any, asked first)
  /// refuses a handshake over the caps with HTTP 403, and every connection is counted and
  /// budgeted. Once per Engine.IO server; again is a no-op.
  attach(io: Server): void {
    const engine = io.engine;
    if (this.engines.has(engine)) return;
    this.engines.add(engine);
    const host = engine.opts.allowRequest as AllowRequest | undefined;
    const ours: AllowRequest = (req, callback) => {
      const refused = this.reserve(req, performance.now());
      callback(refused, refused === null);
    };
    engine.opts.allowRequest = host
      ? (req, callback) => host(req, (err, ok) => (ok ? ours(req, callback) : callback(err, false)))
      : ours;
    engine.on('connection', (conn: EngineConnection) => this.connected(conn));
    // A handshake that failed after `allowRequest` let it through.
    engine.on('connection_error', (error: { req?: IncomingMessage }) => {
      if (error.req) this.giveBack(error.req);
    });
  }

  /// Counts `socket` (admitted by the protocol) as one to tell when its connection is closed
  /// over budget, until it disconnects.
  track(socket: ScriptoriumSocket): void {
    const conn = socket.conn;
    let set = this.sockets.get(conn);
    if (!set) {
      set = new Set();
      this.sockets.set(conn, set);
    }
    set.add(socket);
    socket.once('disconnect', () => set.delete(socket));
  }

  /// Connections counted now: made, and allowed but not made yet.
  get size(): number {
    return this.total;
  }

  /// Connections counted for `address`.
  from(address: string): number {
    return this.perAddress.get(address) ?? 0;
  }

  /// Counts a handshake from `req`'s address in, or says why it may not be: the message of the
  /// refusal (Engine.IO answers it 403).
  private reserve(req: IncomingMessage, now: number): string | null {
    this.forgetPending(now);
    const address = this.address(req);
    const from = this.perAddress.get(address) ?? 0;
    if (this.perAddressCap > 0 && from >= this.perAddressCap) {
      return 'too-many-connections: too many connections from this address';
    }
    if (this.limits.maxConnections > 0 && this.total >= this.limits.maxConnections) {
      return 'too-many-connections: the server holds as many connections as it may';
    }
    this.perAddress.set(address, from + 1);
    this.total++;
    this.pending.set(req, { address, at: now });
    return null;
  }

  private giveBack(req: IncomingMessage): void {
    const pending = this.pending.get(req);
    if (!pending) return;
    this.pending.delete(req);
    this.release(pending.address);
  }

  private release(address: string): void {
    this.total--;
    const count = (this.perAddress.get(address) ?? 0) - 1;
    if (count > 0) {
      this.perAddress.set(address, count);
    } else {
      this.perAddress.delete(address);
      this.addressBudgets.delete(address);
    }
  }

  private forgetPending(now: number): void {
    for (const [req, pending] of this.pending) {
      if (now - pending.at < pendingForgetMs) return;
      this.pending.delete(req);
      this.release(pending.address);
    }
  }

  private connected(conn: EngineConnection): void {
    const pending = this.pending.get(conn.request);
    let address: string;
    if (pending) {
      this.pending.delete(conn.request);
      address = pending.address;
    } else {
      // Its reservation was forgotten, or another `allowRequest` replaced this guard's: counted
      // now, over the caps or not (refusing it here would leave its client a silent close).
      address = this.address(conn.request);
      this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + 1);
      this.total++;
    }
    let timer = setTimeout(() => finishClose(0), this.limits.handshakeTimeoutMs + 1);
    // Socket.io closes a connection that connected no namespace in `handshakeTimeoutMs`
    // (`connectTimeout`, set by the collab), but Engine.IO then waits for the client: a polling
    // transport for its next request, up to the 30 s `closeTimeout`, and a connection with
    // packets still buffered for the transport to drain first. One whose client never asks
    // again is closed here without waiting. Still open: Socket.io's timer has not run yet (a
    // loaded loop) or a namespace was connected; looked at again a few times, then left alone.
    const finishClose = (looks: number): void => {
      if (conn.readyState === 'closing') {
        const shouldClose = conn.transport?.shouldClose;
        if (shouldClose) shouldClose();
        else conn.close(true);
      } else if (conn.readyState === 'open' && looks < closeLooks) {
        timer = setTimeout(() => finishClose(looks + 1), closeLookMs);
      }
    };
    conn.once('close', () => {
      clearTimeout(timer);
      this.release(address);
    });
    const limits = this.limits;
    const now = performance.now();
    const own =
      limits.framesPerSecond === 0 && limits.frameBytesPerSecond === 0
        ? null
        : new FrameBudget(
            limits.framesPerSecond,
            limits.framesBurst,
            limits.frameBytesPerSecond,
            limits.frameBytesBurst,
            now,
          );
    const shared = this.addressBudget(address, now);
    if (!own && !shared) return;
    let over = false;
    conn.on('packet', (packet) => {
      if (over) return;
      const bytes = packetBytes(packet);
      const at = performance.now();
      // Both are charged, so that a connection within its own budget still draws on its
      // address's: many connections each just under their budget add up there.
      const ownOk = own === null || own.charge(bytes, at);
      const sharedOk = shared === null || shared.charge(bytes, at);
      if (ownOk && sharedOk) return;
      over = true;
      this.refuse(conn, ownOk ? 'address' : 'connection');
    });
  }

  /// The budget `address`'s connections share, made with its first connection; null when
  /// addresses have none.
  private addressBudget(address: string, now: number): FrameBudget | null {
    const { addressFramesPerSecond: frames, addressFrameBytesPerSecond: bytes } = this.limits;
    if (frames === 0 && bytes === 0) return null;
    let budget = this.addressBudgets.get(address);
    if (!budget) {
      // Two seconds' worth, and never less than one connection's burst: an address with one
      // connection is held to that connection's budget alone.
      budget = new FrameBudget(
        frames,
        Math.max(2 * frames, this.limits.framesBurst),
        bytes,
        Math.max(2 * bytes, this.limits.frameBytesBurst),
        now,
      );
      this.addressBudgets.set(address, budget);
    }
    return budget;
  }

  /// Closes `conn`, over its own budget or its address's: its protocol sockets are told why
  /// first.
  private refuse(conn: EngineConnection, whose: 'connection' | 'address'): void {
    const sockets = this.sockets.get(conn);
    if (!sockets || sockets.size === 0) {
      conn.close();
      return;
    }
    for (const socket of [...sockets]) {
      sendAway(
        socket,
        {
          code: 'rate-limited',
          message:
            whose === 'connection'
              ? 'This connection sent more messages than the server allows: reconnect later'
              : "This address's connections sent more messages than the server allows: reconnect later",
          retryAfterMs: 1000,
        },
        true,
      );
    }
  }
}

/// Two token buckets, frames and bytes, filled from the clock when charged (no timers).
class FrameBudget {
  private frames: number;
  private bytes: number;
  private last: number;
  private readonly frameRate: number;
  private readonly frameBurst: number;
  private readonly byteRate: number;
  private readonly byteBurst: number;

  constructor(
    frameRate: number,
    frameBurst: number,
    byteRate: number,
    byteBurst: number,
    now: number,
  ) {
    this.frameRate = frameRate;
    this.frameBurst = frameBurst;
    this.byteRate = byteRate;
    this.byteBurst = byteBurst;
    this.frames = this.frameBurst;
    this.bytes = this.byteBurst;
    this.last = now;
  }

  /// Charges one frame of `bytes` at `now` (ms). False when the frame is over the budget.
  charge(bytes: number, now: number): boolean {
    const elapsed = now - this.last;
    if (elapsed > 0) {
      this.frames = Math.min(this.frameBurst, this.frames + (elapsed * this.frameRate) / 1000);
      this.bytes = Math.min(this.byteBurst, this.bytes + (elapsed * this.byteRate) / 1000);
      this.last = now;
    }
    if (this.frameRate > 0 && --this.frames < 0) return false;
    if (this.byteRate > 0 && (this.bytes -= bytes) < 0) return false;
    return true;
  }
}

/// A packet's size as it arrived: a string's length, a binary's bytes.
function packetBytes(packet: EnginePacket): number {
  const data = packet.data;
  if (typeof data === 'string') return data.length;
  if (data instanceof Uint8Array) return data.byteLength;
  if (data instanceof ArrayBuffer) return data.byteLength;
  return 0;
}
