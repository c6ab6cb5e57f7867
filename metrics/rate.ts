/// `count` events over `seconds` as events per second, rounded to three decimals so windows log
/// and serialise compactly. Returns 0 when `seconds` is 0.
export function rate(count: number, seconds: number): number {
  if (seconds <= 0) return 0;
  return Math.round((count / seconds) * 1000) / 1000;
}
