import { io, type Socket } from 'socket.io-client';
import type { ClientToServerEvents, ServerToClientEvents } from '../schema/protocol.js';
import { NetworkDelay } from './network_delay.js';
import type { Random } from './random.js';
import type { WindowRecorder } from './window_recorder.js';

/// A read-only socket (`auth.readOnly`): it joins a document and only receives, like a reader
/// following along. It counts broadcasts and never parses them further, so that observers
/// measure the server's fan-out rather than the simulator.
export class Observer {
  readonly socket: Socket<ServerToClientEvents, ClientToServerEvents>;
  joined = false;
  private readonly network: NetworkDelay;
  private readonly joinWaiters: (() => void)[] = [];
  private retry: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    url: string,
    docId: string,
    clientID: string,
    rttMs: number,
    random: Random,
    recorder: WindowRecorder,
  ) {
    this.network = new NetworkDelay(rttMs, random);
    const parser = this.network.parser();
    this.socket = io(url, {
      transports: ['websocket'],
      forceNew: true,
      reconnectionDelay: 500,
      reconnectionDelayMax: 5000,
      query: { doc: docId },
      auth: { clientID, readOnly: true },
      ...(parser ? { parser } : {}),
    });
    this.network.wrapEmit(this.socket);
    this.socket.on('connect', () => this.join());
    this.socket.on('disconnect', () => {
      this.joined = false;
    });
    this.socket.io.on('reconnect', () => recorder.reconnect());
    this.socket.on('steps', () => recorder.broadcast());
  }

  /// Joins, and asks again a moment later while refused: a reader cannot make a document,
  /// so one that connects before its document's first editor is answered `not-found` until
  /// that editor has joined.
  private join(): void {
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    if (!this.socket.connected || this.closed) return;
    this.socket.emit('join', {}, (answer) => {
      if (!answer.ok) {
        this.retry = setTimeout(() => this.join(), 250);
        return;
      }
      this.joined = true;
      for (const resolve of this.joinWaiters.splice(0)) resolve();
    });
  }

  /// Resolves once the first join has answered.
  joinedOnce(): Promise<void> {
    if (this.joined) return Promise.resolve();
    return new Promise((resolve) => this.joinWaiters.push(resolve));
  }

  close(): void {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    this.socket.close();
    this.network.close();
  }
}
