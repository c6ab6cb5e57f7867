// The library's entry point (`import … from 'scriptorium'`): the authority to embed, its
// stores, and the types of its options and hooks. The browser client is `scriptorium/client`,
// the built-in schema `scriptorium/schema`, the wire types and error codes
// `scriptorium/protocol`.
export {
  createCollab,
  type AcceptedEvent,
  type AttachOptions,
  type Collab,
  type CollabLimits,
  type CollabOptions,
  type DocumentEvent,
} from './collab.js';
export type { CollabHealth, CollabStats } from './collab_health.js';
export type {
  AttributedChange,
  ChangesResult,
  HistoryEntry,
  HistoryPage,
  HistoryStep,
  NamedVersion,
  RevertResult,
  Span,
} from './history/types.js';
export { ConfigError } from './config.js';
export { defaultLimits } from './settings.js';
export { CodedError } from './rooms/coded_error.js';
export type { Authenticate, AuthenticateContext, Identity } from './protocol/socket.js';
export { MemoryStore } from './stores/memory_store.js';
export { FileStore } from './stores/file/file_store.js';
export { RedisStore } from './stores/redis_store.js';
export type {
  ArchiveRewrite,
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  JournalEntry,
  Snapshot,
  Store,
  StoredDocument,
  StoredName,
} from './stores/store.js';
export { MetricsRecorder, createMetricsRegistry, type MetricsWindow } from '../metrics/index.js';
