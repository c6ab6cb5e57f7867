/// A token bucket: `burst` tokens at most, refilled at `perSecond`. No timers: the refill is
/// computed from the clock when a token is taken, so an idle bucket costs nothing.
export class TokenBucket {
  private tokens: number;
  private last: number;

  /// `perSecond` 0 means no limit (every `take` succeeds).
  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  /// Takes one token at time `now` (ms). Returns 0 when it was there, otherwise how many
  /// milliseconds until one will be (nothing is taken then).
  take(now: number): number {
    if (this.perSecond === 0) return 0;
    this.refill(now);
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - this.tokens) * 1000) / this.perSecond);
  }

  /// Puts back one token `take` took, for something that was not done after all.
  give(): void {
    if (this.perSecond === 0) return;
    this.tokens = Math.min(this.burst, this.tokens + 1);
  }

  /// True when the bucket is full again at `now`: a holder may forget it.
  full(now: number): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }

  private refill(now: number): void {
    const elapsed = now - this.last;
    if (elapsed > 0) {
      this.tokens = Math.min(this.burst, this.tokens + (elapsed * this.perSecond) / 1000);
      this.last = now;
    }
  }
}
