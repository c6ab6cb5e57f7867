import { getVersion, receiveTransaction, sendableSteps } from 'prosemirror-collab';
import { Node } from 'prosemirror-model';
import type { EditorState } from 'prosemirror-state';
import { Step } from 'prosemirror-transform';
import type { StepJSON, StepsBroadcast, SyncAnswer } from '../schema/events.js';
import type { ClientParts, ClientState } from './client_state.js';
import type { ClientSocket } from './connection.js';
import { reconcile, reload } from './replace_state.js';

/// A join or pull the server answered.
type SyncOk = Extract<SyncAnswer, { ok: true }>;

/// The inbound side: joining the document and catching up by version (`join`, `pull`), and
/// applying what the server sends (broadcasts of steps, or a whole document), with our own
/// steps among them confirmed and acknowledged.
export class Sync {
  constructor(
    private readonly s: ClientState,
    private readonly parts: ClientParts,
    private readonly socket: ClientSocket,
  ) {}

  /// Joins the document at our version (the whole document before the first join). The answer
  /// resolves `ready` and lets the client send.
  join(): void {
    const s = this.s;
    const generation = s.generation;
    const request = s.state && s.epoch ? { version: getVersion(s.state), epoch: s.epoch } : {};
    this.socket.emit('join', request, (answer) => {
      if (generation !== s.generation) return;
      if (!answer.ok) {
        this.parts.refused(answer, () => this.join());
        return;
      }
      if (!s.closed) s.link = { kind: 'joined', joinedAt: Date.now() };
      s.retryDelayMs = 0;
      if (answer.limits) s.limits = answer.limits;
      this.applySync(answer);
      for (const waiter of s.readyWaiters.splice(0)) waiter.resolve();
      this.parts.send();
    });
  }

  /// Asks for the steps since our version, or the whole document when `full`; with
  /// `dropLocal`, the answer replaces the state without the unconfirmed steps.
  pull(full: boolean, dropLocal = false): void {
    const s = this.s;
    const generation = s.generation;
    const request =
      !full && s.state && s.epoch ? { version: getVersion(s.state), epoch: s.epoch } : {};
    this.socket.emit('pull', request, (answer) => {
      if (generation !== s.generation) return;
      if (!answer.ok) {
        this.parts.refused(answer, () => this.pull(full, dropLocal));
        return;
      }
      if (dropLocal && s.delivery === 'reloading') s.delivery = 'idle';
      this.applySync(answer, dropLocal);
      this.parts.send();
    });
  }

  /// Applies a broadcast of steps, then sends what may go.
  onSteps(message: StepsBroadcast): void {
    const s = this.s;
    if (!s.joined || !s.state) return;
    s.whileApplying(() => this.receive(message.version, message.steps, message.clientIDs));
    this.parts.send();
  }

  private applySync(answer: SyncOk, dropLocal = false): void {
    this.s.whileApplying(() => this.applySyncAnswer(answer, dropLocal));
  }

  private applySyncAnswer(answer: SyncOk, dropLocal: boolean): void {
    const s = this.s;
    const epochChanged = s.epoch !== null && s.epoch !== answer.epoch;
    const historyLost = this.adoptHistory(answer, epochChanged);
    // The last batch of ours seen confirmed, as numbered in the history we knew.
    const ownEnd = s.lastOwnRunEnd;
    if (epochChanged) {
      // A new history: what was acknowledged in the old one says nothing about this one,
      // where the server's document (durable, since it serves it) is all that is
      // acknowledged; our steps seen confirmed so far belong to the old one too.
      s.acknowledgedVersion = answer.version;
      s.lastOwnRunEnd = -1;
    }
    const lostCount = s.delivery === 'lost' ? s.sent.steps.length : 0;
    // Whatever the answer, it says whether a lost batch landed: it is lost no more.
    if (s.delivery === 'lost') s.delivery = 'idle';
    if (!('doc' in answer)) {
      // The steps since our version: a lost batch that landed is among them, as ours, and
      // `receive` confirms and acknowledges it.
      this.receive(answer.version, answer.steps, answer.clientIDs);
      return;
    }
    // A batch lost in flight is in this document when the server's last batch of ours ends
    // after the last one we saw confirmed (one batch is in flight at a time). Compared with
    // what we saw in the old history even when the epoch changed: a new epoch that holds a
    // batch of ours continues the old one's numbering (a server that stored its copy anew
    // after its store went back, `Room.restartHistory`); one that starts afresh holds none
    // when we first join it.
    const through = answer.acceptedThrough;
    const landed = through !== undefined && through > ownEnd ? lostCount : 0;
    if (through !== undefined) s.lastOwnRunEnd = Math.max(s.lastOwnRunEnd, through);
    const doc = Node.fromJSON(s.schema, answer.doc);
    reload(s, doc, answer.version, dropLocal, epochChanged || historyLost, landed);
    // Its acknowledgement was lost, not its durability. (Its steps as we sent them: the
    // server's, rebased or not, are inside `doc`.)
    if (landed > 0) s.acknowledge(through!, s.sent.steps);
  }

