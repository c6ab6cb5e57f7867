import type { Schema } from 'prosemirror-model';
import type { EditorState, Transaction } from 'prosemirror-state';
import { schema as builtInSchema } from '../schema/index.js';
import { type ErrorBody } from '../schema/errors.js';
import type { CollabClientOptions, CollabStatus } from './client_options.js';
import { ClientState, type ClientParts } from './client_state.js';
import { Connection, openSocket, type ClientSocket } from './connection.js';
import { Outbox } from './outbox.js';
import { Refusals } from './refusals.js';
import { Sync } from './sync.js';

/// The client's options and status, defined beside the delays resolved from them.
export type { CollabClientOptions, CollabStatus } from './client_options.js';
export { refusedLocalSteps } from './client_state.js';

/// The client side of the Scriptorium protocol on top of prosemirror-collab: joins the
/// document, sends `sendableSteps` with one batch in flight, applies broadcasts with
/// `receiveTransaction`, waits and resends on `stale`, reconnects with backoff and jitter and
/// catches up by version before sending again, and reloads when the history is gone.
///
/// It holds the editor state. A browser editor dispatches through `dispatch` and renders what
/// `onState` gives it; a headless editor just calls `dispatch`.
///
/// The work is done by its parts, which share one `ClientState`: `Connection` (the socket's
/// life cycle and reconnections), `Sync` (joining, catching up, applying what the server
/// sends), `Outbox` (sending batches, reading their answers) and `Refusals` (retrying,
/// failing, or dropping the local steps the server will never take).
export class CollabClient {
  readonly clientID: string;
  readonly docId: string;
  readonly schema: Schema;
  readonly socket: ClientSocket;
  private readonly s: ClientState;
  private readonly parts: ClientParts;
  private readonly connection: Connection;
  private readonly sync: Sync;

  constructor(options: CollabClientOptions) {
    this.docId = options.docId;
    this.schema = options.schema ?? builtInSchema;
    this.clientID = options.clientID ?? randomClientID();
    const s = new ClientState(options, this.schema, this.clientID);
    this.s = s;
    this.socket = openSocket(s);
    // The parts call each other through this table, filled once they all exist.
    const parts = {} as ClientParts;
    const connection = new Connection(s, parts, this.socket);
    const sync = new Sync(s, parts, this.socket);
    const outbox = new Outbox(s, parts, this.socket);
    const refusals = new Refusals(s, parts, connection);
    Object.assign(parts, {
      send: () => outbox.send(),
      join: () => sync.join(),
      pull: (full: boolean, dropLocal?: boolean) => this.pull(full, dropLocal),
      refused: refusals.refused.bind(refusals),
      refusedForGood: refusals.refusedForGood.bind(refusals),
      dropRefused: refusals.dropRefused.bind(refusals),
      renewToken: (message: string) => connection.renewToken(message),
    } satisfies ClientParts);
    this.parts = parts;
    this.connection = connection;
    this.sync = sync;
    this.socket.on('steps', (message) => sync.onSteps(message));
  }

  /// The editor state; null until the first join has answered.
  get state(): EditorState | null {
    return this.s.state;
  }

  /// The document's epoch (its history's identity) as the server last said; null before.
  get epoch(): string | null {
    return this.s.epoch;
  }

  /// Where the client stands (`CollabStatus`); `onStatus` is told of every change.
  get status(): CollabStatus {
    return this.s.status;
  }

  /// Why the client failed, or the last refusal of local steps it dropped; null before any.
  get error(): ErrorBody | null {
    return this.s.error;
  }

  /// The version after this client's last acknowledged batch: everything up to it is durable
  /// on the server (an editor can show it as "saved").
  get acknowledgedVersion(): number {
    return this.s.acknowledgedVersion;
  }

  /// How often this client reconnected.
  get reconnects(): number {
    return this.s.reconnects;
  }

  /// How often the server answered `stale`.
  get staleAnswers(): number {
    return this.s.staleAnswers;
  }

  /// How often the server's rebase of one of our batches differed from ours, so that the
  /// state was rebuilt on the server's version (rare: both sides run the same rebase).
  get reconciles(): number {
    return this.s.reconciles;
  }

  /// Refusals of this client's batches, by code.
  get refusals(): Partial<Record<string, number>> {
    return this.s.refusals;
  }

  /// Resolves once the document is loaded (the first join answered); rejects if the server
  /// refuses this client for good, or once it is closed before that.
  ready(): Promise<void> {
    const s = this.s;
    if (s.state) return Promise.resolve();
    if (s.status === 'failed') return Promise.reject(new Error(s.error?.message));
    if (s.closed) return Promise.reject(new Error('the client is closed'));
    return new Promise((resolve, reject) => s.readyWaiters.push({ resolve, reject }));
  }

  /// Resolves when connected with nothing unconfirmed: every local step is on the server, or
  /// was refused and dropped (`onReload` says how many). Rejects once the client is closed or
  /// failed, since it never will be then.
  settled(): Promise<void> {
    const s = this.s;
    if (s.isSettled()) return Promise.resolve();
    if (s.closed) return Promise.reject(new Error(s.error?.message ?? 'the client is closed'));
    return new Promise((resolve, reject) => s.settleWaiters.push({ resolve, reject }));
  }

  /// The collab version this client has reached.
  get version(): number {
    return this.s.version;
  }

  /// True while local steps wait to be confirmed by the server.
  get hasUnconfirmed(): boolean {
    return this.s.hasUnconfirmed;
  }

  /// Applies a local transaction (typing, commands) and sends its steps when it can. Throws
  /// when called before the document is loaded.
  dispatch(tr: Transaction): void {
    const s = this.s;
    if (!s.state) throw new Error('CollabClient.dispatch before the document is loaded');
    s.state = s.state.apply(tr);
    s.options.onState?.(s.state, tr);
    if (tr.docChanged) this.parts.send();
  }

  /// While `onState(state, null)` runs for a state that replaced the previous one (a reload,
  /// or our batch as the server rebased it otherwise): maps a position of the previous state's
  /// document to the new one's, as the selection was mapped (`Presence` moves remote carets
  /// with it). Null at any other time, and after the first join.
  get replacedMap(): ((pos: number) => number) | null {
    return this.s.replacing;
  }

  /// Lets the view turn input it has not read yet into a transaction (`beforeRemote`), before
  /// something other than that input changes the state: remote steps, a reload, or another
  /// editor's presence redrawn (`Presence`). A redraw writes the state's selection back into
  /// the DOM, over a key the view has not read yet.
  readPendingInput(): void {
    this.s.options.beforeRemote?.();
  }

  /// Disconnects for good and stops every timer.
  close(): void {
    this.connection.close();
  }

  /// Asks for the steps since our version, or the whole document when `full` (a reload, as
  /// after `history-gone`); `dropLocal` drops the unconfirmed steps with it. Private, and the
  /// one way in the parts use, so that a test can ask for a reload the server gives only on
  /// its own.
  private pull(full: boolean, dropLocal = false): void {
    this.sync.pull(full, dropLocal);
  }
}

/// A client id that is unique enough for one document's editors, without `crypto.randomUUID`
/// (which browsers only offer on secure origins).
export function randomClientID(): string {
  return Date.now().toString(36) + '-' + Math.random().toString(36).slice(2, 10);
}
