import type { Random } from './random.js';

/// The rhythm of one simulated person: an edit every `1 / ratePerSec` seconds on average, each
/// gap drawn between half and one and a half of the mean so that editors do not fall into
/// lockstep. The first edit lands at a random point of the first gap for the same reason.
export class Pace {
  private readonly meanGapMs: number;
  private readonly random: Random;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private onEdit: (() => void) | null = null;

  constructor(ratePerSec: number, random: Random) {
    this.meanGapMs = 1000 / ratePerSec;
    this.random = random;
  }

  /// Calls `onEdit` at every beat from `delayMs` from now on, until `stop`.
  start(delayMs: number, onEdit: () => void): void {
    this.onEdit = onEdit;
    this.schedule(delayMs + this.random.next() * this.meanGapMs);
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.onEdit = null;
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.timer = null;
      const onEdit = this.onEdit;
      if (!onEdit) return;
      this.schedule(this.meanGapMs * (0.5 + this.random.next()));
      onEdit();
    }, ms);
  }
}
