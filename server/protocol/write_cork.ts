import type { ScriptoriumNamespace } from './socket.js';

// One flush writes a broadcast frame to every socket of a document and an acknowledgement to
// each sender. engine.io writes a websocket's first packet at once and queues what follows
// until that write's callback, so a sender's acknowledgement left in a second write (a
// second syscall, often a second TCP segment) a turn later. Held, the packets of the flush
// wait in engine.io's `writeBuffer` and go out as one batch; the `net.Socket` corked around
// it makes that batch one `writev`. Reached through fields engine.io 6 and ws 8 keep stable
// (as `bufferedBytes` reads them); a connection without them (polling, another transport) is
// left alone. The frames and their order on the wire are unchanged: no protocol change.

interface RawSocket {
  cork(): void;
  uncork(): void;
}

interface EngineConnection {
  flush?: () => void;
  transport?: { name?: string; writable?: boolean; socket?: { _socket?: RawSocket } };
}

/// Holds the writes of a document's websockets while a flush sends to them, then lets each
/// go as one write. Not reentrant: one flush at a time, synchronously (as rooms publish).
export class WriteCork {
  /// The connections held now; reused from flush to flush.
  private readonly held: EngineConnection[] = [];

  /// Holds the writes of every websocket of `room` in `namespaces` whose transport is free to
  /// write now (one still writing queues by itself, and its drain sends the flush's packets
  /// together anyway).
  hold(namespaces: readonly ScriptoriumNamespace[], room: string): void {
    for (let n = 0; n < namespaces.length; n++) {
      const nsp = namespaces[n]!;
      const ids = nsp.adapter.rooms.get(room);
      if (ids === undefined) continue;
      for (const id of ids) {
        const conn = nsp.sockets.get(id)?.conn as unknown as EngineConnection | undefined;
        const transport = conn?.transport;
        if (!transport || transport.name !== 'websocket' || transport.writable !== true) continue;
        if (typeof conn.flush !== 'function') continue;
        transport.writable = false;
        this.held.push(conn);
      }
    }
  }

  /// Lets every held connection write what the flush queued for it, in one write each.
  release(): void {
    const held = this.held;
    for (let i = 0; i < held.length; i++) {
      const conn = held[i]!;
      const transport = conn.transport!;
      transport.writable = true;
      const raw = transport.socket?._socket;
      raw?.cork();
      try {
        conn.flush!();
      } finally {
        raw?.uncork();
      }
    }
    held.length = 0;
  }
}
