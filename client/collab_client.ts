import { collab, getVersion, receiveTransaction, sendableSteps } from 'prosemirror-collab';
import { Node, type Schema } from 'prosemirror-model';
import { EditorState, TextSelection, type Plugin, type Transaction } from 'prosemirror-state';
import { Mapping, Step, type StepMap } from 'prosemirror-transform';
import { io, type ManagerOptions, type Socket, type SocketOptions } from 'socket.io-client';
import {
  bytesDelta,
  errorBody,
  errors,
  isErrorCode,
  rebaseSteps,
  schema as builtInSchema,
  StepRebaser,
  type BatchLimits,
  type ClientToServerEvents,
  type ClosingNotice,
  type DocRoom,
  type ErrorAnswer,
  type ErrorBody,
  type ServerToClientEvents,
  type StepJSON,
  type StepsAnswer,
  type StepsBroadcast,
  type SyncAnswer,
} from '../schema/index.js';
import { differenceMap } from './doc_diff.js';
import { measureStep } from './step_limits.js';

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

/// The client side of the Scriptorium protocol on top of prosemirror-collab: joins the
/// document, sends `sendableSteps` with one batch in flight, applies broadcasts with
/// `receiveTransaction`, waits and resends on `stale`, reconnects with backoff and jitter and
/// catches up by version before sending again, and reloads when the history is gone.
///
/// It holds the editor state. A browser editor dispatches through `dispatch` and renders what
/// `onState` gives it; a headless editor just calls `dispatch`.
export class CollabClient {
  readonly clientID: string;
  readonly docId: string;
  readonly schema: Schema;
  readonly socket: Socket<ServerToClientEvents, ClientToServerEvents>;
  /// Null until the first join has answered.
  state: EditorState | null = null;
  epoch: string | null = null;
  status: CollabStatus = 'connecting';
  error: ErrorBody | null = null;
  /// The version after this client's last acknowledged batch: everything up to it is durable
  /// on the server (an editor can show it as "saved").
  acknowledgedVersion = 0;
  /// How often this client reconnected, and how often the server answered `stale`.
  reconnects = 0;
  staleAnswers = 0;
  /// How often the server's rebase of one of our batches differed from ours, so that the
  /// state was rebuilt on the server's version (rare: both sides run the same rebase).
  reconciles = 0;
  /// Refusals of this client's batches, by code.
  readonly refusals: Partial<Record<string, number>> = {};

  private readonly options: CollabClientOptions;
  private readonly plugins: readonly Plugin[];
  private joined = false;
  private inFlight = false;
  /// Set while a reload that drops the local steps the server refused is on its way: sending
  /// meanwhile would only send them again, and their refusal would ask for another such
  /// reload, which would drop what is typed after the first.
  private reloading = false;
  /// Set while the server's steps or document are being applied. `beforeRemote` (a view
  /// flushing what is still in the DOM) and `onState` may dispatch local edits meanwhile; a
  /// batch sent then would be made on the state before the server's answer: the refused steps
  /// of a reload again, or a batch that replaces the one whose landing the answer is about to
  /// acknowledge. Sending waits for the answer to be applied (its callers send after it).
  private applying = false;
  /// See `replacedMap`.
  private replacing: ((pos: number) => number) | null = null;
  private inFlightSteps: StepJSON[] = [];
  /// The version our own steps in the last broadcast that carried any end at.
  private lastOwnRunEnd = -1;
  /// How many steps the last batch sent had: the first this-many unconfirmed steps are it.
  private sentCount = 0;
  /// How many steps the batch in flight had when its connection dropped (0: none was): its
  /// fate is unknown until the next join says whether the server has it.
  private lostCount = 0;
  /// The most steps one batch may carry: 1 while `suspect` steps are sent again one at a time,
  /// half a large batch refused `too-large` (over the server's time budget, say, after a pause
  /// of its own), and after a dropped connection. Doubles back after each accepted batch once
  /// no step is suspect.
  private batchLimit = Infinity;
  /// How many of the first unconfirmed steps were in a batch the server refused for good
  /// (`invalid-step`, `too-large`, `too-deep`). The server refuses a batch whole
  /// without saying which step it will not take, and each such refusal is a strike against the
  /// connection (`too-many-errors` after 20 in a burst): rather than bisect, with a refusal per half, the
  /// client sends these steps again one at a time, so that each refusal names exactly one step,
  /// which alone is dropped (`dropRefused`), and the valid ones land.
  private suspect = 0;
  /// The maps of the remote steps applied while a batch of one step was in flight (null: the
  /// state was replaced meanwhile): how our first unconfirmed step was rebased since it was
  /// sent, to find it again if the server refuses it (`refusedForGood`).
  private sinceSent: StepMap[] | null = [];
  /// What the server's last join answer said one message may hold.
  private limits: BatchLimits | null = null;
  /// The document at the confirmed version (what the server holds at `version`), kept so that
  /// a batch the server rebased differently from us can be reconciled on the spot.
  private confirmedDoc: Node | null = null;
  /// Bumped on every (re)connection so that answers meant for an earlier one are ignored.
  private generation = 0;
  private waitForVersion = 0;
  private staleTimer: ReturnType<typeof setTimeout> | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private retryDelayMs = 0;
  /// Reconnections for a fresh token, and evictions by the server, since the last accepted
  /// batch: each waits longer than the one before (`backoff`).
  private tokenRetries = 0;
  /// When this connection's join was answered (ms since the epoch), -1 before: how long its
  /// token lasted.
  private joinedAt = -1;
  private evictions = 0;
  private lastEvictionAt = 0;
  private closingNotice: ClosingNotice | null = null;
  private closed = false;
  private readonly readyWaiters: { resolve: () => void; reject: (err: Error) => void }[] = [];
  private readonly settleWaiters: { resolve: () => void; reject: (err: Error) => void }[] = [];

