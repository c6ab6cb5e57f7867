import type { Step } from 'prosemirror-transform';

// The shapes of a document's version history: what is kept of each accepted step, and what
// the history API (`collab.history`, `documentAt`, `changes`, `restore`, `revert` and their
// HTTP routes) answers. Names here are the public contract of issue 30.

/// One accepted step as the history keeps it.
export interface HistoryStep {
  step: Step;
  clientID: string;
  /// The user `authenticate` returned for the connection that sent it; null in open mode.
  user: string | null;
  /// When it was made durable, in milliseconds since the Unix epoch.
  at: number;
}

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
