import type { Node, Schema } from 'prosemirror-model';
import type { Step } from 'prosemirror-transform';
import type { StepJSON, StepsAnswer } from '../../schema/events.js';
import { CodedError } from '../rooms/coded_error.js';
import type { Rooms } from '../rooms/registry.js';
import type { Room } from '../rooms/room.js';
import type { Store } from '../stores/store.js';
import { attributedChanges } from './changes.js';
import { restoreSteps } from './restore.js';
import { revertUser } from './revert.js';
import { historyPage, type PageRequest } from './sessions.js';
import { checkVersion, gone, readStretch } from './timeline.js';
import type { ChangesResult, HistoryPage, NamedVersion, RevertResult } from './types.js';

// The history methods of `createCollab`'s result. Reads go to the store (any node can serve
// them); writes (restore, revert) go through the document's room on this node, as an
// editor's batch does: journaled, broadcast, acknowledged, `onAccepted`.

/// The client id the history's own edits (restore, revert) are journaled under.
export const historyClientID = 'scriptorium:history';

/// The longest name a version may be given, in characters.
export const maxVersionNameLength = 200;

/// What the history methods need of a collab.
export interface HistoryDeps {
  store: Store;
  schema: Schema;
  rooms: Rooms;
  /// The collab's wall clock (ms since the Unix epoch).
  clock: () => number;
  /// Checks a document id (throws `bad-document-id`).
  checkDocId: (docId: string) => void;
  /// Turns a room load's failure into the `CodedError` it is answered with.
  loadError: (err: unknown) => CodedError;
  /// True once the collab is closing: writes are refused `shutting-down`.
  draining: () => boolean;
  /// The most steps one batch may carry (`MAX_STEPS_PER_BATCH`): longer edits go as several.
  maxStepsPerBatch: number;
  /// The most steps `changes` may span (`HISTORY_MAX_DIFF_STEPS`) and a revert may cover from
  /// its start to the head (`HISTORY_MAX_REVERT_STEPS`): both are computed on the event loop,
  /// a revert in time growing with the square of its steps.
  maxDiffSteps: number;
  maxRevertSteps: number;
  /// Brings the document's history within retention if it was not lately (see
  /// `RetentionRunner.fresh`): called before every history method reads.
  retain: (docId: string) => Promise<void>;
}

/// The history half of `Collab`.
export interface HistoryMethods {
  /// One page of the document's history: `entries`, sessions of editing newest first (steps
  /// split by pauses longer than `gapMs`, 5 minutes by default; coarsened windows of old
  /// history appear as one entry each), paging back from version `before` (the head by
  /// default), at most `limit` (50 by default); and `named`, the named versions up to `before`,
  /// newest first. Read from the store: any node answers. Rejects with a `CodedError`:
  /// `bad-document-id`, `not-found`, `bad-request` for an option out of range, `unavailable`
  /// when the store fails.
  history(docId: string, options?: PageRequest): Promise<HistoryPage>;
  /// The document as it was at `version`, rebuilt from the store's history. Rejects with a
  /// `CodedError`: `bad-request` for a version outside 0…head, `history-gone` for one no
  /// longer kept (coarsened or past retention), and as `history` does.
  documentAt(docId: string, version: number): Promise<{ version: number; doc: Node }>;
  /// What changed from `fromVersion` to `toVersion`: prosemirror-changeset's changes, every
  /// inserted and deleted span attributed to who wrote it and when. Rejects as `documentAt`,
  /// and with `too-large` past `HISTORY_MAX_DIFF_STEPS` steps.
  changes(docId: string, fromVersion: number, toVersion: number): Promise<ChangesResult>;
  /// Names `version` (replacing a name it had); named versions are never pruned. Resolves
  /// with the named version; rejects as `documentAt` does, and with `bad-request` for a name
  /// that is empty, longer than 200 characters or holds control characters.
  nameVersion(
    docId: string,
    version: number,
    name: string,
    options: { user: string | null },
  ): Promise<NamedVersion>;
  /// Makes the document what it was at `version` again, without losing anything: the steps
  /// from the current document to that one are appended through the same path as an editor's
  /// (journal, broadcast to every connected editor, `onAccepted`), as `user`. Resolves with the
  /// new head version; rejects as `documentAt` and `change` do.
  restore(docId: string, version: number, options: { user: string | null }): Promise<number>;
  /// Undoes what `user` wrote between `fromVersion` (0 by default) and `toVersion` (the head),
  /// keeping everyone else's edits: each of their steps inverted and mapped over every later
  /// step; what no longer applies is skipped and counted. Appended as `restore`'s steps are,
  /// as `by`. Rejects as `restore` does, and with `too-large` when `fromVersion` is more than
  /// `HISTORY_MAX_REVERT_STEPS` steps before the head.
  revert(
    docId: string,
    select: { user: string; fromVersion?: number; toVersion?: number },
    options: { by: string | null },
  ): Promise<RevertResult>;
}

