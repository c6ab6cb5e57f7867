import type { CoarseWindow, JournalEntry, Store, StoredName } from '../stores/store.js';
import { CodedError } from '../rooms/coded_error.js';
import { checkVersion } from './timeline.js';
import type { HistoryEntry, HistoryPage, NamedVersion } from './types.js';

// The timeline `collab.history` answers: steps grouped into sessions of editing, newest first,
// read backwards from the store (the live journal, then archived segments, newest first) only
// as far as the page needs.

/// How a page of history is asked for.
export interface PageRequest {
  /// Page back from this version (the head when absent): sessions ending at or before it.
  before?: number;
  /// Sessions per page; 50 when absent, at most 1,000.
  limit?: number;
  /// A pause longer than this (ms) between two steps starts a new session; 5 minutes when absent.
  gapMs?: number;
}

export const defaultPageLimit = 50;
export const maxPageLimit = 1_000;
export const defaultGapMs = 5 * 60_000;

/// A session being built backwards: `fromVersion` and `startedAt` move back as older steps join.
interface Building {
  fromVersion: number;
  toVersion: number;
  startedAt: number;
  endedAt: number;
  /// Users, each once, by their earliest step in the session, latest first.
  usersBack: string[];
}

/// Reads one page of `docId`'s history. Rejects with a `CodedError`: `not-found` for a document
/// the store does not know, `bad-request` for a `before`, `limit` or `gapMs` out of range.
export async function historyPage(
  store: Store,
  docId: string,
  request: PageRequest,
): Promise<HistoryPage> {
  const limit = request.limit ?? defaultPageLimit;
  const gapMs = request.gapMs ?? defaultGapMs;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > maxPageLimit)
    throw new CodedError('bad-request', `limit must be a whole number from 1 to ${maxPageLimit}`);
  if (!Number.isSafeInteger(gapMs) || gapMs < 0)
    throw new CodedError('bad-request', 'gapMs must be a whole number of milliseconds');
  const stored = await store.load(docId);
  if (!stored) throw new CodedError('not-found');
  const before = request.before ?? stored.version;
  checkVersion(before, stored.version);
  const sessions = new Sessions(limit, gapMs);
  // Versions below `low` are still to be read; each source only adds the steps under it.
  let low = sessions.add(stored.journal, before);
  const archive = store.archive;
  const [bases, windows, names] = archive
    ? await Promise.all([archive.bases(docId), archive.windows(docId), archive.names(docId)])
    : [[], [] as CoarseWindow[], [] as StoredName[]];
  // Segments below the last coarse window's end are its checkpoints: no steps to read there.
  const coarseEnd = windows.length > 0 ? windows[windows.length - 1]!.toVersion : 0;
  for (let i = bases.length - 1; i >= 0 && !sessions.full && low > 0; i--) {
    if (bases[i]! < coarseEnd) break;
    if (bases[i]! >= low) continue;
    const segment = await archive!.segment(docId, bases[i]!, false);
    if (segment) low = Math.min(low, sessions.add(segment.entries, Math.min(low, before)));
  }
  const entries = sessions.done();
  for (let i = windows.length - 1; i >= 0 && entries.length < limit; i--) {
    const window = windows[i]!;
    if (window.toVersion > before || window.toVersion > low) continue;
    const { fromVersion, toVersion, startedAt, endedAt, users } = window;
    entries.push({ fromVersion, toVersion, startedAt, endedAt, users: users.slice() });
  }
  const named: NamedVersion[] = names
    .filter((name) => name.version <= before)
    .sort((a, b) => b.version - a.version);
  return { entries, named };
}

/// Sessions gathered backwards, step by step (an entry's steps share its time).
class Sessions {
  private readonly out: HistoryEntry[] = [];
  private current: Building | null = null;

  constructor(
    private readonly limit: number,
    private readonly gapMs: number,
  ) {}

  /// True once a page's worth of sessions is complete (a step older than the last was seen).
  get full(): boolean {
    return this.out.length >= this.limit;
  }

  /// Adds the steps of `entries` below `under`, newest first; returns the lowest version added
  /// (`under` when none was).
  add(entries: readonly JournalEntry[], under: number): number {
    let low = under;
    for (let e = entries.length - 1; e >= 0 && !this.full; e--) {
      const entry = entries[e]!;
      const at = entry.at ?? 0;
      for (let i = entry.steps.length - 1; i >= 0; i--) {
        const version = entry.baseVersion + i;
        if (version >= low) continue;
        this.step(version, at, entry.users ? entry.users[i]! : null);
        low = version;
        if (this.full) break;
      }
    }
    return low;
  }

  /// The sessions, newest first, the one being built included.
  done(): HistoryEntry[] {
    if (this.current && !this.full) this.out.push(finish(this.current));
    this.current = null;
    return this.out;
  }

  /// One step, applying at `version`, older than every step added before.
  private step(version: number, at: number, user: string | null): void {
    const current = this.current;
    if (current && current.fromVersion === version + 1 && current.startedAt - at <= this.gapMs) {
      current.fromVersion = version;
      current.startedAt = Math.min(current.startedAt, at);
      if (user !== null) {
        // Going backwards, a user met again wrote earlier than thought: moved to the back.
        const seen = current.usersBack.indexOf(user);
        if (seen >= 0) current.usersBack.splice(seen, 1);
        current.usersBack.push(user);
      }
      return;
    }
    if (current) this.out.push(finish(current));
    if (this.full) {
      this.current = null;
      return;
    }
    this.current = {
      fromVersion: version,
      toVersion: version + 1,
      startedAt: at,
      endedAt: at,
      usersBack: user === null ? [] : [user],
    };
  }
}

/// A finished session: its users in the order they first wrote.
function finish(building: Building): HistoryEntry {
  const { fromVersion, toVersion, startedAt, endedAt } = building;
  return { fromVersion, toVersion, startedAt, endedAt, users: building.usersBack.reverse() };
}
