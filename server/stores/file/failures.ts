import { StoreUnavailableError } from '../store.js';

/// The errno code (`ENOENT`, `EIO`…) a file system error carries, or undefined for any other
/// error.
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/// The message of `error`, for a log line.
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/// What every operation on a closed store rejects with.
export function closedError(): StoreUnavailableError {
  return new StoreUnavailableError('file store is closed');
}

/// File system errors (they carry an errno `code`) become `StoreUnavailableError`: retrying
/// later may work. Files that do not parse (`SyntaxError`, `TypeError` from the narrowing) are
/// returned as they are: the document is damaged, retrying will not help, and the server
/// quarantines it as `corrupt`.
export function toUnavailable(error: unknown): unknown {
  if (error instanceof StoreUnavailableError) return error;
  if (errorCode(error) !== undefined)
    return new StoreUnavailableError(`file store: ${errorMessage(error)}`, { cause: error });
  return error;
}
