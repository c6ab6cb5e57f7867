import { Decoder, Encoder, protocol, type Packet } from 'socket.io-parser';
import type { Random } from './random.js';

/// One direction of a simulated network path: callbacks run after `meanMs` ± `jitterMs`, in the
/// order they were given. A later message never overtakes an earlier one (TCP does not
/// reorder), so each due time is at least the previous one; one timer per direction is armed
/// at a time, which keeps thousands of delayed messages cheap.
export class DelayLine {
  private readonly meanMs: number;
  private readonly jitterMs: number;
  private readonly random: Random;
  private readonly due: number[] = [];
  private readonly callbacks: (() => void)[] = [];
  private head = 0;
  private lastDue = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;

  constructor(meanMs: number, jitterMs: number, random: Random) {
    this.meanMs = meanMs;
    this.jitterMs = jitterMs;
    this.random = random;
  }

  /// Runs `callback` after the delay, after everything pushed before it.
  push(callback: () => void): void {
    if (this.closed) return;
    const delay = Math.max(0, this.meanMs + (this.random.next() * 2 - 1) * this.jitterMs);
    const due = Math.max(performance.now() + delay, this.lastDue);
    this.lastDue = due;
    this.due.push(due);
    this.callbacks.push(callback);
    if (this.timer === null) this.arm();
  }

  /// Drops everything still waiting; nothing runs afterwards.
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.due.length = 0;
    this.callbacks.length = 0;
    this.head = 0;
  }

  private arm(): void {
    const wait = Math.max(0, this.due[this.head]! - performance.now());
    this.timer = setTimeout(() => this.drain(), wait);
  }

  private drain(): void {
    this.timer = null;
    const now = performance.now();
    // Run everything due; a callback may push more (a resend in answer to an ack).
    while (this.head < this.due.length && this.due[this.head]! <= now + 0.5) {
      const callback = this.callbacks[this.head]!;
      this.head++;
      callback();
      if (this.closed) return;
    }
    if (this.head === this.due.length) {
      this.due.length = 0;
      this.callbacks.length = 0;
      this.head = 0;
    } else {
      if (this.head > 1024) {
        this.due.splice(0, this.head);
        this.callbacks.splice(0, this.head);
        this.head = 0;
      }
      this.arm();
    }
  }
}

/// The simulated network between one socket and the server: `rttMs / 2` each way, with a
/// jitter of a fifth of that. With `rttMs` 0 nothing is delayed and no timer is involved.
export class NetworkDelay {
  readonly outgoing: DelayLine | null;
  readonly incoming: DelayLine | null;

  constructor(rttMs: number, random: Random) {
    const oneWay = rttMs / 2;
    this.outgoing = rttMs > 0 ? new DelayLine(oneWay, oneWay / 5, random) : null;
    this.incoming = rttMs > 0 ? new DelayLine(oneWay, oneWay / 5, random) : null;
  }

  /// A socket.io-client `parser` option whose decoder hands every packet (events, acks,
  /// connects) to the client only after the incoming delay, in arrival order. Delaying at the
  /// parser is the one place that covers a `CollabClient`'s own handlers and acks without
  /// reaching into socket.io-client internals. Returns undefined when there is no delay.
  parser(): { protocol: number; Encoder: typeof Encoder; Decoder: typeof Decoder } | undefined {
    if (!this.incoming) return undefined;
    const line: DelayLine = this.incoming;
    class DelayedDecoder extends Decoder {
      private readonly inner = new Decoder();
      constructor() {
        super();
        this.inner.on('decoded', (packet: Packet) =>
          line.push(() => this.emitReserved('decoded', packet)),
        );
      }
      override add(data: unknown): void {
        this.inner.add(data);
      }
      override destroy(): void {
        this.inner.destroy();
        super.destroy();
      }
    }
    return { protocol, Encoder, Decoder: DelayedDecoder };
  }

  /// Makes `socket.emit` go through the outgoing delay. socket.io-client offers no hook for
  /// outgoing packets, and `CollabClient` emits on its socket directly, so the instance's
  /// `emit` is wrapped; order is kept by the delay line.
  wrapEmit(socket: { emit: (...args: never[]) => unknown }): void {
    const line = this.outgoing;
    if (!line) return;
    const target = socket as unknown as { emit: (...args: unknown[]) => unknown };
    const emit = target.emit.bind(socket);
    target.emit = (...args: unknown[]) => {
      line.push(() => emit(...args));
      return socket;
    };
  }

  /// Stops both directions.
  close(): void {
    this.outgoing?.close();
    this.incoming?.close();
  }
}
