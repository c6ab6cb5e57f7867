import type { ErrorCode } from '../../schema/errors.js';

/// An error that carries the code its refusal is answered with: what a host's hook throws to
/// refuse something (`forbidden`, say) becomes one, and the rooms reject with one when the
/// answer is a code of the shared table (`moved`, `unavailable`). Whatever catches it answers
/// `code`, with `retryAfterMs` when set.
export class CodedError extends Error {
  readonly code: ErrorCode;
  /// For retryable codes, when the server knows: how long to wait before trying again.
  readonly retryAfterMs: number | undefined;
  constructor(
    code: ErrorCode,
    message?: string,
    options?: { cause?: unknown; retryAfterMs?: number },
  ) {
    super(message ?? code, options);
    this.name = 'CodedError';
    this.code = code;
    this.retryAfterMs = options?.retryAfterMs;
  }
}
