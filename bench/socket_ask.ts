import type { Socket } from 'socket.io-client';

/// Emits `event` with `payload` and resolves with the server's acknowledgement; rejects when
/// none comes within `timeoutMs` (benches wait long: a loaded server is what they measure).
export function ask<T>(
  socket: Socket,
  event: string,
  payload: unknown,
  timeoutMs = 60_000,
): Promise<T> {
  return new Promise((resolve, reject) =>
    socket.timeout(timeoutMs).emit(event, payload, (err: Error | null, answer: T) => {
      if (err) reject(new Error(`no answer to ${event}`));
      else resolve(answer);
    }),
  );
}
