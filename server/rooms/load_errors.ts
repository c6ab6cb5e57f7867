/// Thrown when a stored document cannot be turned back into a document: a snapshot written by
/// a newer schema, a journal that does not apply, data that does not parse. The document is
/// quarantined (refused with `corrupt`), never rewritten.
export class CorruptDocumentError extends Error {
  readonly docId: string;
  constructor(docId: string, reason: string, options?: { cause?: unknown }) {
    super(`Document ${docId} cannot be loaded: ${reason}`, options);
    this.name = 'CorruptDocumentError';
    this.docId = docId;
  }
}

/// Rejects `Rooms.get` when a new document may not be created yet (`rate-limited`).
export class CreationRateError extends Error {
  constructor(readonly retryAfterMs: number) {
    super(`Too many new documents from this address: wait ${retryAfterMs} ms`);
    this.name = 'CreationRateError';
  }
}

/// Rejects `Rooms.get` when `maxLoadedDocuments` rooms are held and every one has editors.
export class TooManyDocumentsError extends Error {
  constructor(max: number) {
    super(`The server holds ${max} documents, each with editors: try again later`);
    this.name = 'TooManyDocumentsError';
  }
}
