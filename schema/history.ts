// The JSON shapes the version history answers (`collab.history`, `changes`, `revert` and their
// HTTP routes: docs/history.md), shared by the server and the clients that read them, as the
// wire events are in events.ts.

/// A run of inserted or deleted text, attributed to the step that made it.
export interface Span {
  length: number;
  user: string | null;
  clientID: string;
  at: number;
}

/// One changed range between two versions, as prosemirror-changeset's `Change` (positions in
/// the older document A and the newer document B), every span attributed.
export interface AttributedChange {
  fromA: number;
  toA: number;
  fromB: number;
  toB: number;
  inserted: Span[];
  deleted: Span[];
}

export interface ChangesResult {
  fromVersion: number;
  toVersion: number;
  changes: AttributedChange[];
}

/// A session of editing: consecutive steps with no pause longer than `gapMs` between them.
export interface HistoryEntry {
  fromVersion: number;
  toVersion: number;
  startedAt: number;
  endedAt: number;
  /// Who wrote in it, each once, in the order they first wrote (open-mode steps name nobody).
  users: string[];
}

export interface NamedVersion {
  version: number;
  name: string;
  user: string | null;
  at: number;
}

/// What `collab.history` answers: entries newest first, and the named versions among them.
export interface HistoryPage {
  entries: HistoryEntry[];
  named: NamedVersion[];
}

/// What `collab.revert` answers: the new head version, and how many of the user's steps were
/// inverted and how many no longer applied (skipped, never forced).
export interface RevertResult {
  version: number;
  reverted: number;
  skipped: number;
}
