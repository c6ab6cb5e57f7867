/// Polls `condition` every few milliseconds until it holds; rejects with `what` after
/// `timeoutMs`. Tests wait for behaviour this way instead of sleeping a guessed time.
export async function waitFor(
  condition: () => boolean,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/// Resolves after `ms` milliseconds.
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/// Calls `probe` every `intervalMs` until `done` holds for its value or `timeoutMs` has passed,
/// and resolves with the last value either way, so that the caller asserts on it and says what
/// went wrong. For conditions that need a round trip (an HTTP read, a store query).
export async function pollUntil<T>(
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs: number,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await probe();
  while (!done(value) && Date.now() < deadline) {
    await delay(intervalMs);
    value = await probe();
  }
  return value;
}
