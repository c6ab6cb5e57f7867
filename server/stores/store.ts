import type { DocJSON, StepJSON } from '../../schema/events.js';

/// A whole document as stored: written every N steps or T seconds, when the last editor
/// leaves, and on shutdown. Loading starts from the newest snapshot and replays the journal.
export interface Snapshot {
  doc: DocJSON;
  version: number;
  /// Changes only when the document's history is cut (a fresh document, a restore): a client
  /// holding another epoch cannot catch up by steps and gets the whole document.
  epoch: string;
  schemaVersion: number;
  /// Milliseconds since the Unix epoch.
  savedAt: number;
  /// For the most recent editors (by client id), the version after the last batch of theirs
  /// in this document, up to `version`: what lets an editor whose acknowledgement was lost
  /// learn, from a whole-document answer, that its batch is in it (`DocAnswer.acceptedThrough`).
  /// Absent in snapshots written before it existed.
  clients?: Record<string, number>;
}

/// One group-committed run of accepted steps: the steps that one flush of a room appended,
/// applying at `baseVersion` and ending at `baseVersion + steps.length`.
export interface JournalEntry {
  baseVersion: number;
  steps: StepJSON[];
  clientIDs: string[];
  /// Who sent each step: the user `authenticate` returned for its connection, null in open
  /// mode. Absent in entries written before history was kept (read as all null).
  users?: (string | null)[];
  /// When the entry was appended (ms since the Unix epoch, the collab's clock): the time the
  /// history shows for its steps. Absent in entries written before history was kept.
  at?: number;
}

/// An append: `steps` may be extended only if the stored document is at `baseVersion` of
/// `epoch` (or does not exist yet and `baseVersion` is 0). That compare-and-set is what keeps
/// two processes from both extending one version of a document.
export interface AppendRequest extends JournalEntry {
  epoch: string;
  /// The writer's lease token (`Lease.token`), with a store that has leases: the append is
  /// refused (`lost`) unless that lease is still the document's, whatever the versions say.
  lease?: string;
}

/// The outcome of an append. `conflict` means another writer got there first (or the document
/// was restored): drop the in-memory copy and reload.
export type AppendOutcome =
  | { ok: true; version: number }
  | { ok: false; reason: 'conflict'; version: number; epoch: string | null }
  /// `stored`: where the document stands in the store, when the store can tell (a store that
  /// went back to an older state may have lost the lease with the steps: see `Room`).
  | { ok: false; reason: 'lost'; stored?: StoredPosition };

/// The outcome of a snapshot write. `conflict`: the stored document is of another epoch or
/// behind the snapshot (it was never journaled). `outdated`: a newer snapshot is already stored;
/// nothing was written, and nothing needs to be.
/// `lost`: the writer's lease is no longer the document's (see `AppendRequest.lease`).
export type SnapshotOutcome =
  { ok: true } | { ok: false; reason: 'conflict' | 'outdated' | 'lost' };

/// Where a document stood in the store when an append found it behind: its epoch (null when
/// the store holds no such document) and version. `Store.reset` replaces it only from there.
export interface StoredPosition {
  epoch: string | null;
  version: number;
}

/// The outcome of `Store.reset`. `conflict`: the stored document is no longer where the caller
/// saw it (another writer moved it on); nothing was written. `lost`: the lease is gone.
export type ResetOutcome = { ok: true } | { ok: false; reason: 'conflict' | 'lost' };

/// What `load` returns: the newest snapshot (null when none was written yet) and the journal
/// entries after it, in order, ending at `version`: each entry starts where the one before it
/// ends (the first may start before the snapshot's version), or the document is refused as
/// corrupt.
export interface StoredDocument {
  epoch: string;
  version: number;
  snapshot: Snapshot | null;
  journal: JournalEntry[];
}

/// Thrown (as a rejected promise) when the store cannot be reached or does not answer in time.
/// The server refuses steps with `unavailable` and never acknowledges what it could not store.
export class StoreUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}

/// A document lease this process holds. `token` (`<holder>#<fence>`) goes into every append
/// and snapshot, which the store refuses once another process took the lease: a process that
/// lost its lease cannot write, even before it notices.
export interface Lease {
  token: string;
  fence: number;
}

/// Where an `acquire` stands: the lease, or who holds it and for how long still.
export type AcquireOutcome =
  { ok: true; lease: Lease } | { ok: false; holder: string; remainingMs: number };

/// What a renewal found: still ours; ours, but another process asked for the document
/// (`requestHandover`); or gone (expired, or taken).
export type RenewOutcome = 'held' | 'wanted' | 'lost';

/// Document leases, for stores shared by several processes (Redis): one process serves a
/// document at a time. `holder` names a process: `<node id>/<instance>`, unique per process.
export interface LeaseStore {
  acquire(docId: string, holder: string, ttlMs: number): Promise<AcquireOutcome>;
  renew(docId: string, holder: string, lease: Lease, ttlMs: number): Promise<RenewOutcome>;
  release(docId: string, lease: Lease): Promise<void>;
  /// Asks the holder to hand the document over (it sees `wanted` at its next renewal).
  requestHandover(docId: string, holder: string, ttlMs: number): Promise<void>;
  /// Says node `node` is alive for `ttlMs` more. A node serving a document while its home node
  /// was down sees `wanted` once that node has been alive a while, and hands it back.
  heartbeat(node: string, ttlMs: number): Promise<void>;
  /// Says node `node` is gone (a graceful shutdown, before its leases are released): a node
  /// taking its documents over stands in for it rather than becoming their home.
  depart(node: string): Promise<void>;
}

