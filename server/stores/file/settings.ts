import { defaultZeroAheadBytes } from './write_ahead_log.js';

/// The logger method the file store uses; a pino logger fits.
export interface FileStoreLogger {
  warn(obj: object, msg: string): void;
}

/// Where and how the file store keeps documents.
export interface FileStoreOptions {
  /// The directory holding every document (created when missing). One store per directory,
  /// enforced by a lock file: the compare-and-set lives in this process's memory.
  dataDir: string;
  /// How many documents' versions to keep in memory when idle. A document dropped from the
  /// cache is read again from disk on its next use. Default 10,000.
  maxCachedDocs?: number;
  /// A load, append or snapshot not finished this many milliseconds after the call rejects
  /// with `StoreUnavailableError`; so does `close` when operations are still running after
  /// it. Default 2000.
  timeoutMs?: number;
  /// The shared write-ahead log is checkpointed into the documents' own journals once it
  /// holds this many bytes, or `checkpointMs` after its first record, whichever comes
  /// first. What a crash leaves in it is replayed when the directory is opened next, so these
  /// also bound that replay and the memory holding records not yet checkpointed.
  /// Defaults 8 MiB and 30,000 ms.
  checkpointBytes?: number;
  checkpointMs?: number;
  /// After a checkpoint in which a document failed, the next one starts this many
  /// milliseconds later, twice that after the next failure, and so on up to `checkpointMs`
  /// (back to this after one in which none failed): a document whose journal was briefly
  /// unwritable has its appends taken again soon, one that stays broken is not retried in a
  /// loop (each try writes its waiting entries to the log again). Default 1000.
  checkpointRetryMs?: number;
  /// The log's files are filled with zeros this many bytes at a time ahead of its rounds, so
  /// that a round's sync writes its data only, not the file's new size (see `WriteAheadLog`).
  /// 0 to have every round extend the file. Default 2 MiB.
  logZeroAheadBytes?: number;
  /// Told about stale locks taken over, crash leftovers removed and log records replayed.
  logger?: FileStoreLogger;
}

/// `FileStoreOptions` with every default filled in, as the store's parts receive them.
export interface FileStoreSettings {
  readonly dataDir: string;
  readonly maxCachedDocs: number;
  readonly timeoutMs: number;
  readonly checkpointBytes: number;
  readonly checkpointMs: number;
  /// Never more than `checkpointMs`.
  readonly checkpointRetryMs: number;
  readonly logZeroAheadBytes: number;
  readonly logger: FileStoreLogger | null;
}

/// The settings `options` asks for, defaults filled in; frozen.
export function fileStoreSettings(options: FileStoreOptions): FileStoreSettings {
  const checkpointMs = options.checkpointMs ?? 30_000;
  return Object.freeze({
    dataDir: options.dataDir,
    maxCachedDocs: options.maxCachedDocs ?? 10_000,
    timeoutMs: options.timeoutMs ?? 2000,
    checkpointBytes: options.checkpointBytes ?? 8 * 1024 * 1024,
    checkpointMs,
    checkpointRetryMs: Math.min(options.checkpointRetryMs ?? 1000, checkpointMs),
    logZeroAheadBytes: options.logZeroAheadBytes ?? defaultZeroAheadBytes,
    logger: options.logger ?? null,
  });
}
