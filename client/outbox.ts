import { getVersion, sendableSteps } from 'prosemirror-collab';
import { errorBody } from '../schema/errors.js';
import { type ErrorAnswer, type StepsAnswer, type DocRoom } from '../schema/events.js';
import { nextBatch } from './batch.js';
import type { ClientParts, ClientState } from './client_state.js';
import type { ClientSocket } from './connection.js';

/// The outbound side: sends the unconfirmed steps one batch at a time, sized to the server's
/// limits, and reads the answer: accepted (acknowledged, the next batch goes), `stale` (wait
/// for the broadcast that made it so, then send again), or a refusal (`Refusals`).
export class Outbox {
  constructor(
    private readonly s: ClientState,
    private readonly parts: ClientParts,
    private readonly socket: ClientSocket,
  ) {}

  /// Whether nothing stops a batch from going now: joined, not closed, nothing in flight or
  /// being reloaded or applied, no retry waiting, writable, and not waiting for a broadcast.
  private canSend(): boolean {
    const s = this.s;
    return (
      s.joined &&
      s.state !== null &&
      s.delivery === 'idle' &&
      !s.applying &&
      s.retryTimer === null &&
      !s.options.readOnly &&
      getVersion(s.state) >= s.waitForVersion
    );
  }

  /// Sends the next batch of unconfirmed steps if nothing stops it, and refreshes the status.
  send(): void {
    const s = this.s;
    if (!this.canSend()) {
      s.refreshStatus(this.socket.connected);
      return;
    }
    const sendable = sendableSteps(s.state!);
    if (!sendable) {
      // Steps counted as suspect may have gone meanwhile (dropped by a rebase or a reload).
      s.suspect = 0;
      s.refreshStatus(this.socket.connected);
      return;
    }
    if (s.suspect > sendable.steps.length) s.suspect = sendable.steps.length;
    const steps = nextBatch(sendable.steps, sendable.version, {
      batchLimit: s.batchLimit,
      suspect: s.suspect,
      limits: s.limits,
      maxBatchBytes: s.options.maxBatchBytes,
    });
    if (!Array.isArray(steps)) {
      // A step bigger than the server takes in a message, or one its payload gate would refuse
      // (a string or a nesting over its limits): sending it could only close the connection
      // (over twice the message limit) or be refused, a strike against the connection each
      // time; neither would ever change. It alone is dropped, here, and the steps after it go
      // on.
      if (s.suspect > 0) s.suspect--;
      this.parts.dropRefused(steps);
      this.send();
      return;
    }
    s.delivery = 'in-flight';
    const generation = s.generation;
    s.sent = { steps, sinceSent: [] };
    this.socket.emit('steps', { version: sendable.version, steps }, (answer) =>
      this.answered(answer, generation),
    );
    s.refreshStatus(this.socket.connected);
  }

  /// The server answered the batch sent on connection `generation`.
  answered(answer: StepsAnswer, generation: number): void {
    const s = this.s;
    if (generation !== s.generation) return;
    s.delivery = 'idle';
    if (answer.ok) {
      s.retryDelayMs = 0;
      s.tokenRetries = 0;
      s.evictions = 0;
      if (s.suspect > 0) s.suspect = Math.max(0, s.suspect - s.sent.steps.length);
      if (s.suspect === 0) s.batchLimit *= 2;
      // The broadcast came first and acknowledged the batch, with the steps as the server
      // applied them. Unless it was not applied (it seemed to leave a gap, and a pull fills it).
      if (answer.version > s.acknowledgedVersion) s.acknowledge(answer.version, s.sent.steps);
      this.send();
      return;
    }
    s.refusals[answer.code] = (s.refusals[answer.code] ?? 0) + 1;
    switch (answer.code) {
      case 'stale':
        this.stale(answer.version ?? 0);
        return;
      case 'history-gone':
        this.parts.pull(true);
        return;
      case 'too-large':
      case 'too-deep':
      case 'invalid-step':
        this.parts.refusedForGood(errorBody(answer.code, answer.message), this.roomNow(answer));
        return;
      case 'unauthorized':
        this.parts.renewToken(answer.message);
        return;
      default:
        this.parts.refused(answer, () => this.send(), true);
    }
  }

  /// Our batch was `stale` at `version`. The broadcast that made it so is on its way (or
  /// already here): wait for it, rebase through receiveTransaction, resend. A pull covers a
  /// broadcast that never comes (steps the server could not make durable are never broadcast).
  private stale(version: number): void {
    const s = this.s;
    s.staleAnswers++;
    s.waitForVersion = version;
    if (s.version < s.waitForVersion && s.staleTimer === null) {
      s.staleTimer = setTimeout(() => {
        s.staleTimer = null;
        s.waitForVersion = 0;
        if (s.joined) this.parts.pull(false);
      }, s.delays.staleWaitMs);
    }
    this.send();
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
      answer.version !== this.s.version
    )
      return null;
    return room;
  }
}
