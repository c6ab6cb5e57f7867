import { errorBody } from '../../schema/errors.js';
import { sendAway } from './outbound.js';
import type { ScriptoriumSocket } from './socket.js';

/// How many malformed messages a socket may send, and how fast they are forgiven.
export interface StrikeLimits {
  /// The count at which the socket is closed.
  maxProtocolErrors: number;
  /// One counted message is forgiven per this many milliseconds.
  protocolErrorForgiveMs: number;
}

/// Counts a malformed message of `socket`; at `maxProtocolErrors` counted the socket is
/// closed with `too-many-errors` (its connection too: a client that misbehaves gets no more
/// of it). A leaky bucket: while any are counted, one is forgiven every
/// `protocolErrorForgiveMs`, worked out here from the clock rather than by a timer per socket.
/// A client with honest refusals it could not foresee (a step the server refuses for a reason
/// the client cannot check, struck with its batch, then alone) thus keeps its connection for
/// hours of editing, while one that sends them in a loop is still closed after its burst.
/// Forgiven whole intervals at a time, so a burst of `maxProtocolErrors` within one interval
/// closes the socket.
export function strike(socket: ScriptoriumSocket, limits: StrikeLimits): void {
  const data = socket.data;
  // The monotonic clock, as the socket's buckets: a step of the wall clock back would stop
  // the forgiving until it caught up.
  const now = performance.now();
  if (data.protocolErrors > 0) {
    const forgiven = Math.floor((now - data.protocolErrorsSince) / limits.protocolErrorForgiveMs);
    if (forgiven >= data.protocolErrors) {
      data.protocolErrors = 0;
    } else if (forgiven > 0) {
      data.protocolErrors -= forgiven;
      // Not `now`: the part of an interval already served counts toward the next one.
      data.protocolErrorsSince += forgiven * limits.protocolErrorForgiveMs;
    }
  }
  // An empty bucket does not leak: a quiet hour earns no credit for the next burst.
  if (data.protocolErrors === 0) data.protocolErrorsSince = now;
  if (++data.protocolErrors < limits.maxProtocolErrors || !socket.connected) return;
  sendAway(socket, { ...errorBody('too-many-errors'), retryAfterMs: 0 }, true);
}