/// Builds the history methods over `deps`.
export function historyMethods(deps: HistoryDeps): HistoryMethods {
  const { store, schema } = deps;
  return {
    async history(docId, request = {}) {
      deps.checkDocId(docId);
      await deps.retain(docId);
      return historyPage(store, docId, request);
    },
    async documentAt(docId, version) {
      deps.checkDocId(docId);
      await deps.retain(docId);
      const stretch = await readStretch(store, schema, docId, version, version);
      return { version, doc: stretch.doc };
    },
    changes(docId, fromVersion, toVersion) {
      return changesBetween(deps, docId, fromVersion, toVersion);
    },
    async nameVersion(docId, version, name, options) {
      deps.checkDocId(docId);
      await deps.retain(docId);
      checkName(name);
      if (!store.archive) throw noArchive();
      // Only a version that can be shown may be named: one already gone is refused.
      await readStretch(store, schema, docId, version, version);
      const named: NamedVersion = { version, name, user: options.user ?? null, at: deps.clock() };
      await store.archive.addName(docId, named);
      return named;
    },
    async restore(docId, version, options) {
      deps.checkDocId(docId);
      await deps.retain(docId);
      const target = await readStretch(store, schema, docId, version, version);
      const room = await writableRoom(deps, docId);
      // Against the newest document, in one synchronous step with the hand-over to the room:
      // nothing can be applied in between, so the steps never need rebasing.
      const current = room.current();
      const steps = restoreSteps(current.doc, target.doc);
      if (steps.length === 0) return room.publishedVersion;
      return submit(room, current.version, steps, options.user ?? null, deps.maxStepsPerBatch);
    },
    async revert(docId, select, options) {
      deps.checkDocId(docId);
      await deps.retain(docId);
      if (typeof select?.user !== 'string' || select.user === '')
        throw new CodedError('bad-request', 'revert needs the user whose changes to revert');
      const stored = await store.load(docId);
      if (!stored) throw new CodedError('not-found');
      const from = select.fromVersion ?? 0;
      const to = select.toVersion ?? stored.version;
      checkVersion(from, stored.version);
      checkVersion(to, stored.version);
      if (to < from) throw new CodedError('bad-request', `version ${to} is before ${from}`);
      if (stored.version - from > deps.maxRevertSteps) throw tooLong('revert', deps.maxRevertSteps);
      const stretch = await readStretch(store, schema, docId, from, null);
      const room = await writableRoom(deps, docId);
      const current = room.current();
      const outcome = revertUser(
        stretch.doc,
        stretch.steps,
        { user: select.user, from: 0, to: to - from },
        current.version === stretch.head ? current.doc : undefined,
      );
      if (outcome.steps.length === 0)
        return { version: room.publishedVersion, reverted: 0, skipped: outcome.skipped };
      // Made at the stored head: an editor's batch made there, which the authority rebases
      // over whatever the room accepted since, as it would an editor's. Split into batches
      // only when nothing was accepted since: each batch then claims exactly the version the
      // one before leaves, and none is rebased over its own predecessors.
      const max = deps.maxStepsPerBatch;
      if (outcome.steps.length > max && room.current().version !== stretch.head)
        throw new CodedError('unavailable', 'the document changed during the revert: try again');
      const version = await submit(room, stretch.head, outcome.steps, options.by ?? null, max);
      return { version, reverted: outcome.reverted, skipped: outcome.skipped };
    },
  };
}

