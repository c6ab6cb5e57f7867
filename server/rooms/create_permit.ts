import { CreationRateError } from './load_errors.js';

/// Whether a document the store does not know may be created (the host's creation rate limit).
export interface CreatePermit {
  /// 0 when it may (one creation is counted), otherwise milliseconds until it may (nothing is
  /// counted). Asked only when the store does not know the document.
  take(): number;
  /// Gives back a creation `take` counted for a document that was not created after all: it
  /// existed by the time the lease was held, another process serves it, the load failed.
  giveBack(): void;
}

/// One load's creation permit: whether a creation was counted, and whether a document was made
/// with it (one counted and not used is given back).
export interface Creation {
  counted: boolean;
  made: boolean;
}

/// Takes a creation from `permit`, noting it in `creation`; throws `CreationRateError` when the
/// permit refuses it.
export function take(permit: CreatePermit, creation: Creation): void {
  const wait = permit.take();
  if (wait > 0) throw new CreationRateError(wait);
  creation.counted = true;
}
