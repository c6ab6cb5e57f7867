/// Every error code that can reach a client, in acknowledgements (`{ok: false, code}`) and in
/// `connect_error.data`. Clients switch on `code`; `message` is for people; `retryable` says
/// whether sending the same thing again later can succeed.
export const errors = {
  stale: {
    message: 'The document has moved on: wait for the steps broadcast, rebase, and resend',
    retryable: true,
  },
  'invalid-step': {
    message: 'A step could not be parsed or applied to the document; nothing was applied',
    retryable: false,
  },
  'too-large': {
    message: 'The batch or the document it would produce is larger than the server allows',
    retryable: false,
  },
  'bad-request': {
    message: 'The message is malformed',
    retryable: false,
  },
  'history-gone': {
    message: 'The server no longer holds the steps since this version: reload the document',
    retryable: false,
  },
  unavailable: {
    message: 'The server cannot store or load the document right now: try again later',
    retryable: true,
  },
  forbidden: {
    message: 'This connection may not do that',
    retryable: false,
  },
  unauthorized: {
    message: 'A valid token is needed: it is missing, malformed, wrongly signed or expired',
    retryable: false,
  },
  'bad-document-id': {
    message:
      'The document id must be one id of 1–128 characters of A-Z a-z 0-9 . _ : -, not . or ..',
    retryable: false,
  },
  'bad-client-id': {
    message: 'auth.clientID must be 1–64 characters of A-Z a-z 0-9 . _ : -',
    retryable: false,
  },
  'not-found': {
    message: 'No document has this id',
    retryable: false,
  },
  'shutting-down': {
    message: 'The server is restarting: reconnect in a moment',
    retryable: true,
  },
  'too-deep': {
    message: 'The message or the document it would produce is nested deeper than the server allows',
    retryable: false,
  },
  'rate-limited': {
    message: 'Too many requests: wait for retryAfterMs and send again',
    retryable: true,
  },
  'slow-consumer': {
    message: 'This connection did not read what the server sent in time: reconnect to catch up',
    retryable: true,
  },
  'too-many-connections': {
    message: 'Too many connections from this address or for this client id',
    retryable: true,
  },
  'too-many-documents': {
    message:
      'The server, or this user or address, holds as many documents as it may: try again later',
    retryable: true,
  },
  'too-many-errors': {
    message: 'This connection sent too many malformed messages and was closed',
    retryable: false,
  },
  corrupt: {
    message: 'The stored document cannot be read; it is quarantined until an operator repairs it',
    retryable: false,
  },
  internal: {
    message: 'The server failed while serving this document and dropped its copy: reconnect',
    retryable: true,
  },
  moved: {
    message: 'Another node serves this document now: reconnect (through the gateway)',
    retryable: true,
  },
} as const satisfies Record<string, { message: string; retryable: boolean }>;

/// One of the codes in `errors`.
export type ErrorCode = keyof typeof errors;

/// The error value carried by acknowledgements and `connect_error.data`.
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  retryable: boolean;
  /// With `rate-limited` (and other retryable refusals where the server knows): how long to
  /// wait before sending again, in milliseconds.
  retryAfterMs?: number;
}

/// Builds the wire form of an error. `detail` replaces the table's generic message when the
/// caller knows more (which step failed and why, say).
export function errorBody(code: ErrorCode, detail?: string, retryAfterMs?: number): ErrorBody {
  const entry = errors[code];
  const body: ErrorBody = { code, message: detail ?? entry.message, retryable: entry.retryable };
  if (retryAfterMs !== undefined) body.retryAfterMs = retryAfterMs;
  return body;
}

/// True for strings that are codes of the table: clients use it to narrow what they receive.
export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(errors, value);
}
