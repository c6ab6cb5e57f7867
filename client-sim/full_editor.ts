import { sendableSteps } from 'prosemirror-collab';
import type { EditorState, Transaction } from 'prosemirror-state';
import { CollabClient } from '../client/index.js';
import type { StepsAnswer } from '../schema/protocol.js';
import { NetworkDelay } from './network_delay.js';
import { Pace } from './pace.js';
import type { Random } from './random.js';
import type { WindowRecorder } from './window_recorder.js';
import { randomEdit } from './workload.js';
import type { Schema } from 'prosemirror-model';

/// How a full editor is set up.
export interface FullEditorOptions {
  url: string;
  /// The server's schema.
  schema: Schema;
  docId: string;
  clientID: string;
  ratePerSec: number;
  rttMs: number;
  random: Random;
  recorder: WindowRecorder;
}

/// A simulated person on the real client library: a `CollabClient` holding its own editor
/// state, exactly as a browser editor would. Few of these run per document (they cost a
/// document each); their documents are what the convergence check compares with the server's.
///
/// An edit counts as confirmed when its transaction leaves prosemirror-collab's unconfirmed
/// list (`sendableSteps().origins`): rebasing keeps a step's origin, so the moment it goes is
/// the moment a broadcast confirmed it, however many refusals and resends came between.
export class FullEditor {
  readonly client: CollabClient;
  private readonly recorder: WindowRecorder;
  private readonly random: Random;
  private readonly network: NetworkDelay;
  private readonly pace: Pace;
  private readonly pending = new Map<Transaction, number>();
  private closed = false;

  constructor(options: FullEditorOptions) {
    this.recorder = options.recorder;
    this.random = options.random;
    this.network = new NetworkDelay(options.rttMs, options.random);
    this.pace = new Pace(options.ratePerSec, options.random);
    const parser = this.network.parser();
    this.client = new CollabClient({
      url: options.url,
      schema: options.schema,
      docId: options.docId,
      clientID: options.clientID,
      reconnectDelayMs: 500,
      reconnectDelayMaxMs: 5000,
      staleWaitMs: 2000,
      socketOptions: { forceNew: true, ...(parser ? { parser } : {}) },
      onState: (state) => this.onState(state),
    });
    const socket = this.client.socket;
    this.network.wrapEmit(socket);
    this.countSteps(socket as unknown as { emit: (...args: unknown[]) => unknown });
    socket.on('steps', () => this.recorder.broadcast());
    socket.io.on('reconnect', () => this.recorder.reconnect());
  }

  /// Starts making edits `delayMs` from now.
  start(delayMs: number): void {
    this.pace.start(delayMs, (dueMs) => this.edit(dueMs));
  }

  stop(): void {
    this.pace.stop();
  }

  /// True when every edit this editor made is confirmed and it is connected.
  get drained(): boolean {
    return this.pending.size === 0 && this.client.status === 'synced';
  }

  /// False once closed (undrained at the end of a level): its client follows the server no more.
  get open(): boolean {
    return !this.closed;
  }

  /// Disconnects; edits still unconfirmed are counted as dropped.
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pace.stop();
    this.recorder.drop(this.pending.size);
    this.pending.clear();
    this.client.close();
    this.network.close();
  }

  /// An edit due at `dueMs`, its latency counted from then (see `LightEditor`'s `edit`).
  private edit(dueMs: number): void {
    // Every beat is an edit the person meant to make; one that cannot be made (no document
    // loaded, a failed client, nothing that fits) is dropped, as a light editor's is, so that
    // the edits made still add up to those offered and the loss shows in the drops.
    this.recorder.edit();
    const state = this.client.state;
    if (!state || this.client.status === 'failed') {
      this.recorder.drop(1);
      return;
    }
    let tr: Transaction | null = null;
    for (let attempt = 0; attempt < 8 && tr === null; attempt++)
      tr = randomEdit(state, this.random);
    if (tr === null) {
      this.recorder.drop(1);
      return;
    }
    this.pending.set(tr, dueMs);
    this.client.dispatch(tr);
  }

  private onState(state: EditorState): void {
    if (this.pending.size === 0) return;
    const origins = sendableSteps(state)?.origins;
    const unconfirmed = origins ? new Set(origins) : null;
    const now = performance.now();
    for (const [tr, moment] of this.pending) {
      if (unconfirmed?.has(tr)) continue;
      this.pending.delete(tr);
      this.recorder.confirm(now - moment);
    }
  }

  /// Counts the `steps` messages the client sends and the refusals it gets, by wrapping the
  /// socket's `emit` (on top of the network delay: counted when the client sends, answered
  /// when the delayed answer arrives).
  private countSteps(socket: { emit: (...args: unknown[]) => unknown }): void {
    const emit = socket.emit.bind(socket);
    socket.emit = (...args: unknown[]) => {
      if (args[0] === 'steps' && typeof args[2] === 'function') {
        const ack = args[2] as (answer: StepsAnswer) => void;
        const payload = args[1] as { steps: unknown[] };
        this.recorder.send(payload.steps.length);
        return emit('steps', payload, (answer: StepsAnswer) => {
          if (!answer.ok) this.recorder.refuse(answer.code);
          ack(answer);
        });
      }
      return emit(...args);
    };
  }
}
