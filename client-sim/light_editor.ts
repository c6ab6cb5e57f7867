import { io, type Socket } from 'socket.io-client';
import type { EditorState } from 'prosemirror-state';
import type {
  ClientToServerEvents,
  ServerToClientEvents,
  StepJSON,
  StepsAnswer,
  StepsBroadcast,
  SyncAnswer,
} from '../schema/protocol.js';
import { NetworkDelay } from './network_delay.js';
import { Pace } from './pace.js';
import type { Random } from './random.js';
import type { Replica } from './replica.js';
import type { WindowRecorder } from './window_recorder.js';
import { randomEdit } from './workload.js';

/// How a light editor is set up.
export interface LightEditorOptions {
  url: string;
  clientID: string;
  ratePerSec: number;
  rttMs: number;
  random: Random;
  /// The shared copy of the document this editor edits.
  replica: Replica;
  recorder: WindowRecorder;
}

/// A batch on the wire: the version it was made at and the moments its edits were made.
interface InFlight {
  version: number;
  moments: number[];
}

// A person who falls far behind (a saturated server) keeps making edits; beyond this many the
// oldest wait for a later batch, so one message never grows without bound.
const maxEditsPerBatch = 50;
const staleWaitMs = 2000;

/// A simulated person with their own socket but no document of their own: each edit is made on
/// the shared replica's current document when it can be sent, sent as this editor's steps, and
/// confirmed when a broadcast on this editor's socket carries this clientID at the version the
/// batch was made at. On `stale` the editor waits for the replica to reach the answered
/// version and makes the edit afresh on the new document: a person re-typing over a moved
/// text is faithful enough, and the latency still counts from the original edit moment.
///
/// One batch is in flight at a time, as with `CollabClient`; edits made meanwhile queue up and
/// go together in the next batch.
export class LightEditor {
  readonly clientID: string;
  readonly socket: Socket<ServerToClientEvents, ClientToServerEvents>;
  joined = false;
  /// Set when the server refused this editor for good (its handshake or join).
  failure: string | null = null;
  /// The last handshake refusal that was worth another try.
  refusal: string | null = null;

  private readonly replica: Replica;
  private readonly recorder: WindowRecorder;
  private readonly random: Random;
  private readonly network: NetworkDelay;
  private readonly pace: Pace;
  private readonly moments: number[] = [];
  private inFlight: InFlight | null = null;
  private waiting = false;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private readonly joinWaiters: (() => void)[] = [];

  constructor(options: LightEditorOptions) {
    this.clientID = options.clientID;
    this.replica = options.replica;
    this.recorder = options.recorder;
    this.random = options.random;
    this.network = new NetworkDelay(options.rttMs, options.random);
    this.pace = new Pace(options.ratePerSec, options.random);
    const parser = this.network.parser();
    this.socket = io(options.url, {
      transports: ['websocket'],
      forceNew: true,
      reconnectionDelay: 500,
      reconnectionDelayMax: 5000,
      query: { doc: options.replica.docId },
      auth: { clientID: options.clientID },
      ...(parser ? { parser } : {}),
    });
    this.network.wrapEmit(this.socket);
    this.socket.on('connect', () => this.join());
    this.socket.on('disconnect', () => this.onDisconnect());
    this.socket.on('connect_error', (err: Error & { data?: { retryable?: boolean } }) => {
      if (!err.data) return; // a transport error: Socket.io retries
      if (err.data.retryable === false) {
        this.failure = err.message;
        return;
      }
      // Refused by the handshake but retryable (a node shutting down, a cap that frees up):
      // Socket.io does not retry a refusal itself. Said as the reason if it never joins.
      this.refusal = err.message;
      this.retry(() => this.socket.connect());
    });
    this.socket.io.on('reconnect', () => this.recorder.reconnect());
    this.socket.on('steps', (broadcast) => this.onBroadcast(broadcast));
  }

  /// Resolves once the first join has answered.
  joinedOnce(): Promise<void> {
    if (this.joined) return Promise.resolve();
    return new Promise((resolve) => this.joinWaiters.push(resolve));
  }

  /// Starts making edits `delayMs` from now.
  start(delayMs: number): void {
    this.pace.start(delayMs, (dueMs) => this.edit(dueMs));
  }

  /// Stops making new edits; queued and in-flight ones still go out and get confirmed.
  stop(): void {
    this.pace.stop();
  }

  /// True when nothing this editor made waits to be sent or confirmed.
  get drained(): boolean {
    return this.moments.length === 0 && this.inFlight === null;
  }

  /// The document this editor edits (its replica's).
  get docId(): string {
    return this.replica.docId;
  }

  /// False once closed: its socket no longer brings broadcasts to the replica.
  get open(): boolean {
    return !this.closed;
  }