  /// Takes the answer's epoch. Returns whether the server is behind us in our own epoch: its
  /// store lost steps we saw confirmed (it went back to an older state). Its answer is then
  /// the whole document, which we reload; what we saw acknowledged past its version is not
  /// durable any more, and must not be reported so.
  private adoptHistory(answer: SyncOk, epochChanged: boolean): boolean {
    const s = this.s;
    const historyLost = !epochChanged && s.state !== null && answer.version < getVersion(s.state);
    if (historyLost && s.acknowledgedVersion > answer.version)
      s.acknowledgedVersion = answer.version;
    // Our batches seen confirmed past its version are gone with them, and the server numbers
    // new steps from there again: a later batch of ours whose acknowledgement is lost may
    // land at a version we once saw ours end at, and must still be recognised as landed.
    if (historyLost && s.lastOwnRunEnd > answer.version) s.lastOwnRunEnd = answer.version;
    s.epoch = answer.epoch;
    return historyLost;
  }

  /// Applies steps ending at `version`. Steps already seen are skipped; a gap (steps that start
  /// after our version) means something was missed, and a pull fills it.
  private receive(version: number, steps: readonly StepJSON[], clientIDs: readonly string[]): void {
    const s = this.s;
    const current = getVersion(s.state!);
    const base = version - steps.length;
    if (version <= current) return;
    if (base > current) {
      this.pull(false);
      return;
    }
    // May dispatch local input (through `dispatch`), which moves `s.state` on.
    s.options.beforeRemote?.();
    // prosemirror-collab only recognises our own steps at the start of what it is given:
    // feed it each run of equal clientIDs on its own so that a mixed group confirms ours.
    let start = current - base;
    while (start < steps.length) {
      let end = start + 1;
      while (end < steps.length && clientIDs[end] === clientIDs[start]) end++;
      this.receiveRun(steps, clientIDs, start, end, base);
      start = end;
    }
    if (s.staleTimer !== null && getVersion(s.state!) >= s.waitForVersion) {
      clearTimeout(s.staleTimer);
      s.staleTimer = null;
    }
  }

  /// Applies the steps `[start, end)` of a broadcast starting at version `base`, all from one
  /// client, on top of the current state.
  private receiveRun(
    steps: readonly StepJSON[],
    clientIDs: readonly string[],
    start: number,
    end: number,
    base: number,
  ): void {
    const s = this.s;
    // A view or plugin may dispatch from `onState` (`dispatch` applies it to `s.state`): each
    // run goes on top of that, not of the state before it.
    const state = s.state!;
    const run: Step[] = new Array(end - start);
    for (let i = start; i < end; i++) run[i - start] = Step.fromJSON(s.schema, steps[i]);
    const own = clientIDs[start] === s.clientID;
    if (own) s.lastOwnRunEnd = base + end;
    if (own && !matchesUnconfirmed(state, steps, start, end)) {
      // The server rebased our batch and got other steps than our own rebase did:
      // prosemirror-collab would take ours as confirmed and silently diverge.
      reconcile(s, state, run, s.confirmedDoc!, base + end);
    } else {
      const sent = s.sent;
      if (!own && s.inFlight && sent.steps.length === 1 && sent.sinceSent)
        for (let i = 0; i < run.length; i++) sent.sinceSent.push(run[i]!.getMap());
      const tr = receiveTransaction(state, run, clientIDs.slice(start, end), {
        mapSelectionBackward: true,
      });
      s.state = state.apply(tr);
      let confirmed = s.confirmedDoc!;
      for (let i = 0; i < run.length; i++) confirmed = run[i]!.apply(confirmed).doc!;
      s.confirmedDoc = confirmed;
      s.options.onState?.(s.state, tr);
    }
    // Broadcast only once durable: acknowledged, whether or not the acknowledgement that
    // follows reaches us (the connection may drop between the two, or the batch was sent
    // on an earlier connection and answered there).
    if (own && base + end > s.acknowledgedVersion)
      s.acknowledge(base + end, steps.slice(start, end));
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
