import type { Node } from 'prosemirror-model';
import { errorBody, type ErrorCode } from '../../schema/errors.js';
import {
  type DocRoom,
  type ErrorAnswer,
  type StepJSON,
  type StepsAnswer,
} from '../../schema/events.js';
import { movedRetryMs, type BatchObserver } from './room_options.js';

/// A batch accepted by the authority and waiting to be journaled, acknowledged and broadcast.
export interface PendingBatch {
  ack: (answer: StepsAnswer) => void;
  clientID: string;
  user: string | null;
  steps: StepJSON[];
  /// The version after the batch, and the document at it.
  version: number;
  doc: Node;
  /// When it was received and applied (ms, `performance.now()`).
  received: number;
  applied: number;
}

/// The steps of `group`, in order, as one journal entry: each step with its batch's client
/// and user (kept by the history).
export function groupSteps(group: readonly PendingBatch[]): {
  steps: StepJSON[];
  clientIDs: string[];
  users: (string | null)[];
} {
  if (group.length === 1) {
    const { steps, clientID, user } = group[0]!;
    return {
      steps,
      clientIDs: new Array<string>(steps.length).fill(clientID),
      users: new Array<string | null>(steps.length).fill(user),
    };
  }
  const steps: StepJSON[] = [];
  const clientIDs: string[] = [];
  const users: (string | null)[] = [];
  for (let i = 0; i < group.length; i++) {
    const batch = group[i]!;
    for (let j = 0; j < batch.steps.length; j++) {
      steps.push(batch.steps[j]!);
      clientIDs.push(batch.clientID);
      users.push(batch.user);
    }
  }
  return { steps, clientIDs, users };
}

/// One room's batches between the authority and the journal: those waiting for the next
/// group commit, whether one is in flight, and who waits for both to be done. Every batch
/// taken out of it is answered exactly once, acknowledged (`accepted`) or refused (`refuse`,
/// `refuseAll`), and each answer is recorded by the observer.
export class BatchQueue {
  private pending: PendingBatch[] = [];
  /// A group commit is in flight: its batches left `pending` and are not answered yet.
  private inFlight = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly docId: string,
    private readonly observer: BatchObserver | null,
  ) {}

  /// Batches waiting for the next group commit.
  get waiting(): number {
    return this.pending.length;
  }

  /// True while a group commit is in flight.
  get flushing(): boolean {
    return this.inFlight;
  }

  /// Queues a batch the authority applied.
  push(batch: PendingBatch): void {
    this.pending.push(batch);
  }

  /// Takes every waiting batch as one group, in flight until `landed`.
  takeGroup(): PendingBatch[] {
    const group = this.pending;
    this.pending = [];
    this.inFlight = true;
    return group;
  }

  /// The group in flight is answered (or will be, by whoever holds it).
  landed(): void {
    this.inFlight = false;
  }

  /// Takes every waiting batch, to be refused: with `group` (the one in flight) first, which
  /// is then no longer in flight.
  drain(group?: PendingBatch[]): PendingBatch[] {
    const drained = group ? group.concat(this.pending) : this.pending;
    this.pending = [];
    if (group) this.inFlight = false;
    return drained;
  }

  /// Resolves once nothing is waiting or in flight.
  whenIdle(): Promise<void> {
    if (this.pending.length === 0 && !this.inFlight) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /// Wakes whoever waits in `whenIdle`, if nothing is waiting or in flight now.
  settle(): void {
    if (this.pending.length > 0 || this.inFlight) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (let i = 0; i < waiters.length; i++) waiters[i]!();
  }

  /// Acknowledges `batch`, taken into a flush at `taken` and made durable at `persisted` (ms,
  /// `performance.now()`; `taken` NaN when unknown: no hold is recorded).
  accepted(batch: PendingBatch, persisted: number, taken = NaN): void {
    batch.ack({ ok: true, version: batch.version });
    if (this.observer) {
      const { steps, received, applied } = batch;
      const now = performance.now();
      const count = steps.length;
      this.observer.record(this.docId, 'accepted', count, received, applied, persisted, now, taken);
    }
  }

  /// Refuses every batch of `batches` with `code`, telling each the document is at `version`.
  refuseAll(batches: readonly PendingBatch[], code: ErrorCode, version: number): void {
    for (let i = 0; i < batches.length; i++) {
      const batch = batches[i]!;
      this.refuse(batch.ack, code, undefined, version, batch.received, batch.steps.length);
    }
  }

  /// Answers a batch of `steps` steps received at `received` with `code`; `room` says how
  /// much room the document has left, for `too-large`.
  refuse(
    ack: (answer: StepsAnswer) => void,
    code: ErrorCode,
    message: string | undefined,
    version: number,
    received: number,
    steps: number,
    room?: DocRoom,
  ): void {
    // A batch refused `moved` (its room's lease found gone) comes back once the document is
    // served elsewhere, like the room's editors.
    const retryAfterMs = code === 'moved' ? movedRetryMs : undefined;
    const answer: ErrorAnswer = { ok: false, ...errorBody(code, message, retryAfterMs), version };
    if (room) answer.room = room;
    ack(answer);
    if (this.observer) {
      const now = performance.now();
      this.observer.record(this.docId, code, steps, received, now, NaN, now);
    }
  }
}