  constructor(options: CollabClientOptions) {
    this.options = options;
    this.docId = options.docId;
    this.schema = options.schema ?? builtInSchema;
    this.clientID = options.clientID ?? randomClientID();
    this.plugins = options.plugins ?? [];
    this.socket = io(options.url, {
      transports: ['websocket'],
      reconnectionDelay: options.reconnectDelayMs ?? 500,
      reconnectionDelayMax: options.reconnectDelayMaxMs ?? 10_000,
      randomizationFactor: options.reconnectJitter ?? 0.5,
      ...options.socketOptions,
      query: { doc: options.docId },
      // Socket.io calls the function for every handshake, reconnections included.
      auth: (send: (auth: Record<string, unknown>) => void) => {
        const auth: Record<string, unknown> = {
          clientID: this.clientID,
          readOnly: options.readOnly === true,
        };
        const token = options.token;
        if (token === undefined) return send(auth);
        if (typeof token === 'string') return send({ ...auth, token });
        Promise.resolve()
          .then(token)
          .then(
            (fresh) => send({ ...auth, token: fresh }),
            // Without a token the server refuses the handshake (`unauthorized`), and the
            // client tries again later, calling the function again.
            () => send(auth),
          );
      },
    });
    this.socket.on('connect', () => this.onConnect());
    this.socket.on('disconnect', (reason) => this.onDisconnect(reason));
    this.socket.on('connect_error', (err) => this.onConnectError(err));
    this.socket.on('steps', (message) => this.onSteps(message));
    this.socket.on('closing', (notice) => {
      this.closingNotice = notice;
    });
  }

