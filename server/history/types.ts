import type { Step } from 'prosemirror-transform';

// The shapes of a document's version history: what is kept of each accepted step here, and
// what the history API answers from schema/history.ts.

/// One accepted step as the history keeps it.
export interface HistoryStep {
  step: Step;
  clientID: string;
  /// The user `authenticate` returned for the connection that sent it; null in open mode.
  user: string | null;
  /// When it was made durable, in milliseconds since the Unix epoch.
  at: number;
}

export type {
  AttributedChange,
  ChangesResult,
  HistoryEntry,
  HistoryPage,
  NamedVersion,
  RevertResult,
  Span,
} from '../../schema/history.js';