  /// Gives up whatever is still unconfirmed (counted as dropped) and disconnects.
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pace.stop();
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.recorder.drop(this.moments.length + (this.inFlight?.moments.length ?? 0));
    this.moments.length = 0;
    this.inFlight = null;
    this.socket.close();
    this.network.close();
  }

  /// The person makes an edit that was due at `dueMs`: its latency counts from then, not from
  /// when a busy simulator thread got round to it, or a saturated simulator would hide its own
  /// lateness from the figures (coordinated omission).
  private edit(dueMs: number): void {
    this.moments.push(dueMs);
    this.recorder.edit();
    this.trySend();
  }

  private join(): void {
    const replica = this.replica;
    const request = replica.state ? { version: replica.version, epoch: replica.epoch! } : {};
    this.socket.emit('join', request, (answer: SyncAnswer) => {
      if (!answer.ok) {
        if (!answer.retryable) {
          this.failure = `${answer.code}: ${answer.message}`;
          return;
        }
        this.retry(() => this.join());
        return;
      }
      this.syncReplica(answer);
      this.joined = true;
      for (const resolve of this.joinWaiters.splice(0)) resolve();
      this.trySend();
    });
  }

  private syncReplica(answer: Extract<SyncAnswer, { ok: true }>): void {
    if (!this.replica.state || 'doc' in answer || answer.epoch === this.replica.epoch) {
      this.replica.sync(answer);
    } else {
      this.pullReplica(true);
    }
  }

  private onDisconnect(): void {
    this.joined = false;
    // Whether a batch in flight was taken is unknown now; a person would see their text
    // either confirmed or not after reconnecting. The simulator does not guess: it counts the
    // batch as dropped. On loopback this only happens when the server goes away.
    if (this.inFlight) {
      this.recorder.drop(this.inFlight.moments.length);
      this.inFlight = null;
    }
  }

  private onBroadcast(broadcast: StepsBroadcast): void {
    this.recorder.broadcast();
    if (this.replica.receive(broadcast.version, broadcast.steps) === 'gap') {
      this.pullReplica(false);
    }
    const sent = this.inFlight;
    if (sent === null || broadcast.version <= sent.version) return;
    const at = sent.version - (broadcast.version - broadcast.steps.length);
    if (at >= 0 && broadcast.clientIDs[at] === this.clientID) {
      this.inFlight = null;
      const now = performance.now();
      for (let i = 0; i < sent.moments.length; i++) this.recorder.confirm(now - sent.moments[i]!);
      this.trySend();
    }
  }

  /// Fills a hole in the replica's history (or replaces the document, `full`) through this
  /// editor's socket. One pull per replica at a time.
  private pullReplica(full: boolean): void {
    const replica = this.replica;
    if (replica.pulling || !this.joined) return;
    replica.pulling = true;
    const request =
      !full && replica.state ? { version: replica.version, epoch: replica.epoch! } : {};
    this.socket.emit('pull', request, (answer: SyncAnswer) => {
      replica.pulling = false;
      if (answer.ok) replica.sync(answer);
    });
  }

  private trySend(): void {
    if (this.closed || !this.joined || this.inFlight || this.waiting || this.retryTimer) return;
    if (this.moments.length === 0 || !this.replica.state || this.replica.broken) return;
    const version = this.replica.version;
    let state: EditorState = this.replica.state;
    const steps: StepJSON[] = [];
    const moments: number[] = [];
    const count = Math.min(this.moments.length, maxEditsPerBatch);
    for (let i = 0; i < count; i++) {
      const moment = this.moments.shift()!;
      let tr = null;
      for (let attempt = 0; attempt < 8 && tr === null; attempt++) {
        tr = randomEdit(state, this.random);
      }
      if (tr === null) {
        this.recorder.drop(1);
        continue;
      }
      for (const step of tr.steps) steps.push(step.toJSON() as StepJSON);
      moments.push(moment);
      state = state.apply(tr);
    }
    if (steps.length === 0) return;
    const batch: InFlight = { version, moments };
    this.inFlight = batch;
    this.recorder.send(steps.length);
    this.socket.emit('steps', { version, steps }, (answer: StepsAnswer) =>
      this.onAnswer(answer, batch),
    );
  }

  private onAnswer(answer: StepsAnswer, batch: InFlight): void {
    if (answer.ok) {
      // The broadcast comes before the acknowledgement, so the batch is normally confirmed
      // already; this covers a broadcast this socket missed.
      if (this.inFlight === batch) {
        this.inFlight = null;
        const now = performance.now();
        for (const moment of batch.moments) this.recorder.confirm(now - moment);
        this.trySend();
      }
      return;
    }
    this.recorder.refuse(answer.code);
    if (this.inFlight !== batch) return;
    this.inFlight = null;
    switch (answer.code) {
      case 'stale': {
        this.moments.unshift(...batch.moments);
        this.waiting = true;
        // Steps the server could not make durable are never broadcast, so the version asked
        // for may never come: after a while, pull and try again rather than wait forever.
        let resumed = false;
        const resume = () => {
          if (resumed) return;
          resumed = true;
          clearTimeout(timeout);
          this.waiting = false;
          this.trySend();
        };
        const timeout = setTimeout(() => {
          this.pullReplica(false);
          resume();
        }, staleWaitMs);
        this.replica.whenAt(answer.version ?? this.replica.version + 1, resume);
        return;
      }
      case 'history-gone':
        this.moments.unshift(...batch.moments);
        this.pullReplica(true);
        this.retry(() => this.trySend());
        return;
      default:
        if (answer.retryable) {
          this.moments.unshift(...batch.moments);
          this.retry(() => this.trySend());
        } else {
          this.recorder.drop(batch.moments.length);
          this.trySend();
        }
    }
  }

  private retry(again: () => void): void {
    if (this.retryTimer !== null || this.closed) return;
    this.retryTimer = setTimeout(
      () => {
        this.retryTimer = null;
        again();
      },
      500 + this.random.next() * 500,
    );
  }
}
