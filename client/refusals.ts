import { getVersion, sendableSteps } from 'prosemirror-collab';
import type { Node } from 'prosemirror-model';
import { Mapping, Step } from 'prosemirror-transform';
import { bytesDelta } from '../schema/doc_size.js';
import { errorBody, isErrorCode, type ErrorBody } from '../schema/errors.js';
import { StepRebaser } from '../schema/rebase.js';
import { type DocRoom } from '../schema/events.js';
import {
  refusedLocalSteps,
  type ClientParts,
  type ClientState,
  type Refusal,
} from './client_state.js';
import type { Connection } from './connection.js';
import { stateWithSteps } from './replace_state.js';

/// A batch of more steps than this refused `too-large` is sent again in halves before its
/// steps go one at a time (`refusedForGood`).
const halveAbove = 64;

/// What the client does when the server refuses it: retry after a delay, reconnect, fail, or
/// find the local steps the server will never take and drop them, keeping the others.
export class Refusals {
  constructor(
    private readonly s: ClientState,
    private readonly parts: ClientParts,
    private readonly connection: Connection,
  ) {}

  /// A refusal other than `stale`: retryable ones are retried with `retry` after a backoff;
  /// the others either drop the local steps the server will never take (`dropLocal`) or fail
  /// the client.
  refused(answer: Refusal, retry: () => void, dropLocal = false): void {
    const s = this.s;
    if (answer.code === 'unauthorized') {
      this.connection.renewToken(answer.message);
      return;
    }
    const body = isErrorCode(answer.code)
      ? errorBody(answer.code, answer.message)
      : errorBody('bad-request', answer.message);
    if (body.retryable) {
      const backoff = this.connection.nextRetryDelay();
      // A rate limit says exactly when a token will be there: waiting longer only delays the
      // edit, shorter only earns another refusal. A little jitter spreads a burst of clients.
      const hinted = typeof answer.retryAfterMs === 'number' && answer.retryAfterMs >= 0;
      const delay = hinted ? answer.retryAfterMs! * (1 + Math.random() * 0.2) : backoff;
      // `moved`: another node serves the document now. Asking this connection again cannot
      // help: a new one goes through the gateway, which routes it to the node that does.
      const again = answer.code === 'moved' ? () => this.connection.reconnectNow() : retry;
      this.connection.retryAfter(delay, again);
      return;
    }
    if (dropLocal && s.state) {
      s.error = body;
      s.delivery = 'reloading';
      this.parts.pull(true, true);
      return;
    }
    this.connection.fail(body);
  }

  /// The server refused the batch in flight for a reason that sending it again cannot change,
  /// without saying which of its steps it will not take. A batch of several steps is sent again
  /// one step at a time (`suspect`); a step refused on its own is dropped, and the steps after
  /// it are kept, rebased over its removal.
  refusedForGood(error: ErrorBody, room: DocRoom | null): void {
    const s = this.s;
    const count = s.sent.steps.length;
    if (count > 1) {
      // Refused for the document's size: the steps that would not fit are dropped at once,
      // and the rest, which the server takes, sent again. Nothing dropped means our measure
      // and the server's disagree: the steps then go one at a time, as for any other refusal.
      if (room && this.dropRefused(error, room, false)) {
        s.suspect = 0;
        this.parts.send();
        return;
      }
      s.suspect = Math.max(s.suspect, count);
      // The server checks its time budget between steps, so a single step is never refused
      // for time, but a long batch may be refused `too-large` with no bad step in it: one of
      // more than `halveAbove` steps is sent again in halves first, rather than hundreds of
      // round trips. A bad step among them costs a strike per halving before the steps go
      // one at a time.
      s.batchLimit = error.code === 'too-large' && count > halveAbove ? Math.ceil(count / 2) : 1;
      this.parts.send();
      return;
    }
    // Remote steps that came while it was in flight rebased our first step, or dropped it
    // (what it changed was deleted), as `receiveTransaction` does: the step sent, mapped the
    // same way, says which unconfirmed step, if any, is the one refused. Sending it again
    // whenever remote steps came would cost a strike each time on a busy document.
    const refused = this.refusedStep();
    const first = sendableSteps(s.state!)?.steps[0];
    if (refused === null) {
      // The rebase dropped it already.
      if (s.suspect > 0) s.suspect--;
    } else if (refused === undefined || !first || JSON.stringify(first.toJSON()) !== refused) {
      // The state was replaced meanwhile (a reload), or the rebase went another way: send it
      // again alone; it is refused again if it is the bad one, and lands if it is not.
      s.suspect = Math.max(s.suspect, 1);
    } else {
      if (s.suspect > 0) s.suspect--;
      this.dropRefused(error, room);
    }
    this.parts.send();
  }

