import type { Random } from './random.js';

/// The rhythm of one simulated person: an edit every `1 / ratePerSec` seconds on average, each
/// gap drawn between half and one and a half of the mean so that editors do not fall into
/// lockstep. The first edit lands at a random point of the first gap for the same reason.
///
/// The beats are a fixed schedule (each due time is the previous one plus a gap), not gaps
/// measured from when the timer happened to run: a busy thread fires timers late, and gaps
/// counted from the late firing would never make that lateness up, so the rate offered would
/// fall silently with the load. A beat that is already due fires at the next
/// turn of the event loop, so a late person catches up with a burst, as a person typing into a
/// frozen page does.
export class Pace {
  private readonly meanGapMs: number;
  private readonly random: Random;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private onEdit: ((dueMs: number) => void) | null = null;
  /// When the next beat is due, on the `performance.now()` clock.
  private dueMs = 0;

  constructor(ratePerSec: number, random: Random) {
    this.meanGapMs = 1000 / ratePerSec;
    this.random = random;
  }

  /// Calls `onEdit` at every beat from `delayMs` from now on, until `stop`, with the moment
  /// (`performance.now()` clock) the beat was due: later than that only if the thread was busy.
  start(delayMs: number, onEdit: (dueMs: number) => void): void {
    this.onEdit = onEdit;
    this.dueMs = performance.now() + delayMs + this.random.next() * this.meanGapMs;
    this.schedule();
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.onEdit = null;
  }

  private schedule(): void {
    this.timer = setTimeout(
      () => {
        this.timer = null;
        const onEdit = this.onEdit;
        if (!onEdit) return;
        const dueMs = this.dueMs;
        this.dueMs += this.meanGapMs * (0.5 + this.random.next());
        this.schedule();
        onEdit(dueMs);
      },
      Math.max(0, this.dueMs - performance.now()),
    );
  }
}
