import assert from 'node:assert/strict';
import { Socket as NetSocket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Node } from 'prosemirror-model';
import { EditorState } from 'prosemirror-state';
import type { Socket } from 'socket.io-client';
import { emptyDoc } from '../../../schema/index.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';

/// The local port of a socket.io-client websocket's TCP socket (engine.io-client over `ws`).
function localPortOf(socket: Socket): number {
  const engine = socket.io.engine as unknown as { transport: { ws?: { _socket?: NetSocket } } };
  const port = engine.transport.ws?._socket?.localPort;
  assert.ok(port, 'a websocket transport over a TCP socket');
  return port;
}

/// Counts the writes (each one syscall, `write` or `writev`) the server's side of the TCP
/// connection from `clientPort` hands to the kernel, until the returned function stops it.
/// Wraps `net.Socket`'s two write hooks in this process: every write still happens.
function countServerWrites(clientPort: number): { writes: () => number; stop: () => void } {
  const proto = NetSocket.prototype as unknown as Record<'_write' | '_writev', Function>;
  const original = { _write: proto._write, _writev: proto._writev };
  let writes = 0;
  for (const name of ['_write', '_writev'] as const) {
    proto[name] = function (this: NetSocket, ...args: unknown[]) {
      if (this.remotePort === clientPort) writes++;
      return original[name].apply(this, args);
    };
  }
  return {
    writes: () => writes,
    stop: () => Object.assign(proto, original),
  };
}

describe('one flush, one write per socket', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it("sends a sender's broadcast and its acknowledgement in one write, broadcast first", async (t) => {
    const a = rawSocket(server.url, 'corked', 'a');
    const watcher = rawSocket(server.url, 'corked', 'w');
    t.after(() => {
      a.close();
      watcher.close();
    });
    await ask(a, 'join', {});
    await ask(watcher, 'join', {});
    const order: string[] = [];
    a.on('steps', (message: { version: number }) => order.push(`steps@${message.version}`));
    const counter = countServerWrites(localPortOf(a));
    t.after(counter.stop);
    let doc: Node = emptyDoc();
    for (let version = 0; version < 5; version++) {
      const tr = EditorState.create({ doc }).tr.insertText('x', 1);
      doc = tr.doc;
      const steps = tr.steps.map((step) => step.toJSON());
      const answer = await ask<{ version: number }>(a, 'steps', { version, steps });
      order.push(`ack@${answer.version}`);
    }
    counter.stop();
    // Without the cork, engine.io queued the acknowledgement behind the broadcast's write:
    // two writes per edit.
    assert.equal(counter.writes(), 5, 'one write per flush to the sender');
    assert.deepEqual(
      order,
      [1, 2, 3, 4, 5].flatMap((v) => [`steps@${v}`, `ack@${v}`]),
    );
  });
});