  /// The JSON text of the one step in flight, rebased over the remote steps applied since it
  /// was sent as `receiveTransaction` rebased our first unconfirmed step: null when that
  /// dropped it, undefined when the state was replaced meanwhile and it cannot be told.
  private refusedStep(): string | null | undefined {
    const { sent, schema } = this.s;
    const sinceSent = sent.sinceSent;
    if (sinceSent === null) return undefined;
    if (sinceSent.length === 0) return JSON.stringify(sent.steps[0]);
    const mapped = Step.fromJSON(schema, sent.steps[0]).map(new Mapping(sinceSent));
    if (!mapped) return null;
    try {
      if (mapped.apply(this.s.confirmedDoc!).failed) return null;
    } catch {
      return null;
    }
    return JSON.stringify(mapped.toJSON());
  }

  /// Drops the first unconfirmed step, which the server will never take (`error` says why),
  /// and rebases the later ones over its removal (`keptAfterDrop`). `onReload` says how many
  /// were dropped, once for them all. The state is rebuilt once on the confirmed document, so
  /// undo history starts afresh (as after a reconcile); the version, and what is
  /// acknowledged, do not change. Returns whether a step was dropped.
  dropRefused(error: ErrorBody, room: DocRoom | null = null, dropFirst = true): boolean {
    const s = this.s;
    // Input the view has not read yet becomes a local step first, kept above the drop, and
    // anything dispatched while the new state is drawn waits for it (see `applying`).
    return s.whileApplying(() => {
      s.options.beforeRemote?.();
      const previous = s.state!;
      const unconfirmed = sendableSteps(previous)?.steps ?? [];
      if (unconfirmed.length === 0) return false;
      const { kept, rebaser } = keptAfterDrop(unconfirmed, s.confirmedDoc!, room, dropFirst);
      const dropped = unconfirmed.length - kept.length;
      if (dropped === 0) return false;
      s.error = error;
      const map = (pos: number): number => rebaser.mapAfter(pos);
      const version = getVersion(previous);
      const state = stateWithSteps(s, s.confirmedDoc!, version, kept, previous, map);
      s.state = state;
      s.stateReplaced(state, map);
      s.options.onReload?.({ dropped, reason: refusedLocalSteps });
      return true;
    });
  }
}

/// The unconfirmed steps (made on `confirmed`) that remain once the first is dropped, each
/// rebased over the removal of those dropped before it, as prosemirror-collab rebases over
/// remote steps: mapped through their inverses; one that no longer applies (it was typed
/// inside what a dropped step inserted) is dropped too. With `room` (the server refused a step
/// for the document's size, and said how much our confirmed document may still grow), every
/// step that would grow it past that is dropped in the same pass, as the server would refuse
/// it, and one that fits (after a step that shrank the document, say) is kept; the first is
/// then dropped only if `dropFirst` (it was refused alone), not when `room` alone says what
/// goes (a batch refused for the document's size). One rebase of them all, a dropped step
/// being one never applied, so that a long backlog costs one pass and one notice.
function keptAfterDrop(
  unconfirmed: readonly Step[],
  confirmed: Node,
  room: DocRoom | null,
  dropFirst: boolean,
): { kept: Step[]; rebaser: StepRebaser } {
  const rebaser = new StepRebaser(unconfirmed, []);
  const kept: Step[] = [];
  let doc = confirmed;
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
  return { kept, rebaser };
}
