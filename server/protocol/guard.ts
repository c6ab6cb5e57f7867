import type { Logger } from 'pino';
import { measureJson, type JsonLimits } from '../../schema/json_limits.js';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import type { ScriptoriumSocket } from './socket.js';
import { CodedError } from '../rooms/coded_error.js';
import {
  CorruptDocumentError,
  CreationRateError,
  TooManyDocumentsError,
} from '../rooms/load_errors.js';
import { StoreUnavailableError } from '../stores/store.js';

// What stands between a socket's raw messages and the protocol handlers: a gate that bounds
// every payload before any handler looks at it, and a guard that keeps a handler's throw from
// reaching the event loop (where Node would end the process).

/// Longest event name echoed back in a `protocol-error`.
const maxEventNameEcho = 64;

/// Socket.io middleware for one socket: measures every incoming event's arguments (all but a
/// trailing acknowledgement callback) against `limits` iteratively, before they are used.
/// A payload over a limit is answered with its code (`too-large`, `too-deep`, `bad-request`)
/// through its acknowledgement, or with a `protocol-error` when it has none, and never reaches
/// a handler. `onRefused` is told of each refusal (to count protocol errors).
export function payloadGate(
  socket: ScriptoriumSocket,
  limits: Readonly<JsonLimits>,
  onRefused: (code: ErrorCode) => void = () => {},
): (packet: unknown[], next: (err?: Error) => void) => void {
  return (packet, next) => {
    const last = packet.length - 1;
    const ack =
      typeof packet[last] === 'function' ? (packet[last] as (answer: unknown) => void) : null;
    const end = ack ? last : packet.length;
    // packet[0] is the event name, checked like any string.
    for (let i = 0; i < end; i++) {
      const measured = measureJson(packet[i], limits);
      if (measured.ok) continue;
      onRefused(measured.code);
      if (ack) {
        ack({ ok: false, ...errorBody(measured.code, measured.message) });
      } else {
        socket.emit('protocol-error', {
          code: measured.code,
          message: measured.message,
          event: eventName(packet[0]),
        });
      }
      return;
    }
    next();
  };
}

/// An event name fit to echo back: at most `maxEventNameEcho` characters.
export function eventName(event: unknown): string {
  return typeof event === 'string' ? event.slice(0, maxEventNameEcho) : '';
}

/// Wraps a socket event handler so that a throw inside it is logged, answered with `internal`
/// through the acknowledgement (when there is one), and fails the socket's room (which
/// unloads it and sends its editors away to reload), instead of ending the process.
export function guarded(
  socket: ScriptoriumSocket,
  event: string,
  log: Logger,
  handler: (...args: unknown[]) => void,
): (...args: unknown[]) => void {
  return (...args) => {
    try {
      handler(...args);
    } catch (err) {
      handlerFailed(socket, event, log, err, args[args.length - 1]);
    }
  };
}

/// What `guarded` does with a handler's throw, for a handler's asynchronous continuation too
/// (a join answered once its document loaded): logged, answered `internal` through `ack` when
/// it is one, and the socket's room failed.
export function handlerFailed(
  socket: ScriptoriumSocket,
  event: string,
  log: Logger,
  err: unknown,
  ack: unknown,
): void {
  log.error({ err, doc: socket.data.docId, event }, 'handler failed');
  // Socket.io ignores a second call of an acknowledgement, so answering here is safe even if
  // the handler answered before it threw.
  if (typeof ack === 'function') ack({ ok: false, ...errorBody('internal') });
  socket.data.room?.fail(err);
}

/// The code a failed document load is answered with: `unavailable` when the store could not
/// be reached (retryable), `corrupt` when the stored data cannot be read (not retryable; the
/// document is quarantined), `rate-limited` when the address creates documents too fast,
/// `too-many-documents` when the server is full, `internal` for anything else.
export function loadFailureCode(err: unknown): ErrorCode {
  if (err instanceof StoreUnavailableError) return 'unavailable';
  if (err instanceof CorruptDocumentError) return 'corrupt';
  if (err instanceof CreationRateError) return 'rate-limited';
  if (err instanceof TooManyDocumentsError) return 'too-many-documents';
  if (err instanceof CodedError) return err.code;
  return 'internal';
}
