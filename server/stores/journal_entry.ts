import type { DocJSON, StepJSON } from '../../schema/events.js';
import type { JournalEntry, Snapshot } from './store.js';

// Shared by the durable stores: how a journal entry and a snapshot are read back from raw
// JSON, and how a loaded journal is cut to start exactly where the snapshot ends.

/// Narrows one journal entry read back from storage (already `JSON.parse`d). Returns the entry;
/// throws a `TypeError` when the value is not shaped like one, which means the stored data is
/// corrupt (or was written by something else), not that the store is unreachable.
export function parseJournalEntry(raw: unknown): JournalEntry {
  if (typeof raw !== 'object' || raw === null) throw new TypeError('journal entry: not an object');
  const { baseVersion, steps, clientIDs, users, at } = raw as Record<string, unknown>;
  if (!Number.isSafeInteger(baseVersion) || (baseVersion as number) < 0)
    throw new TypeError('journal entry: bad baseVersion');
  if (!Array.isArray(steps) || !Array.isArray(clientIDs) || steps.length !== clientIDs.length)
    throw new TypeError('journal entry: steps and clientIDs must be arrays of one length');
  for (let i = 0; i < steps.length; i++) {
    const step: unknown = steps[i];
    if (
      typeof step !== 'object' ||
      step === null ||
      typeof (step as StepJSON).stepType !== 'string'
    )
      throw new TypeError('journal entry: bad step');
    if (typeof clientIDs[i] !== 'string') throw new TypeError('journal entry: bad clientID');
  }
  const entry: JournalEntry = {
    baseVersion: baseVersion as number,
    steps: steps as StepJSON[],
    clientIDs: clientIDs as string[],
  };
  // Entries written before history was kept have neither field: they read as unattributed.
  if (users !== undefined) {
    if (!Array.isArray(users) || users.length !== steps.length)
      throw new TypeError('journal entry: users must be an array as long as steps');
    for (const user of users)
      if (user !== null && typeof user !== 'string') throw new TypeError('journal entry: bad user');
    entry.users = users as (string | null)[];
  }
  if (at !== undefined) {
    if (typeof at !== 'number' || !Number.isFinite(at))
      throw new TypeError('journal entry: bad at');
    entry.at = at;
  }
  return entry;
}

/// The journal entry an append stores: its steps with their clients, users and time (the
/// latter two only when the request has them), and nothing of the compare-and-set.
export function entryOf(request: JournalEntry): JournalEntry {
  const entry: JournalEntry = {
    baseVersion: request.baseVersion,
    steps: request.steps,
    clientIDs: request.clientIDs,
  };
  if (request.users) entry.users = request.users;
  if (request.at !== undefined) entry.at = request.at;
  return entry;
}

/// The steps of `entry` from index `start` on, as an entry of their own.
export function sliceEntry(entry: JournalEntry, start: number): JournalEntry {
  const out: JournalEntry = {
    baseVersion: entry.baseVersion + start,
    steps: entry.steps.slice(start),
    clientIDs: entry.clientIDs.slice(start),
  };
  if (entry.users) out.users = entry.users.slice(start);
  if (entry.at !== undefined) out.at = entry.at;
  return out;
}

/// Narrows a snapshot read back from storage (already `JSON.parse`d). Returns it; throws a
/// `TypeError` when the value is not shaped like a snapshot.
export function parseSnapshot(raw: unknown): Snapshot {
  if (typeof raw !== 'object' || raw === null) throw new TypeError('snapshot: not an object');
  const { doc, version, epoch, schemaVersion, savedAt, clients } = raw as Record<string, unknown>;
  if (typeof doc !== 'object' || doc === null || typeof (doc as DocJSON).type !== 'string')
    throw new TypeError('snapshot: bad doc');
  if (!Number.isSafeInteger(version) || (version as number) < 0)
    throw new TypeError('snapshot: bad version');
  if (typeof epoch !== 'string') throw new TypeError('snapshot: bad epoch');
  if (!Number.isSafeInteger(schemaVersion)) throw new TypeError('snapshot: bad schemaVersion');
  if (typeof savedAt !== 'number') throw new TypeError('snapshot: bad savedAt');
  const snapshot: Snapshot = {
    doc: doc as DocJSON,
    version: version as number,
    epoch,
    schemaVersion: schemaVersion as number,
    savedAt,
  };
  if (clients !== undefined) {
    if (typeof clients !== 'object' || clients === null || Array.isArray(clients))
      throw new TypeError('snapshot: bad clients');
    for (const end of Object.values(clients)) {
      if (!Number.isSafeInteger(end) || (end as number) < 0 || (end as number) > snapshot.version)
        throw new TypeError('snapshot: bad clients');
    }
    snapshot.clients = clients as Record<string, number>;
  }
  return snapshot;
}

/// Parses the whole lines of `text` (those before `complete`, the end of its last whole line)
/// with `parse`: the journals and the write-ahead log are one JSON value per line. A line that
/// does not parse throws a `TypeError` naming `what` and `path`.
export function parseLines<T>(
  text: string,
  complete: number,
  parse: (raw: unknown) => T,
  what: string,
  path: string,
): T[] {
  const values: T[] = [];
  let start = 0;
  while (start < complete) {
    const end = text.indexOf('\n', start);
    try {
      values.push(parse(JSON.parse(text.slice(start, end))));
    } catch (error) {
      throw new TypeError(`corrupt ${what} line in ${path}`, { cause: error });
    }
    start = end + 1;
  }
  return values;
}

/// The version a journal entry ends at.
export function entryEnd(entry: JournalEntry): number {
  return entry.baseVersion + entry.steps.length;
}

/// Returns the entries of `journal` (in order) that are not covered by a snapshot at
/// `snapshotVersion`, the first one cut so that it starts exactly at `snapshotVersion`. A
/// snapshot can end inside an entry (the stores only trim whole entries), and a caller of
/// `load` should never have to skip steps it already has. Does not modify `journal`.
export function entriesAfter(journal: JournalEntry[], snapshotVersion: number): JournalEntry[] {
  const out: JournalEntry[] = [];
  for (let i = 0; i < journal.length; i++) {
    const entry = journal[i]!;
    if (entryEnd(entry) <= snapshotVersion) continue;
    if (entry.baseVersion >= snapshotVersion) {
      out.push(entry);
      continue;
    }
    out.push(sliceEntry(entry, snapshotVersion - entry.baseVersion));
  }
  return out;
}