  /// Resolves once the document is loaded (the first join answered); rejects if the server
  /// refuses this client for good, or once it is closed before that.
  ready(): Promise<void> {
    if (this.state) return Promise.resolve();
    if (this.status === 'failed') return Promise.reject(new Error(this.error?.message));
    if (this.closed) return Promise.reject(new Error('the client is closed'));
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /// Resolves when connected with nothing unconfirmed: every local step is on the server, or
  /// was refused and dropped (`onReload` says how many). Rejects once the client is closed or
  /// failed, since it never will be then.
  settled(): Promise<void> {
    if (this.isSettled()) return Promise.resolve();
    if (this.closed)
      return Promise.reject(new Error(this.error?.message ?? 'the client is closed'));
    return new Promise((resolve, reject) => this.settleWaiters.push({ resolve, reject }));
  }

  /// The collab version this client has reached.
  get version(): number {
    return this.state ? getVersion(this.state) : -1;
  }

  /// True while local steps wait to be confirmed by the server.
  get hasUnconfirmed(): boolean {
    return this.state !== null && sendableSteps(this.state) !== null;
  }

  /// Applies a local transaction (typing, commands) and sends its steps when it can. Throws
  /// when called before the document is loaded.
  dispatch(tr: Transaction): void {
    if (!this.state) throw new Error('CollabClient.dispatch before the document is loaded');
    this.state = this.state.apply(tr);
    this.options.onState?.(this.state, tr);
    if (tr.docChanged) this.trySend();
  }

  /// While `onState(state, null)` runs for a state that replaced the previous one (a reload,
  /// or our batch as the server rebased it otherwise): maps a position of the previous state's
  /// document to the new one's, as the selection was mapped (`Presence` moves remote carets
  /// with it). Null at any other time, and after the first join.
  get replacedMap(): ((pos: number) => number) | null {
    return this.replacing;
  }

  /// Lets the view turn input it has not read yet into a transaction (`beforeRemote`), before
  /// something other than that input changes the state: remote steps, a reload, or another
  /// editor's presence redrawn (`Presence`). A redraw writes the state's selection back into
  /// the DOM, over a key the view has not read yet.
  readPendingInput(): void {
    this.options.beforeRemote?.();
  }

  /// Disconnects for good and stops every timer.
  close(): void {
    this.closed = true;
    this.clearTimers();
    this.socket.close();
    this.setStatus('offline');
    for (const waiter of this.settleWaiters.splice(0))
      waiter.reject(new Error('the client is closed'));
    for (const waiter of this.readyWaiters.splice(0))
      waiter.reject(new Error('the client is closed'));
  }

  private onConnect(): void {
    this.joinedAt = -1;
    this.generation++;
    this.inFlight = false;
    this.joined = false;
    this.closingNotice = null;
    this.setStatus('connecting');
    this.join();
  }

  private join(): void {
    const generation = this.generation;
    const request =
      this.state && this.epoch ? { version: getVersion(this.state), epoch: this.epoch } : {};
    this.socket.emit('join', request, (answer) => {
      if (generation !== this.generation) return;
      if (!answer.ok) {
        this.handleRefusal(answer, () => this.join());
        return;
      }
      this.joined = true;
      this.retryDelayMs = 0;
      this.joinedAt = Date.now();
      if (answer.limits) this.limits = answer.limits;
      this.applySync(answer);
      for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
      this.trySend();
    });
  }

  private pull(full: boolean, dropLocal = false): void {
    const generation = this.generation;
    const request =
      !full && this.state && this.epoch
        ? { version: getVersion(this.state), epoch: this.epoch }
        : {};
    this.socket.emit('pull', request, (answer) => {
      if (generation !== this.generation) return;
      if (!answer.ok) {
        this.handleRefusal(answer, () => this.pull(full, dropLocal));
        return;
      }
      if (dropLocal) this.reloading = false;
      this.applySync(answer, dropLocal);
      this.trySend();
    });
  }

  private applySync(answer: Extract<SyncAnswer, { ok: true }>, dropLocal = false): void {
    this.applying = true;
    try {
      this.applySyncAnswer(answer, dropLocal);
    } finally {
      this.applying = false;
    }
  }

  private applySyncAnswer(answer: Extract<SyncAnswer, { ok: true }>, dropLocal: boolean): void {
    const epochChanged = this.epoch !== null && this.epoch !== answer.epoch;
    // The server is behind us in our own epoch: its store lost steps we saw confirmed (it went
    // back to an older state). Its answer is the whole document, which we reload; what we saw
    // acknowledged past its version is not durable any more, and must not be reported so.
    const historyLost =
      !epochChanged && this.state !== null && answer.version < getVersion(this.state);
    if (historyLost && this.acknowledgedVersion > answer.version)
      this.acknowledgedVersion = answer.version;
    // Our batches seen confirmed past its version are gone with them, and the server numbers
    // new steps from there again: a later batch of ours whose acknowledgement is lost may
    // land at a version we once saw ours end at, and must still be recognised as landed.
    if (historyLost && this.lastOwnRunEnd > answer.version) this.lastOwnRunEnd = answer.version;
    this.epoch = answer.epoch;
    // The last batch of ours seen confirmed, as numbered in the history we knew.
    const ownEnd = this.lastOwnRunEnd;
    if (epochChanged) {
      // A new history: what was acknowledged in the old one says nothing about this one,
      // where the server's document (durable, since it serves it) is all that is
      // acknowledged; our steps seen confirmed so far belong to the old one too.
      this.acknowledgedVersion = answer.version;
      this.lastOwnRunEnd = -1;
    }
    if ('doc' in answer) {
      // A batch lost in flight is in this document when the server's last batch of ours ends
      // after the last one we saw confirmed (one batch is in flight at a time). Compared with
      // what we saw in the old history even when the epoch changed: a new epoch that holds a
      // batch of ours continues the old one's numbering (a server that stored its copy anew
      // after its store went back, `Room.restartHistory`); one that starts afresh holds none
      // when we first join it.
      const landed =
        answer.acceptedThrough !== undefined && answer.acceptedThrough > ownEnd
          ? this.lostCount
          : 0;
      if (answer.acceptedThrough !== undefined)
        this.lastOwnRunEnd = Math.max(this.lastOwnRunEnd, answer.acceptedThrough);
      this.lostCount = 0;
      this.reload(
        Node.fromJSON(this.schema, answer.doc),
        answer.version,
        dropLocal,
        epochChanged || historyLost,
        landed,
      );
      // Its acknowledgement was lost, not its durability. (Its steps as we sent them: the
      // server's, rebased or not, are inside `doc`.)
      if (landed > 0) this.acknowledge(answer.acceptedThrough!, this.inFlightSteps);
    } else {
      // The steps since our version: a lost batch that landed is among them, as ours, and
      // `receive` confirms and acknowledges it.
      this.lostCount = 0;
      this.receive(answer.version, answer.steps, answer.clientIDs);
    }
  }

  /// Our batch ending at `version` is durable on the server: `acknowledgedVersion` and
  /// `onAcknowledged` say so.
  private acknowledge(version: number, steps: readonly StepJSON[]): void {
    if (version > this.acknowledgedVersion) this.acknowledgedVersion = version;
    this.options.onAcknowledged?.(version, steps);
  }

  /// Replaces the state with the server's document. Unconfirmed local steps are rebased onto
  /// it (unless `dropLocal`), so an offline editor loses as little as possible; those that no
  /// longer apply are reported through `onReload`. The first `landed` of them are already in
  /// `doc` (a batch whose acknowledgement was lost) and are not applied again. The selection
  /// follows the same mapping.
  ///
  /// The server sends a whole document, not the steps that led to it, so the change from our
  /// confirmed document to `doc` is reconstructed by comparing the two (`differenceMap`). A
  /// local edit outside what changed keeps its place however much text others added or
  /// removed elsewhere; one inside it is dropped, as an edit into text that others deleted
  /// is. Applying the steps at their old positions instead would put an offline edit wherever
  /// those positions fall in the new text.
  private reload(
    doc: Node,
    version: number,
    dropLocal: boolean,
    epochChanged: boolean,
    landed = 0,
  ): void {
    this.options.beforeRemote?.();
    const previous = this.state;
    const unconfirmed = previous ? (sendableSteps(previous)?.steps ?? []) : [];
    let state = EditorState.create({
      schema: this.schema,
      doc,
      // Collab first: plugins that read the collab version in their own state (presence) see
      // it already updated for the transaction they apply.
      plugins: [collab({ version, clientID: this.clientID }), ...this.plugins],
    });
    let dropped = 0;
    let replaced: ((pos: number) => number) | null = null;
    if (previous) {
      const keep = dropLocal ? 0 : landed;
      const moved = this.moveOnto(unconfirmed, keep, doc, dropLocal);
      replaced = moved.map;
      dropped = unconfirmed.length - keep - moved.steps.length;
      const tr = state.tr;
      for (const step of moved.steps) tr.step(step);
      const size = tr.doc.content.size;
      const anchor = Math.min(moved.map(previous.selection.anchor), size);
      const head = Math.min(moved.map(previous.selection.head), size);
      tr.setSelection(TextSelection.between(tr.doc.resolve(anchor), tr.doc.resolve(head)));
      state = state.apply(tr);
    }
    this.state = state;
    this.confirmedDoc = doc;
    this.sinceSent = null;
    this.stateReplaced(state, replaced);
    if (previous) {
      const reason = dropLocal
        ? refusedLocalSteps
        : epochChanged
          ? "the document's history was reset"
          : 'the server no longer held the steps to catch up';
      this.options.onReload?.({ dropped, reason });
    }
  }

  /// Rebases `unconfirmed` (the previous state's local steps, made on the confirmed document)
  /// onto `doc`, leaving out the first `landed`, which `doc` already holds; none when
  /// `dropLocal`. Returns the steps that still apply, and a function that maps a position of
  /// the previous state's document to the document after them.
  private moveOnto(
    unconfirmed: readonly Step[],
    landed: number,
    doc: Node,
    dropLocal: boolean,
  ): { steps: Step[]; map: (pos: number) => number } {
    // Our confirmed document with the landed steps: what `doc` is compared with. (They were
    // made on it, so they apply; a state always comes with its confirmed document.)
    let base = this.confirmedDoc!;
    for (let i = 0; i < landed; i++) base = unconfirmed[i]!.apply(base).doc ?? base;
    const rest = unconfirmed.slice(landed);
    const over = differenceMap(base, doc);
    const maps = over ? [over] : [];
    // Dropped, they still move the selection back out of what they inserted.
    const { steps, rebaser } = dropLocal
      ? { steps: [], rebaser: new StepRebaser(rest, maps) }
      : rebaseSteps(rest, maps, doc);
    return { steps, map: (pos) => rebaser.mapAfter(pos) };
  }

  private onSteps(message: StepsBroadcast): void {
    if (!this.joined || !this.state) return;
    this.applying = true;
    try {
      this.receive(message.version, message.steps, message.clientIDs);
    } finally {
      this.applying = false;
    }
    this.trySend();
  }

  /// Applies steps ending at `version`. Steps already seen are skipped; a gap (steps that start
  /// after our version) means something was missed, and a pull fills it.
  private receive(version: number, steps: readonly StepJSON[], clientIDs: readonly string[]): void {
    const current = getVersion(this.state!);
    const base = version - steps.length;
    if (version <= current) return;
    if (base > current) {
      this.pull(false);
      return;
    }
    // May dispatch local input (through `dispatch`), which moves `this.state` on.
    this.options.beforeRemote?.();
    let state = this.state!;
    // prosemirror-collab only recognises our own steps at the start of what it is given:
    // feed it each run of equal clientIDs on its own so that a mixed group confirms ours.
    let start = current - base;
    let confirmed = this.confirmedDoc!;
    while (start < steps.length) {
      let end = start + 1;
      while (end < steps.length && clientIDs[end] === clientIDs[start]) end++;
      const run: Step[] = new Array(end - start);
      for (let i = start; i < end; i++) run[i - start] = Step.fromJSON(this.schema, steps[i]);
      const own = clientIDs[start] === this.clientID;
      if (own) this.lastOwnRunEnd = base + end;
      if (own && !matchesUnconfirmed(state, steps, start, end)) {
        // The server rebased our batch and got other steps than our own rebase did:
        // prosemirror-collab would take ours as confirmed and silently diverge.
        this.reconcile(state, run, confirmed, base + end);
        // `onState` (in reconcile) may have dispatched a local edit on top: go on from there.
        state = this.state!;
        confirmed = this.confirmedDoc!;
      } else {
        if (!own && this.inFlight && this.sentCount === 1 && this.sinceSent)
          for (let i = 0; i < run.length; i++) this.sinceSent.push(run[i]!.getMap());
        const tr = receiveTransaction(state, run, clientIDs.slice(start, end), {
          mapSelectionBackward: true,
        });
        this.state = state.apply(tr);
        for (let i = 0; i < run.length; i++) confirmed = run[i]!.apply(confirmed).doc!;
        this.confirmedDoc = confirmed;
        this.options.onState?.(this.state, tr);
        // A view or plugin may dispatch from `onState` (`dispatch` applies it to `this.state`):
        // the next run goes on top of that, not of the state before it.
        state = this.state;
      }
      // Broadcast only once durable: acknowledged, whether or not the acknowledgement that
      // follows reaches us (the connection may drop between the two, or the batch was sent
      // on an earlier connection and answered there).
      if (own && base + end > this.acknowledgedVersion)
        this.acknowledge(base + end, steps.slice(start, end));
      start = end;
    }
    if (this.staleTimer !== null && getVersion(state) >= this.waitForVersion) {
      clearTimeout(this.staleTimer);
      this.staleTimer = null;
    }
  }

  /// Rebuilds the state on the server's version of our last batch (`run`, ending at
  /// `version`): the confirmed document plus `run`, with our later unconfirmed steps rebased
  /// from our version of the batch onto the server's. Undo history starts afresh.
  private reconcile(
    state: EditorState,
    run: readonly Step[],
    confirmed: Node,
    version: number,
  ): EditorState {
    const unconfirmed = sendableSteps(state)?.steps ?? [];
    const ours = unconfirmed.slice(0, Math.min(this.sentCount, unconfirmed.length));
    const rest = unconfirmed.slice(ours.length);
    let doc = confirmed;
    for (let i = 0; i < run.length; i++) doc = run[i]!.apply(doc).doc!;
    const over: StepMap[] = [];
    for (let i = ours.length - 1; i >= 0; i--) over.push(ours[i]!.getMap().invert());
    for (let i = 0; i < run.length; i++) over.push(run[i]!.getMap());
    const moved = rebaseSteps(rest, over, doc);
    let next = EditorState.create({
      schema: this.schema,
      doc,
      plugins: [collab({ version, clientID: this.clientID }), ...this.plugins],
    });
    if (moved.steps.length > 0) {
      const tr = next.tr;
      for (const step of moved.steps) tr.step(step);
      next = next.apply(tr);
    }
    const size = next.doc.content.size;
    const anchor = Math.min(state.selection.anchor, size);
    const head = Math.min(state.selection.head, size);
    next = next.apply(
      next.tr.setSelection(TextSelection.between(next.doc.resolve(anchor), next.doc.resolve(head))),
    );
    this.state = next;
    this.confirmedDoc = doc;
    this.reconciles++;
    this.stateReplaced(next, (pos) => moved.rebaser.mapAfter(pos));
    return next;
  }

  /// Tells `onState` of a state that replaced the previous one, with `replacedMap` set
  /// meanwhile to `map` (positions of the previous state's document to the new one's).
  private stateReplaced(state: EditorState, map: ((pos: number) => number) | null): void {
    this.replacing = map;
    try {
      this.options.onState?.(state, null);
    } finally {
      this.replacing = null;
    }
  }

  private trySend(): void {
    if (
      this.closed ||
      !this.joined ||
      !this.state ||
      this.inFlight ||
      this.reloading ||
      this.applying ||
      this.retryTimer !== null
    ) {
      this.refreshStatus();
      return;
    }
    if (this.options.readOnly || getVersion(this.state) < this.waitForVersion) {
      this.refreshStatus();
      return;
    }
    const sendable = sendableSteps(this.state);
    if (!sendable) {
      // Steps counted as suspect may have gone meanwhile (dropped by a rebase or a reload).
      this.suspect = 0;
      this.refreshStatus();
      return;
    }
    if (this.suspect > sendable.steps.length) this.suspect = sendable.steps.length;
    const steps = this.nextBatch(sendable.steps, sendable.version);
    if (!Array.isArray(steps)) {
      // A step bigger than the server takes in a message, or one its payload gate would refuse
      // (a string or a nesting over its limits): sending it could only close the connection
      // (over twice the message limit) or be refused, a strike against the connection each
      // time; neither would ever change. It alone is dropped, here, and the steps after it go
      // on.
      if (this.suspect > 0) this.suspect--;
      this.dropRefused(steps);
      this.trySend();
      return;
    }
    this.inFlight = true;
    const generation = this.generation;
    this.inFlightSteps = steps;
    this.sentCount = steps.length;
    this.sinceSent = [];
    this.socket.emit('steps', { version: sendable.version, steps }, (answer) =>
      this.onStepsAnswer(answer, generation),
    );
    this.refreshStatus();
  }

  /// The JSON of the next batch: the first unconfirmed steps, as many as `batchLimit` and the
  /// server's limits allow, up to the first the server would refuse (`measureStep`); or,
  /// when the first step alone is one the server would refuse (over its message size, a
  /// string or a nesting over its payload limits), the refusal to drop it with. `version` is
  /// the one the batch is sent at.
  private nextBatch(unconfirmed: readonly Step[], version: number): StepJSON[] | ErrorBody {
    const limits = this.limits;
    // Suspect steps go on their own, never with steps after them the server has not refused.
    const maxSteps = Math.min(
      this.batchLimit,
      limits?.maxStepsPerBatch ?? Infinity,
      this.suspect > 0 ? this.suspect : Infinity,
    );
    const maxBytes =
      this.options.maxBatchBytes ??
      (limits ? Math.floor(limits.maxMessageBytes * 0.9) : defaultMaxBatchBytes);
    const steps: StepJSON[] = [];
    let bytes = 0;
    for (let i = 0; i < unconfirmed.length && steps.length < maxSteps; i++) {
      const json = unconfirmed[i]!.toJSON() as StepJSON;
      const size = utf8Length(JSON.stringify(json)) + 1;
      if (steps.length > 0 && bytes + size > maxBytes) break;
      const gate = limits ? measureStep(json, version, limits) : null;
      // A step the gate would refuse (a string or a nesting over its limits) is not sent with
      // the steps before it, which would be refused with it: it ends the batch, and is dropped
      // once it comes first.
      if (gate && !gate.ok) return steps.length > 0 ? steps : errorBody(gate.code, gate.message);
      // A lone step whose message the gate would refuse as too large (the message around it
      // counts: a step that fits the limit only without it was sent, refused and struck), or
      // whose frame would close the connection (Engine.IO's cap, twice the limit in real
      // bytes with its packet's few bytes around it), is dropped unsent.
      if (
        steps.length === 0 &&
        limits &&
        gate &&
        (gate.bytes > limits.maxMessageBytes ||
          size - 1 + messageBytes + decimalDigits(version) + packetBytes >
            2 * limits.maxMessageBytes)
      ) {
        return errorBody('too-large', 'A local step is larger than the server takes');
      }
      steps.push(json);
      bytes += size;
    }
    return steps;
  }

  private onStepsAnswer(answer: StepsAnswer, generation: number): void {
    if (generation !== this.generation) return;
    this.inFlight = false;
    if (answer.ok) {
      this.retryDelayMs = 0;
      this.tokenRetries = 0;
      this.evictions = 0;
      if (this.suspect > 0) this.suspect = Math.max(0, this.suspect - this.sentCount);
      if (this.suspect === 0) this.batchLimit *= 2;
      // The broadcast came first and acknowledged the batch, with the steps as the server
      // applied them. Unless it was not applied (it seemed to leave a gap, and a pull fills it).
      if (answer.version > this.acknowledgedVersion)
        this.acknowledge(answer.version, this.inFlightSteps);
      this.trySend();
      return;
    }
    this.refusals[answer.code] = (this.refusals[answer.code] ?? 0) + 1;
    switch (answer.code) {
      case 'stale':
        // The broadcast that made us stale is on its way (or already here): wait for it,
        // rebase through receiveTransaction, resend. A pull covers a broadcast that never
        // comes (steps the server could not make durable are never broadcast).
        this.staleAnswers++;
        this.waitForVersion = answer.version ?? 0;
        if (this.version < this.waitForVersion && this.staleTimer === null) {
          this.staleTimer = setTimeout(() => {
            this.staleTimer = null;
            this.waitForVersion = 0;
            if (this.joined) this.pull(false);
          }, this.options.staleWaitMs ?? 2000);
        }
        this.trySend();
        return;
      case 'history-gone':
        this.pull(true);
        return;
      case 'too-large':
      case 'too-deep':
      case 'invalid-step':
        this.refusedForGood(errorBody(answer.code, answer.message), this.roomNow(answer));
        return;
      case 'unauthorized':
        this.renewToken(answer.message);
        return;
      default:
        this.handleRefusal(answer, () => this.trySend(), true);
    }
  }

  /// The server refused the batch in flight for a reason that sending it again cannot change,
  /// without saying which of its steps it will not take. A batch of several steps is sent again
  /// one step at a time (`suspect`); a step refused on its own is dropped, and the steps after
  /// it are kept, rebased over its removal.
  private refusedForGood(error: ErrorBody, room: DocRoom | null): void {
    const count = this.sentCount;
    if (count > 1) {
      // Refused for the document's size: the steps that would not fit are dropped at once,
      // and the rest, which the server takes, sent again. Nothing dropped means our measure
      // and the server's disagree: the steps then go one at a time, as for any other refusal.
      if (room && this.dropRefused(error, room, false)) {
        this.suspect = 0;
        this.trySend();
        return;
      }
      this.suspect = Math.max(this.suspect, count);
      // The server checks its time budget between steps, so a single step is never refused
      // for time, but a long batch may be refused `too-large` with no bad step in it: one of
      // more than `halveAbove` steps is sent again in halves first, rather than hundreds of
      // round trips. A bad step among them costs a strike per halving (four from 1,000
      // steps) before the steps go one at a time.
      this.batchLimit = error.code === 'too-large' && count > halveAbove ? Math.ceil(count / 2) : 1;
      this.trySend();
      return;
    }
    // Remote steps that came while it was in flight rebased our first step, or dropped it
    // (what it changed was deleted), as `receiveTransaction` does: the step sent, mapped the
    // same way, says which unconfirmed step, if any, is the one refused. Sending it again
    // whenever remote steps came would cost a strike each time on a busy document.
    const refused = this.refusedStep();
    if (refused === null) {
      // The rebase dropped it already.
      if (this.suspect > 0) this.suspect--;
      this.trySend();
      return;
    }
    const first = sendableSteps(this.state!)?.steps[0];
    if (refused === undefined || !first || JSON.stringify(first.toJSON()) !== refused) {
      // The state was replaced meanwhile (a reload), or the rebase went another way: send it
      // again alone; it is refused again if it is the bad one, and lands if it is not.
      this.suspect = Math.max(this.suspect, 1);
      this.trySend();
      return;
    }
    if (this.suspect > 0) this.suspect--;
    this.dropRefused(error, room);
    this.trySend();
  }

  /// The room a `too-large` refusal says the document at its version has left, when that is
  /// our confirmed document (null otherwise: remote steps since, or still on their way, grew
  /// or shrank it, and the refusal says nothing about ours).
  private roomNow(answer: ErrorAnswer): DocRoom | null {
    const room = answer.room;
    if (
      answer.code !== 'too-large' ||
      typeof room !== 'object' ||
      room === null ||
      typeof room.bytes !== 'number' ||
      typeof room.positions !== 'number' ||
      answer.version !== this.version
    )
      return null;
    return room;
  }

  /// The JSON text of the one step in flight, rebased over the remote steps applied since it
  /// was sent as `receiveTransaction` rebased our first unconfirmed step: null when that
  /// dropped it, undefined when the state was replaced meanwhile and it cannot be told.
  private refusedStep(): string | null | undefined {
    const sinceSent = this.sinceSent;
    if (sinceSent === null) return undefined;
    if (sinceSent.length === 0) return JSON.stringify(this.inFlightSteps[0]);
    const mapped = Step.fromJSON(this.schema, this.inFlightSteps[0]).map(new Mapping(sinceSent));
    if (!mapped) return null;
    try {
      if (mapped.apply(this.confirmedDoc!).failed) return null;
    } catch {
      return null;
    }
    return JSON.stringify(mapped.toJSON());
  }

  /// Drops the first unconfirmed step, which the server will never take (`error` says why),
  /// and rebases the later ones over its removal, as prosemirror-collab rebases them over
  /// remote steps: each is mapped through its inverse; one that no longer applies (it was
  /// typed inside what the dropped step inserted) is dropped too. With `room` (the server
  /// refused a step for the document's size, and said how much our confirmed document may
  /// still grow), every unconfirmed step that would grow it past that is dropped in the same
  /// pass, as the server would refuse it, and one that fits (after a step that shrank the
  /// document, say) is kept; the first is then dropped only if `dropFirst` (it was refused
  /// alone), not when `room` alone says what goes (a batch refused for the document's size).
  /// `onReload` says how many were dropped, once for them all. The state is rebuilt once on
  /// the confirmed document, so undo history starts afresh (as after `reconcile`); the
  /// version, and what is acknowledged, do not change. Returns whether a step was dropped.
  private dropRefused(error: ErrorBody, room: DocRoom | null = null, dropFirst = true): boolean {
    // Input the view has not read yet becomes a local step first, kept above the drop, and
    // anything dispatched while the new state is drawn waits for it (see `applying`).
    this.applying = true;
    try {
      this.options.beforeRemote?.();
      const previous = this.state!;
      const unconfirmed = sendableSteps(previous)?.steps ?? [];
      if (unconfirmed.length === 0) return false;
      // One rebase of them all, a dropped step being one never applied (as a rebase leaves
      // out a step that no longer applies): dropping them one by one, each with a rebuild of
      // the state, cost the square of a long backlog and a notice per step.
      const rebaser = new StepRebaser(unconfirmed, []);
      const kept: Step[] = [];
      let doc = this.confirmedDoc!;
      let grownBytes = 0;
      let grownPositions = 0;
      for (let i = 0; i < unconfirmed.length; i++) {
        const mapped = rebaser.map(unconfirmed[i]!);
        if (!mapped || (i === 0 && dropFirst)) continue;
        let next: Node | null;
        try {
          next = mapped.apply(doc).doc;
        } catch {
          next = null;
        }
        if (!next) continue;
        if (room) {
          // The server's own test, step by step: a step that makes the document grow past
          // either limit is refused, one that does not make it grow is taken.
          const bytes = bytesDelta(next, doc);
          const positions = next.nodeSize - doc.nodeSize;
          if (
            (bytes > 0 && grownBytes + bytes > room.bytes) ||
            (positions > 0 && grownPositions + positions > room.positions)
          )
            continue;
          grownBytes += bytes;
          grownPositions += positions;
        }
        doc = next;
        rebaser.applied(mapped);
        kept.push(mapped);
      }
      const dropped = unconfirmed.length - kept.length;
      if (dropped === 0) return false;
      this.error = error;
      let state = EditorState.create({
        schema: this.schema,
        doc: this.confirmedDoc!,
        plugins: [
          collab({ version: getVersion(previous), clientID: this.clientID }),
          ...this.plugins,
        ],
      });
      const tr = state.tr;
      for (const step of kept) tr.step(step);
      const map = (pos: number): number => rebaser.mapAfter(pos);
      const size = tr.doc.content.size;
      const anchor = Math.min(map(previous.selection.anchor), size);
      const head = Math.min(map(previous.selection.head), size);
      tr.setSelection(TextSelection.between(tr.doc.resolve(anchor), tr.doc.resolve(head)));
      state = state.apply(tr);
      this.state = state;
      this.stateReplaced(state, map);
      this.options.onReload?.({ dropped, reason: refusedLocalSteps });
      return true;
    } finally {
      this.applying = false;
    }
  }

  /// The token expired while connected (a request was refused `unauthorized`, or the server
  /// sent the socket away for it). With a way to get a fresh one, reconnect (the handshake
  /// asks for it) and send the unconfirmed steps again; they are kept. The first time at once;
  /// again and again (a handshake that keeps admitting a token the server then refuses) with a
  /// growing delay, since every round trip is a new handshake and join for the server. An
  /// accepted batch resets it, and so does a token that lasted longer than the longest wait.
  private renewToken(message: string): void {
    if (typeof this.options.token === 'function') {
      // A token that served longer than the longest wait was a good one (a reader, whose
      // batches never reset the count, renews at each expiry): start over. One that died
      // sooner (an issuer whose clock is behind the server's) keeps the wait growing, or a
      // client would come back once per token lifetime for good.
      const lasted = this.joinedAt < 0 ? 0 : Date.now() - this.joinedAt;
      if (lasted > (this.options.reconnectDelayMaxMs ?? 10_000)) this.tokenRetries = 0;
      const delay = this.backoff(this.tokenRetries++);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.reconnectNow();
      }, delay);
      return;
    }
    // A fixed token cannot be renewed here: stop, keeping the state and its unconfirmed
    // steps for the application to save or hand to a new client.
    this.fail(errorBody('unauthorized', message));
  }

  /// A refusal other than `stale`: retryable ones are retried with backoff; the others either
  /// drop the local steps the server will never take (`dropLocal`) or fail the client.
  private handleRefusal(
    answer: { code: string; message: string; retryable?: boolean; retryAfterMs?: number },
    retry: () => void,
    dropLocal = false,
  ): void {
    if (answer.code === 'unauthorized') {
      this.renewToken(answer.message);
      return;
    }
    const body = isErrorCode(answer.code)
      ? errorBody(answer.code, answer.message)
      : errorBody('bad-request', answer.message);
    if (body.retryable) {
      this.retryDelayMs = Math.min(
        Math.max(this.retryDelayMs * 2, this.options.reconnectDelayMs ?? 500),
        this.options.reconnectDelayMaxMs ?? 10_000,
      );
      // A rate limit says exactly when a token will be there: waiting longer only delays the
      // edit, shorter only earns another refusal. A little jitter spreads a burst of clients.
      const hinted = typeof answer.retryAfterMs === 'number' && answer.retryAfterMs >= 0;
      const delay = hinted
        ? answer.retryAfterMs! * (1 + Math.random() * 0.2)
        : this.jittered(this.retryDelayMs);
      // `moved`: another node serves the document now. Asking this connection again cannot
      // help: a new one goes through the gateway, which routes it to the node that does.
      const again = answer.code === 'moved' ? () => this.reconnectNow() : retry;
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        again();
      }, delay);
      return;
    }
    if (dropLocal && this.state) {
      this.error = body;
      this.reloading = true;
      this.pull(true, true);
      return;
    }
    this.fail(body);
  }

  /// Drops the connection and opens a new one (a new handshake, routed anew by a gateway).
  /// Unconfirmed steps stay in the editor state and are sent again after the join.
  private reconnectNow(): void {
    if (this.closed) return;
    this.socket.disconnect();
    this.reconnects++;
    this.socket.connect();
  }

  private onDisconnect(reason: Socket.DisconnectReason): void {
    this.joined = false;
    if (this.inFlight) {
      this.lostCount = this.sentCount;
      // A server closes a connection whose message is far over its limit instead of answering
      // it: whatever the reason, the next try of that batch goes in halves.
      if (reason === 'transport close' || reason === 'transport error')
        this.batchLimit = Math.max(1, Math.floor(this.sentCount / 2));
    }
    this.inFlight = false;
    // The reload's answer is lost with the connection; the join after it catches up instead
    // (and a refused step sent again is refused again).
    this.reloading = false;
    this.generation++;
    this.clearTimers();
    this.setStatus('offline');
    if (this.closed) return;
    if (reason === 'io server disconnect') {
      // The server sent us away on purpose (shutdown, a reload of its copy, a slow reader).
      // Socket.io does not reconnect by itself after that; come back after the hinted delay,
      // with jitter, unless the reason says coming back cannot help (`too-many-errors`).
      const notice = this.closingNotice;
      if (notice?.code === 'unauthorized') {
        this.renewToken(notice.message);
        return;
      }
      if (notice && isErrorCode(notice.code) && !errors[notice.code].retryable) {
        this.fail(errorBody(notice.code, notice.message));
        return;
      }
      // Evictions that keep coming (a document whose room fails again on every load) wait
      // longer each time; one after a quiet spell of a minute starts over.
      const now = Date.now();
      if (now - this.lastEvictionAt > 60_000) this.evictions = 0;
      this.lastEvictionAt = now;
      const hint = Math.max(notice?.retryAfterMs ?? 1000, this.backoff(this.evictions++));
      this.retryTimer = setTimeout(
        () => {
          this.retryTimer = null;
          this.reconnects++;
          this.socket.connect();
        },
        hint + Math.random() * Math.max(hint, 250),
      );
    } else if (reason !== 'io client disconnect') {
      // Our own `reconnectNow` counted it already.
      this.reconnects++;
    }
  }

  /// The delay before the `attempt`th retry of a kind (0: at once), doubling from the
  /// reconnection delay up to its bound, with the configured jitter.
  private backoff(attempt: number): number {
    return this.jittered(this.backoffBound(attempt));
  }

  /// The `attempt`th retry's delay before jitter.
  private backoffBound(attempt: number): number {
    if (attempt === 0) return 0;
    const base = this.options.reconnectDelayMs ?? 500;
    return Math.min(base * 2 ** (attempt - 1), this.options.reconnectDelayMaxMs ?? 10_000);
  }

  /// `delay` spread by the configured jitter (0–1) either way, so that clients sent away
  /// together do not come back together.
  private jittered(delay: number): number {
    return delay * (1 + (Math.random() - 0.5) * (this.options.reconnectJitter ?? 0.5));
  }

  private onConnectError(err: Error & { data?: unknown }): void {
    const data = err.data as Partial<ErrorBody> | undefined;
    if (!data || !isErrorCode(data.code)) return; // a transport error: Socket.io retries
    // A refused token is worth another try only when the client can get a fresh one.
    const refreshable = data.code === 'unauthorized' && typeof this.options.token === 'function';
    if (!data.retryable && !refreshable) {
      this.fail(errorBody(data.code, data.message));
      return;
    }
    // Refused by the server's handshake check but retryable (shutting down): Socket.io does
    // not retry middleware refusals itself.
    this.retryTimer = setTimeout(
      () => {
        this.retryTimer = null;
        this.socket.connect();
      },
      1000 + Math.random() * 1000,
    );
  }

  private fail(error: ErrorBody): void {
    this.error = error;
    this.closed = true;
    this.clearTimers();
    this.socket.close();
    this.setStatus('failed');
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(new Error(error.message));
    for (const waiter of this.settleWaiters.splice(0)) waiter.reject(new Error(error.message));
  }

  private clearTimers(): void {
    if (this.staleTimer !== null) clearTimeout(this.staleTimer);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.staleTimer = null;
    this.retryTimer = null;
    this.waitForVersion = 0;
  }

  private isSettled(): boolean {
    return this.joined && !this.inFlight && !this.hasUnconfirmed;
  }

  private refreshStatus(): void {
    if (this.status === 'failed' || this.closed) return;
    if (!this.joined) this.setStatus(this.socket.connected ? 'connecting' : 'offline');
    else this.setStatus(this.hasUnconfirmed || this.inFlight ? 'sending' : 'synced');
    if (this.isSettled()) for (const waiter of this.settleWaiters.splice(0)) waiter.resolve();
  }

  private setStatus(status: CollabStatus): void {
    if (this.status === status) return;
    this.status = status;
    this.options.onStatus?.(status, this.error);
  }
}

