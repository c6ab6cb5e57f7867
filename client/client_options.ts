import type { Schema } from 'prosemirror-model';
import type { EditorState, Plugin, Transaction } from 'prosemirror-state';
import type { ManagerOptions, SocketOptions } from 'socket.io-client';
import type { ErrorBody } from '../schema/errors.js';
import type { StepJSON } from '../schema/events.js';

/// Where a client stands: `connecting` (joining or catching up), `synced` (connected, nothing
/// unconfirmed), `sending` (connected, local steps waiting for confirmation), `offline`
/// (disconnected; local edits are kept and sent after reconnecting), `failed` (the server
/// refused this client for good; `error` says why).
export type CollabStatus = 'connecting' | 'synced' | 'sending' | 'offline' | 'failed';

/// Options of a `CollabClient`.
export interface CollabClientOptions {
  /// The server's base URL, e.g. `http://localhost:4000` (with a namespace path when the
  /// host serves the protocol in one, e.g. `https://app.example/collab`).
  url: string;
  docId: string;
  /// The schema the server uses; the built-in one (`scriptorium/schema`) when omitted.
  schema?: Schema;
  /// The credential the server checks, sent as the handshake's `auth.token`. A function is
  /// called again for every (re)connection, so it can return a fresh token: after the server
  /// refuses a batch as `unauthorized` (the token expired), the client reconnects with a new
  /// one and sends its unconfirmed steps again.
  token?: string | (() => string | Promise<string>);
  /// Stable for one editor session; generated when omitted.
  clientID?: string;
  /// More plugins for the editor state (history, presence, keymaps). The collab plugin is
  /// added by the client, before these.
  plugins?: readonly Plugin[];
  /// An observer: receives every step, never sends.
  readOnly?: boolean;
  /// Reconnection backoff: first delay, upper bound, and jitter (0–1), as Socket.io takes them.
  reconnectDelayMs?: number;
  reconnectDelayMaxMs?: number;
  reconnectJitter?: number;
  /// After a `stale` answer, how long to wait for the broadcast before asking with `pull`.
  staleWaitMs?: number;
  /// The most bytes of steps' JSON one batch carries: a long offline backlog goes out in
  /// batches of this size. Default: 90% of the message size the server's join answer gives
  /// (`limits`), or 32 KiB from a server that gives none.
  maxBatchBytes?: number;
  /// Passed to socket.io-client (transports, a custom `parser`, timeouts).
  socketOptions?: Partial<ManagerOptions & SocketOptions>;
  /// Called after every state change, local or remote, with the transaction that made it
  /// (null when the state was rebuilt: the first load or a reload).
  onState?: (state: EditorState, tr: Transaction | null) => void;
  /// Called just before remote steps (or a document reloaded from the server) are applied. A
  /// view reads here the input it has seen but not yet turned into a transaction (typed text
  /// still in the DOM, a caret moved by a key), and dispatches it, so that it becomes a local
  /// step instead of being drawn over by the remote state. `bindView` does this.
  beforeRemote?: () => void;
  onStatus?: (status: CollabStatus, error: ErrorBody | null) => void;
  /// Called when the document was replaced by the server's copy (another epoch, history gone),
  /// or when local steps the server refused for good were dropped (`reason` is then
  /// `refusedLocalSteps`, and `error` holds the refusal): `dropped` local steps could
  /// not be kept. Once per drop, or once for every step a full document would not take (a
  /// `too-large` refusal that says the document's `room`).
  onReload?: (info: { dropped: number; reason: string }) => void;
  /// Called once per batch of this client the server made durable: when its broadcast (or a
  /// join's catch-up) brings it back, or its acknowledgement does, or a join answered with the
  /// whole document shows that a batch whose acknowledgement was lost is in it. `steps` (as the
  /// server applied them, rebased or not; as sent, when the join answered with the whole
  /// document) are durable and end at `version`.
  onAcknowledged?: (version: number, steps: readonly StepJSON[]) => void;
}

/// The delays a client waits, resolved from its options once: the reconnection backoff's
/// first delay, bound and jitter (0–1), and how long a `stale` answer waits for its broadcast.
export interface ClientDelays {
  readonly reconnectDelayMs: number;
  readonly reconnectDelayMaxMs: number;
  readonly reconnectJitter: number;
  readonly staleWaitMs: number;
}

/// The delays of `options`, with the defaults for those left out.
export function clientDelays(options: CollabClientOptions): ClientDelays {
  return {
    reconnectDelayMs: options.reconnectDelayMs ?? 500,
    reconnectDelayMaxMs: options.reconnectDelayMaxMs ?? 10_000,
    reconnectJitter: options.reconnectJitter ?? 0.5,
    staleWaitMs: options.staleWaitMs ?? 2000,
  };
}
