import type { CollabParts } from './collab_parts.js';
import { sendAway } from './protocol/outbound.js';

/// Closes a collab: refuses new connections, finishes in-flight batches and writes snapshots,
/// sends this protocol's sockets away (`shutting-down`), stops the protocol, closes the rooms
/// and hands their leases on, stops the metrics and closes the store, all within one
/// `shutdownTimeoutMs` budget. Resolves true when everything was saved and the store closed in
/// time.
export async function shutdownCollab(parts: CollabParts): Promise<boolean> {
  const { config, log, rooms, store, metrics } = parts;
  // One budget for everything below: a wedged document (a hung disk, a store that does not
  // answer) must not hold the host past it, at any step.
  const deadline = performance.now() + config.shutdownTimeoutMs;
  const inTime = <T>(promise: Promise<T>, late: T): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<T>((resolve) => {
      timer = setTimeout(() => resolve(late), Math.max(0, deadline - performance.now()));
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  };
  parts.state.draining = true;
  log.info('closing: finishing in-flight batches and writing snapshots');
  const saved = await inTime(
    rooms.flushAll().then((failed) => failed === 0),
    false,
  );
  if (!saved) log.warn('close: not every document could be saved in time');
  // Only the sockets of this protocol: a shared namespace may hold the host's own.
  for (const nsp of parts.namespaces) {
    for (const socket of nsp.sockets.values()) {
      if (!socket.data?.docId) continue;
      // The connection too: this process is going away, and a new connection may be routed
      // to another node.
      sendAway(
        socket,
        {
          code: 'shutting-down',
          message: 'The server is restarting: reconnect in a moment',
          retryAfterMs: 1000,
        },
        true,
      );
    }
  }
  for (const stop of parts.stops) stop();
  const closedRooms = rooms.closeAll();
  // Handing the documents to the next node now rather than when their leases expire.
  await inTime(rooms.releaseAll(closedRooms), undefined);
  metrics.stop();
  // A retention run still reading or rewriting the archive would find the store closed.
  await inTime(parts.retention.idle(), undefined);
  const closed = await inTime(
    store.close().then(
      () => true,
      (err: unknown) => {
        log.warn({ err }, 'store close failed');
        return false;
      },
    ),
    false,
  );
  // A store that could not close may still have writes running: not everything is saved.
  if (!closed) log.warn('close: the store did not close cleanly in time');
  return saved && closed;
}