/// True when the steps `[start, end)` of a broadcast are, to the letter, our first unconfirmed
/// steps: what prosemirror-collab assumes when it confirms a run of our own client id.
function matchesUnconfirmed(
  state: EditorState,
  steps: readonly StepJSON[],
  start: number,
  end: number,
): boolean {
  const unconfirmed = sendableSteps(state)?.steps;
  if (!unconfirmed || unconfirmed.length < end - start) return false;
  for (let i = start; i < end; i++) {
    if (JSON.stringify(unconfirmed[i - start]!.toJSON()) !== JSON.stringify(steps[i])) return false;
  }
  return true;
}

/// A batch of more steps than this refused `too-large` is sent again in halves before its
/// steps go one at a time (`refusedForGood`).
const halveAbove = 64;

/// What a batch may hold when the server does not say (its default message limit is 64 KiB).
const defaultMaxBatchBytes = 32 * 1024;

/// `onReload`'s reason when local steps the server refused for good were dropped; only then
/// does `error` explain the drop (it keeps the last refusal until another error replaces it).
export const refusedLocalSteps = 'the server refused local steps';

/// Bytes of `{"version":,"steps":[]}`: a `steps` message but its version and its steps.
const messageBytes = 23;

/// Bytes of socket.io's packet around a message, at most: `42<ack id>["steps",…]`.
const packetBytes = 32;

/// Digits of a version in JSON, without making a string of it (once per batch).
function decimalDigits(n: number): number {
  let digits = 1;
  for (let limit = 10; n >= limit; limit *= 10) digits++;
  return digits;
}

/// The bytes of `text` (JSON text, where a surrogate is always one of a pair: a lone one is
/// escaped as `\udxxx`) in UTF-8.
function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) continue;
    // Each half of a surrogate pair is 2 of its 4 bytes. Counted 3 each, as a character above
    // 0x800, a paste of emoji near Engine.IO's cap was dropped unsent though the server takes it.
    if (code >= 0xd800 && code <= 0xdfff) bytes += 1;
    else bytes += code < 0x800 ? 1 : 2;
  }
  return bytes;
}

/// A client id that is unique enough for one document's editors, without `crypto.randomUUID`
/// (which browsers only offer on secure origins).
export function randomClientID(): string {
  return Date.now().toString(36) + '-' + Math.random().toString(36).slice(2, 10);
}
