import type { Logger } from 'pino';
import { StoreUnavailableError } from '../stores/store.js';
import { CorruptDocumentError } from './load_errors.js';

/// How long a document that failed to load as corrupt is refused without reading the store
/// again. Clients are told `corrupt` (not retryable), so this only bounds how often a
/// misbehaving client can make the server re-read damaged data, and lets a repair by an
/// operator take effect without a restart.
export const quarantineMs = 60_000;

/// A quarantined document: why, and until when it is refused without a look at the store.
export interface Quarantine {
  reason: string;
  since: number;
  until: number;
}

/// The documents whose stored data could not be loaded, refused as `corrupt` for
/// `quarantineMs` each; other documents are unaffected. Never rewrites what is stored.
export class Quarantines {
  private readonly entries = new Map<string, Quarantine>();
  private loadsRefused = 0;

  constructor(private readonly log: Logger) {}

  /// Documents quarantined now.
  get count(): number {
    return this.entries.size;
  }

  /// Loads that found damaged stored data since start, for the operator's metrics.
  get corruptLoads(): number {
    return this.loadsRefused;
  }

  /// The error to refuse `docId` with while it is quarantined; null when it is not (an
  /// expired quarantine is forgotten, and the store is read again).
  refusal(docId: string): CorruptDocumentError | null {
    const quarantine = this.entries.get(docId);
    if (!quarantine) return null;
    if (Date.now() < quarantine.until) return new CorruptDocumentError(docId, quarantine.reason);
    this.entries.delete(docId);
    return null;
  }

  /// Records `docId` as quarantined because of `err`; returns the error to reject with.
  add(docId: string, err: unknown): CorruptDocumentError {
    const error =
      err instanceof CorruptDocumentError
        ? err
        : new CorruptDocumentError(docId, (err as Error)?.message ?? String(err), { cause: err });
    const now = Date.now();
    this.entries.set(docId, { reason: error.message, since: now, until: now + quarantineMs });
    this.loadsRefused++;
    this.log.error(
      { doc: docId, err: error },
      'document quarantined: its stored data cannot be loaded; other documents are unaffected',
    );
    return error;
  }

  /// Runs `read`, a read of `docId` from the store. Rejects with `StoreUnavailableError` when
  /// the store cannot be reached (retryable); anything else the store threw while reading is
  /// data it cannot parse (a torn or foreign entry), or a store that cannot be trusted about
  /// this document: the document is quarantined, and it rejects with `CorruptDocumentError`.
  async read<T>(docId: string, read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw err;
      throw this.add(docId, err);
    }
  }
}