/// Persistence for documents: a snapshot plus a write-ahead journal of steps. Implementations
/// (memory, file, Redis) pass the same contract tests. Expected refusals are returned as
/// outcomes; I/O failures reject with `StoreUnavailableError`.
export interface Store {
  /// 'memory', 'file' or 'redis', for the start-up log line.
  readonly kind: string;
  /// Loads a document; null when the store has never seen it.
  load(docId: string): Promise<StoredDocument | null>;
  /// Whether the store holds anything of `docId` (false exactly when `load` would answer
  /// null), without reading the document. Optional, for a store shared by several processes
  /// (`leases`): there a document is looked for before its lease is taken and read once it is
  /// held, and without this the look is a whole `load`. Rejects as `load` does when the store
  /// cannot be reached, and for what `load` would find damaged where it can tell cheaply.
  exists?(docId: string): Promise<boolean>;
  /// Appends one journal entry with a compare-and-set on the version (see `AppendRequest`).
  append(docId: string, request: AppendRequest): Promise<AppendOutcome>;
  /// Stores a snapshot and trims the journal entries it covers. Fenced: refused unless the
  /// journal has reached `snapshot.version` in the same epoch; never replaces a newer snapshot.
  /// With `lease` (a `Lease.token`), refused (`lost`) unless that lease is still the document's.
  snapshot(docId: string, snapshot: Snapshot, lease?: string): Promise<SnapshotOutcome>;
  /// Replaces the document's whole stored history with `snapshot`, a new epoch starting at
  /// `snapshot.version` with an empty journal, if the stored document is still at `expected`.
  /// For a store found to have gone backwards (restored from an older state, or its last
  /// writes lost): the process still serving the document holds every acknowledged step in
  /// memory, and a new epoch makes every editor reload instead of reusing version numbers
  /// that already named other steps. Optional: without it such a room only reloads. `lease`:
  /// a `Lease.token`, refused (`lost`) unless that lease is still the document's; `null`,
  /// refused (`lost`) while anyone holds the document's lease (a process whose lease went with
  /// the lost steps must not overwrite what a new holder has acknowledged since).
  reset?(
    docId: string,
    snapshot: Snapshot,
    expected: StoredPosition,
    lease?: string | null,
  ): Promise<ResetOutcome>;
  /// Releases connections and handles. The store is unusable afterwards.
  close(): Promise<void>;
  /// Present on stores that several processes share (Redis).
  readonly leases?: LeaseStore;
  /// Present on stores that keep version history: `snapshot` then archives what it replaces
  /// and trims (see server/stores/archive.ts). Without it, only the live journal is history.
  readonly archive?: HistoryArchive;
}

// The stored side of a document's version history (issue 30). A store that keeps history
// archives, at every snapshot, the snapshot it replaces and the journal entries the new one
// trims, instead of discarding them: one segment per snapshot. Any archived version is then
// the segment's checkpoint plus at most a snapshot interval of steps. Reading the history and
// thinning it out with time are server/history/'s; the stores only keep what it gives them.

/// One archived stretch of history: the document at `baseVersion` and the steps after it.
export interface HistorySegment {
  baseVersion: number;
  /// The snapshot at `baseVersion`; null for the schema's empty document, at version 0 only.
  checkpoint: Snapshot | null;
  /// Whole journal entries, in order: the first may start before `baseVersion` and the last
  /// run past the next segment's base (readers take the steps they need by version). Empty for
  /// a checkpoint left by coarsening, whose steps are gone.
  entries: JournalEntry[];
}

/// A stretch of old history coarsened to its end (`toVersion`, which has a checkpoint): the
/// versions inside it are gone, but when it was written and by whom are kept.
export interface CoarseWindow {
  fromVersion: number;
  toVersion: number;
  startedAt: number;
  endedAt: number;
  users: string[];
}

/// A version someone named. Named versions are never pruned.
export interface StoredName {
  version: number;
  name: string;
  user: string | null;
  at: number;
}

/// What retention writes in one step: segments to drop, segments to add (checkpoints of
/// coarse windows), and the complete list of coarse windows afterwards.
export interface ArchiveRewrite {
  remove: number[];
  add: HistorySegment[];
  windows: CoarseWindow[];
}

/// A document's archive, on a store that keeps history (`Store.archive`). Reads resolve with
/// what is stored (empty for an unknown document); every method rejects with
/// `StoreUnavailableError` when the store cannot be reached, and with a `TypeError` for data
/// it cannot parse.
export interface HistoryArchive {
  /// The bases of the archived segments, ascending.
  bases(docId: string): Promise<number[]>;
  /// The segment at `baseVersion`, or null when there is none (coarsened away since). With
  /// `withCheckpoint` false the checkpoint may be left null: for readers of steps only.
  segment(
    docId: string,
    baseVersion: number,
    withCheckpoint?: boolean,
  ): Promise<HistorySegment | null>;
  /// The coarse windows, oldest first.
  windows(docId: string): Promise<CoarseWindow[]>;
  /// The named versions, in the order they were named.
  names(docId: string): Promise<StoredName[]>;
  /// Adds a named version (another with the same version replaces it).
  addName(docId: string, name: StoredName): Promise<void>;
  /// The archive's size in bytes (as stored, roughly) and generation: a number that changes at
  /// every `rewrite`, for its compare-and-set.
  stats(docId: string): Promise<{ bytes: number; generation: number }>;
  /// Applies `change` if the archive is still at `generation`; resolves false (nothing
  /// written) when another rewrite got there first. Snapshots archiving meanwhile only add
  /// segments past those a rewrite touches, so they do not conflict.
  rewrite(docId: string, generation: number, change: ArchiveRewrite): Promise<boolean>;
}
