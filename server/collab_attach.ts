import type { Server } from 'socket.io';
import type { AttachOptions } from './collab_options.js';
import type { CollabParts } from './collab_parts.js';
import { attachProtocol } from './protocol/connection.js';
import type { ScriptoriumNamespace } from './protocol/socket.js';

/// Serves a collab's protocol on `io`, in `options.namespace` (`/` by default), and guards
/// `io`'s Engine.IO server: the connection caps, the frame budget, and a `connectTimeout` of at
/// most `handshakeTimeoutMs`. Warns when `io` takes frames larger than the limits need and when
/// there is no `authenticate` hook. Throws when the collab is closed or already attached to
/// that namespace.
export function attachCollab(parts: CollabParts, io: Server, options: AttachOptions): void {
  const { config, log, namespaces, socketOptions } = parts;
  if (parts.state.draining) throw new Error('this collab is closed');
  const nsp = io.of(options.namespace ?? '/') as unknown as ScriptoriumNamespace;
  if (namespaces.includes(nsp)) throw new Error(`already attached to ${nsp.name}`);
  const cap = io.engine.opts.maxHttpBufferSize ?? 1e6;
  if (cap > socketOptions.maxHttpBufferSize) {
    // Frames up to the engine's cap are parsed before any limit is checked: a 1 MB frame
    // of nested arrays holds the event loop for hundreds of milliseconds.
    log.warn(
      { maxHttpBufferSize: cap, recommended: socketOptions.maxHttpBufferSize },
      'the Socket.io server accepts frames larger than the limits need: create it with collab.socketOptions',
    );
  }
  if (parts.authenticate === undefined) {
    log.warn(
      { namespace: nsp.name },
      'no authenticate hook: open mode, anyone who can reach this server may read and write every document (pass authenticate: null to run open on purpose)',
    );
  }
  namespaces.push(nsp);
  parts.guard.attach(io);
  // A connection counts under the caps until it closes: one that never connects a
  // namespace is closed after this, not Socket.io's default of 45 s.
  if (io.connectTimeout() > config.handshakeTimeoutMs) {
    io.connectTimeout(config.handshakeTimeoutMs);
  }
  parts.stops.push(serve(parts, nsp));
  if (namespaces.length === 1) parts.metrics.start();
}

/// Wires the socket protocol on `nsp` with the collab's limits; returns its stop function.
function serve(parts: CollabParts, nsp: ScriptoriumNamespace): () => void {
  const { config } = parts;
  return attachProtocol({
    io: nsp,
    rooms: parts.rooms,
    log: parts.log,
    draining: () => parts.state.draining,
    observer: parts.observer,
    json: {
      maxDepth: config.maxJsonDepth,
      maxBytes: config.maxMessageBytes,
      maxStringBytes: config.maxAttributeBytes,
    },
    admission: parts.admission,
    owners: parts.owners,
    guard: parts.guard,
    batchesPerSecond: config.batchesPerSecond,
    batchesBurst: config.batchesBurst,
    pullsPerSecond: config.pullsPerSecond,
    pullsBurst: config.pullsBurst,
    maxProtocolErrors: config.maxProtocolErrors,
    protocolErrorForgiveMs: config.protocolErrorForgiveMs,
    maxSocketBufferBytes: config.maxSocketBufferBytes,
    batchLimits: {
      maxMessageBytes: config.maxMessageBytes,
      maxStepsPerBatch: config.maxStepsPerBatch,
      // What the payload gate (`json` above) refuses without reading, so that a client
      // drops a step over them itself rather than send it and be struck for it.
      maxAttributeBytes: config.maxAttributeBytes,
      maxJsonDepth: config.maxJsonDepth,
    },
    authenticate: parts.authenticate ?? null,
  });
}
