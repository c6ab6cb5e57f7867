import type { Node, Schema } from 'prosemirror-model';
import { getVersion, sendableSteps } from 'prosemirror-collab';
import type { EditorState, Plugin } from 'prosemirror-state';
import type { StepMap } from 'prosemirror-transform';
import type { BatchLimits, ClosingNotice, DocRoom, StepJSON } from '../schema/events.js';
import type { ErrorBody } from '../schema/errors.js';
import {
  clientDelays,
  type ClientDelays,
  type CollabClientOptions,
  type CollabStatus,
} from './client_options.js';

/// Where the client's connection stands. `offline`: no connection (before the first, between
/// two, or while Socket.io retries); `joinedAt` is when the last one's join was answered (ms
/// since the epoch), -1 when it never was: how long that connection's token lasted.
/// `joining`: connected, the join not answered yet. `joined`: the join was answered at
/// `joinedAt`; only now are steps received and sent. `closed`: closed or failed for good; no
/// phase follows it.
export type Link =
  | { readonly kind: 'offline'; readonly joinedAt: number }
  | { readonly kind: 'joining' }
  | { readonly kind: 'joined'; readonly joinedAt: number }
  | { readonly kind: 'closed' };

/// Where the last batch sent (`ClientState.sent`) stands. `idle`: answered, or none was sent;
/// another may go. `in-flight`: sent on this connection, its answer awaited; one batch is in
/// flight at a time. `lost`: it was in flight when its connection dropped, and whether the
/// server has it is unknown until the next join answers. `reloading`: the server refused local
/// steps for good and a reload that drops them is on its way; sending meanwhile would only
/// send them again, and their refusal would ask for another reload, which would drop what is
/// typed after the first.
export type Delivery = 'idle' | 'in-flight' | 'lost' | 'reloading';

/// The last batch this client sent, kept after its answer: its steps as sent (the first
/// `steps.length` unconfirmed steps are it until it is confirmed), and, for a batch of one
/// step, the maps of the remote steps applied while it was in flight (null once the state was
/// replaced meanwhile): how our first unconfirmed step was rebased since it was sent, to
/// find it again if the server refuses it.
export interface SentBatch {
  readonly steps: StepJSON[];
  sinceSent: StepMap[] | null;
}

/// A refusal as the server answers it.
export type Refusal = { code: string; message: string; retryable?: boolean; retryAfterMs?: number };

/// What one part of the client asks of another. `CollabClient` wires it; the parts import this
/// type, not each other, so that they form no import cycle.
export interface ClientParts {
  /// Sends the next batch if nothing stops it, and refreshes the status (`Outbox`).
  send(): void;
  /// Asks to join the document at our version (`Sync`).
  join(): void;
  /// Asks for what changed since our version, or the whole document when `full`; `dropLocal`
  /// drops the unconfirmed steps when the answer is applied (`Sync`).
  pull(full: boolean, dropLocal?: boolean): void;
  /// Handles a refusal other than `stale`: retries it with `retry`, drops the local steps
  /// (`dropLocal`) or fails the client (`Refusals`).
  refused(answer: Refusal, retry: () => void, dropLocal?: boolean): void;
  /// The server refused the batch in flight for good (`Refusals`).
  refusedForGood(error: ErrorBody, room: DocRoom | null): void;
  /// Drops the unconfirmed steps the server will never take; true when one was (`dropRefused`).
  dropRefused(error: ErrorBody, room?: DocRoom | null, dropFirst?: boolean): boolean;
  /// Reconnects for a fresh token, or fails with a fixed one (`Connection`).
  renewToken(message: string): void;
}

/// A promise's settlers, kept until the client is ready or settled.
interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

/// `onReload`'s reason when local steps the server refused for good were dropped; only then
/// does `error` explain the drop (it keeps the last refusal until another error replaces it).
export const refusedLocalSteps = 'the server refused local steps';

/// Everything a `CollabClient` knows, in one place that its parts share: the editor state and
/// the document the server has confirmed, the connection's phase (`link`), the last batch
/// sent and where it stands (`delivery`), the pending timers and the retry counts, and the
/// counters and waiters the facade shows. The transitions every part makes (the status, a
/// replaced state, an acknowledgement) are its methods.
export class ClientState {
  readonly options: CollabClientOptions;
  readonly delays: ClientDelays;
  readonly schema: Schema;
  readonly clientID: string;
  /// The plugins after the collab plugin, for every state built.
  readonly plugins: readonly Plugin[];

  /// Null until the first join has answered.
  state: EditorState | null = null;
  epoch: string | null = null;
  /// The document at the confirmed version (what the server holds at `version`), kept so that
  /// a batch the server rebased differently from us can be reconciled on the spot.
  confirmedDoc: Node | null = null;
  /// Set while the server's steps or document are being applied. `beforeRemote` (a view
  /// flushing what is still in the DOM) and `onState` may dispatch local edits meanwhile; a
  /// batch sent then would be made on the state before the server's answer: the refused steps
  /// of a reload again, or a batch that replaces the one whose landing the answer is about to
  /// acknowledge. Sending waits for the answer to be applied (its callers send after it).
  applying = false;
  /// See `CollabClient.replacedMap`.
  replacing: ((pos: number) => number) | null = null;
  status: CollabStatus = 'connecting';
  error: ErrorBody | null = null;
  /// The version after this client's last acknowledged batch.
  acknowledgedVersion = 0;
  /// The version our own steps in the last broadcast that carried any end at.
  lastOwnRunEnd = -1;