/// `Collab.changes`: bounded by `maxDiffSteps`.
async function changesBetween(
  deps: HistoryDeps,
  docId: string,
  fromVersion: number,
  toVersion: number,
): Promise<ChangesResult> {
  const { store, schema } = deps;
  deps.checkDocId(docId);
  await deps.retain(docId);
  if (Number.isSafeInteger(fromVersion) && toVersion - fromVersion > deps.maxDiffSteps)
    throw tooLong('changes', deps.maxDiffSteps);
  const stretch = await readStretch(store, schema, docId, fromVersion, toVersion);
  // Past a snapshot interval or so, the document at `toVersion` read from its checkpoint
  // costs less than replaying every step, and the change set then only maps them.
  const head =
    stretch.steps.length > replayBelowSteps
      ? (await readStretch(store, schema, docId, toVersion, toVersion)).doc
      : undefined;
  return {
    fromVersion,
    toVersion,
    changes: attributedChanges(stretch.doc, stretch.steps, head),
  };
}

/// Steps `changes` replays rather than reading the newer document from its checkpoint.
const replayBelowSteps = 1_000;

/// `too-large` for a `what` request spanning more than `max` steps.
function tooLong(what: 'changes' | 'revert', max: number): CodedError {
  return new CodedError(
    'too-large',
    what === 'changes'
      ? `changes may span at most ${max} steps (HISTORY_MAX_DIFF_STEPS): ask for a shorter range`
      : `a revert may start at most ${max} steps before the head (HISTORY_MAX_REVERT_STEPS): revert a more recent range`,
  );
}

/// The room of `docId` on this node, for a write. Rejects with a `CodedError`.
async function writableRoom(deps: HistoryDeps, docId: string): Promise<Room> {
  if (deps.draining()) throw new CodedError('shutting-down');
  let room: Room | null;
  try {
    room = await deps.rooms.get(docId, true);
  } catch (err) {
    throw deps.loadError(err);
  }
  if (!room || room.state !== 'open') throw new CodedError('unavailable');
  return room;
}

/// Hands `steps`, made at `version`, to `room` as batches of the history's client of at most
/// `max` steps, all in this synchronous step, so that nothing comes between them; resolves with
/// the version after the last once durable, rejects with the first refusal's `CodedError`
/// (batches before it may be in: they are each valid edits).
function submit(
  room: Room,
  version: number,
  steps: Step[],
  user: string | null,
  max: number,
): Promise<number> {
  const acks: Promise<number>[] = [];
  for (let start = 0; start < steps.length; start += max) {
    const json = steps.slice(start, start + max).map((step) => step.toJSON() as StepJSON);
    acks.push(
      new Promise<number>((resolve, reject) => {
        const ack = (answer: StepsAnswer) => {
          if (answer.ok) resolve(answer.version);
          else reject(new CodedError(answer.code, answer.message));
        };
        room.receive(version + start, json, historyClientID, ack, performance.now(), user);
      }),
    );
  }
  return Promise.all(acks).then((versions) => versions[versions.length - 1]!);
}

/// Throws `bad-request` for a name that is not 1–200 characters of text with something in it.
function checkName(name: unknown): void {
  if (
    typeof name !== 'string' ||
    name.trim() === '' ||
    name.length > maxVersionNameLength ||
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u001f\u007f]/.test(name)
  ) {
    throw new CodedError(
      'bad-request',
      `a version's name must be 1–${maxVersionNameLength} characters, not all spaces, no control characters`,
    );
  }
}

/// For a store without an archive: nothing but the live journal is kept.
function noArchive(): CodedError {
  return gone(0);
}
