import type { Node, Schema } from 'prosemirror-model';
import type { Logger } from 'pino';
import type { StepJSON } from '../schema/events.js';
import { schema as builtInSchema, schemaVersion as builtInSchemaVersion } from '../schema/index.js';
import type { MetricsRecorder } from '../metrics/index.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { processSettings, type LimitSettings } from './settings.js';
import type { Authenticate } from './protocol/socket.js';
import type { Store } from './stores/store.js';

/// The settings `createCollab` takes as `limits`: every setting of the standalone server that
/// is not about its own process (port, host, store, access control, logging). Same names,
/// defaults and ranges as docs/configuration.md, which lists them from the same table.
export type CollabLimits = LimitSettings;

/// A document as the hooks and `document()` see it: the published (durable) state.
export interface DocumentEvent {
  docId: string;
  version: number;
  doc: Node;
}

/// A batch made durable: what `onAccepted` receives. `user` is who sent it as `authenticate`
/// named them (null in open mode, or for `change` without one); `steps` are JSON, as applied.
export interface AcceptedEvent {
  docId: string;
  version: number;
  steps: readonly StepJSON[];
  clientID: string;
  user: string | null;
}

/// A hook's answer: nothing, or a promise of nothing. Hooks are awaited only where the
/// server must wait for them (`onLoad`); a rejection anywhere is logged and, where there is
/// a request, answered with a code.
export type HookResult = void | Promise<void>;

export interface CollabOptions {
  /// Any ProseMirror schema; the built-in one when omitted. Clients must use the same one.
  schema?: Schema;
  /// Written into snapshots; raise it when a schema change makes old documents invalid, and
  /// snapshots written by a newer version are refused (`corrupt`) instead of misread.
  /// Defaults to the built-in schema's version.
  schemaVersion?: number;
  /// Where documents persist. A `MemoryStore` (nothing survives the process) when omitted.
  store?: Store;
  /// Called for every connection before it may do anything. Omitted: anyone may read and
  /// write (open mode), and `attach` logs a warning saying so; `null`: open mode on purpose,
  /// without the warning.
  authenticate?: Authenticate | null;
  /// Awaited when a document is loaded into memory (or created), before anyone is served from
  /// it. Throwing refuses the load: with the error's `code` when it is one of the protocol's
  /// codes (`forbidden`, say), `internal` otherwise.
  onLoad?: (event: DocumentEvent) => HookResult;
  /// Called after every accepted batch is durable, broadcast and acknowledged.
  onAccepted?: (event: AcceptedEvent) => HookResult;
  /// Called once for every load (that `onLoad` did not refuse), when the document has left
  /// memory, whichever way: unloaded when idle or for another document (after its snapshot),
  /// handed to another node or its lease lost, closed after a failure or after finding that
  /// another writer (or a store gone back to an older state) changed it, or at `close`.
  /// `version` and `doc` are what this process last published (all of it durable); after a
  /// move or a conflict the document may have gone on elsewhere.
  onUnload?: (event: DocumentEvent) => HookResult;
  limits?: Partial<CollabLimits>;
  /// A pino logger (or a child of the host's); warnings and errors only by default.
  logger?: Logger;
  /// Latency windows and counters (see metrics/): a recorder to share, false for none.
  metrics?: MetricsRecorder | false;
  /// This process's node name, in its document leases (a store shared by several processes,
  /// Redis, gives each document to one of them at a time). The host name by default.
  nodeId?: string;
  /// The wall clock (ms since the Unix epoch) the history stamps steps and names with, and
  /// its retention measures age by; `Date.now` when omitted. For tests that move time.
  clock?: () => number;
}

/// Where `attach` wires the protocol.
export interface AttachOptions {
  /// The Socket.io namespace clients connect to; `/` by default.
  namespace?: string;
}

/// Every option `createCollab` takes. A Record over the interface's keys, so the compiler
/// keeps it complete and exact when an option is added.
const optionNames: Record<keyof CollabOptions, true> = {
  schema: true,
  schemaVersion: true,
  store: true,
  authenticate: true,
  onLoad: true,
  onAccepted: true,
  onUnload: true,
  limits: true,
  logger: true,
  metrics: true,
  nodeId: true,
  clock: true,
};

/// What `createCollab`'s options come to once checked: the configuration (limits over the
/// defaults, and the node name), the schema and the version written into snapshots.
export interface CheckedOptions {
  config: Readonly<Config>;
  schema: Schema;
  schemaVersion: number;
}

/// Checks `createCollab`'s options once. Throws `ConfigError` for an option it does not know (a
/// misspelt `authenticate` would otherwise run the server open, silently), for a setting of the
/// standalone server passed as a limit, for a limit out of range, for a bad `schemaVersion`, and
/// for a schema that cannot make an empty document.
export function checkOptions(options: CollabOptions): CheckedOptions {
  for (const name of Object.keys(options)) {
    if (!Object.hasOwn(optionNames, name)) {
      throw new ConfigError(
        `Unknown option "${name}" (createCollab takes ${Object.keys(optionNames).join(', ')})`,
      );
    }
  }
  for (const field of Object.keys(options.limits ?? {})) {
    if (processSettings.has(field)) {
      throw new ConfigError(`"${field}" is a setting of the standalone server, not a limit`);
    }
  }
  const config = loadConfig({
    ...(options.limits as Partial<Config>),
    ...(options.nodeId === undefined ? {} : { nodeId: options.nodeId }),
  });
  const schema = options.schema ?? builtInSchema;
  const schemaVersion = options.schemaVersion ?? builtInSchemaVersion;
  if (!Number.isSafeInteger(schemaVersion) || schemaVersion < 0) {
    throw new ConfigError(`schemaVersion must be a whole number ≥ 0, got ${schemaVersion}`);
  }
  if (options.clock !== undefined && typeof options.clock !== 'function') {
    throw new ConfigError('clock must be a function returning milliseconds since the epoch');
  }
  if (!schema.topNodeType.createAndFill()) {
    throw new ConfigError('the schema cannot make an empty document (its top node needs content)');
  }
  return { config, schema, schemaVersion };
}