  link: Link = { kind: 'offline', joinedAt: -1 };
  /// Bumped on every (re)connection so that answers meant for an earlier one are ignored.
  generation = 0;
  /// Why the server is about to close this connection, when it said so.
  closingNotice: ClosingNotice | null = null;
  /// What the server's last join answer said one message may hold.
  limits: BatchLimits | null = null;

  delivery: Delivery = 'idle';
  sent: SentBatch = { steps: [], sinceSent: [] };
  /// The most steps one batch may carry: 1 while `suspect` steps are sent again one at a time,
  /// half a large batch refused `too-large` (over the server's time budget, say, after a pause
  /// of its own), and after a dropped connection. Doubles back after each accepted batch once
  /// no step is suspect.
  batchLimit = Infinity;
  /// How many of the first unconfirmed steps were in a batch the server refused for good
  /// (`invalid-step`, `too-large`, `too-deep`). The server refuses a batch whole without
  /// saying which step it will not take, and each such refusal is a strike against the
  /// connection (`too-many-errors` after a burst of them): rather than bisect, with a refusal
  /// per half, the client sends these steps again one at a time, so that each refusal names
  /// exactly one step, which alone is dropped (`dropRefused`), and the valid ones land.
  suspect = 0;
  /// After a `stale` answer, the version whose broadcast we wait for before sending again
  /// (0: none), and the timer that pulls when it does not come.
  waitForVersion = 0;
  staleTimer: ReturnType<typeof setTimeout> | null = null;

  /// A retry or reconnection waiting for its delay; nothing is sent meanwhile.
  retryTimer: ReturnType<typeof setTimeout> | null = null;
  /// The delay of the last retryable refusal's retry, doubling; 0 after a success.
  retryDelayMs = 0;
  /// Reconnections for a fresh token, and evictions by the server, since the last accepted
  /// batch: each waits longer than the one before (`Connection.backoff`).
  tokenRetries = 0;
  evictions = 0;
  lastEvictionAt = 0;

  reconnects = 0;
  staleAnswers = 0;
  reconciles = 0;
  readonly refusals: Partial<Record<string, number>> = {};
  readonly readyWaiters: Waiter[] = [];
  readonly settleWaiters: Waiter[] = [];

  constructor(options: CollabClientOptions, schema: Schema, clientID: string) {
    this.options = options;
    this.delays = clientDelays(options);
    this.schema = schema;
    this.clientID = clientID;
    this.plugins = options.plugins ?? [];
  }

  /// Joined: steps are received and sent.
  get joined(): boolean {
    return this.link.kind === 'joined';
  }

  /// Closed or failed for good.
  get closed(): boolean {
    return this.link.kind === 'closed';
  }

  /// A batch awaits its answer on this connection.
  get inFlight(): boolean {
    return this.delivery === 'in-flight';
  }

  /// The collab version reached, -1 before the first join.
  get version(): number {
    return this.state ? getVersion(this.state) : -1;
  }

  /// True while local steps wait to be confirmed by the server.
  get hasUnconfirmed(): boolean {
    return this.state !== null && sendableSteps(this.state) !== null;
  }

  /// Connected with nothing unconfirmed.
  isSettled(): boolean {
    return this.joined && !this.inFlight && !this.hasUnconfirmed;
  }

  /// Sets the status from where the client stands (`connected`: the socket is), and resolves
  /// the `settled` waiters once it is settled. A closed or failed client keeps its status.
  refreshStatus(connected: boolean): void {
    if (this.status === 'failed' || this.closed) return;
    if (!this.joined) this.setStatus(connected ? 'connecting' : 'offline');
    else this.setStatus(this.hasUnconfirmed || this.inFlight ? 'sending' : 'synced');
    if (this.isSettled()) for (const waiter of this.settleWaiters.splice(0)) waiter.resolve();
  }

  /// Sets the status and tells `onStatus` when it changed.
  setStatus(status: CollabStatus): void {
    if (this.status === status) return;
    this.status = status;
    this.options.onStatus?.(status, this.error);
  }

  /// Rejects every waiter with `message`: the client will never be ready or settled now.
  rejectWaiters(message: string): void {
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(new Error(message));
    for (const waiter of this.settleWaiters.splice(0)) waiter.reject(new Error(message));
  }

  /// Our batch ending at `version` is durable on the server: `acknowledgedVersion` and
  /// `onAcknowledged` say so.
  acknowledge(version: number, steps: readonly StepJSON[]): void {
    if (version > this.acknowledgedVersion) this.acknowledgedVersion = version;
    this.options.onAcknowledged?.(version, steps);
  }

  /// Tells `onState` of a state that replaced the previous one, with `replacing` set meanwhile
  /// to `map` (positions of the previous state's document to the new one's).
  stateReplaced(state: EditorState, map: ((pos: number) => number) | null): void {
    this.replacing = map;
    try {
      this.options.onState?.(state, null);
    } finally {
      this.replacing = null;
    }
  }

  /// Runs `apply` with `applying` set: local edits dispatched meanwhile are not sent until
  /// the caller sends after it.
  whileApplying<T>(apply: () => T): T {
    this.applying = true;
    try {
      return apply();
    } finally {
      this.applying = false;
    }
  }

  /// Stops both timers and forgets the version a `stale` answer waits for.
  clearTimers(): void {
    if (this.staleTimer !== null) clearTimeout(this.staleTimer);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.staleTimer = null;
    this.retryTimer = null;
    this.waitForVersion = 0;
  }
}
