import type { Node } from 'prosemirror-model';
import type { StepJSON } from '../../schema/events.js';

/// What the hooks are shown of a room (a `Room` is one): its document as published, which
/// holds only durable steps.
export interface PublishedRoom {
  readonly docId: string;
  readonly publishedVersion: number;
  readonly publishedDoc: Node;
}

/// A batch made durable, broadcast and acknowledged: what `RoomHooks.accepted` receives.
export interface AcceptedBatch {
  docId: string;
  /// The version after the batch.
  version: number;
  /// The steps as they were applied (rebased when the server rebased them).
  steps: readonly StepJSON[];
  clientID: string;
  /// Who sent it, as the host's `authenticate` named them; null in open mode.
  user: string | null;
}

/// Called by the rooms when documents come and go and batches are accepted. Each is the
/// host's code behind a wrapper that catches what it throws: a room never sees a throw.
export interface RoomHooks {
  /// Awaited after a document is loaded (or made) and before anyone is served from it;
  /// rejecting refuses the load with the error's code (`CodedError`) or `internal`.
  loaded?(room: PublishedRoom): Promise<void>;
  accepted?(batch: AcceptedBatch): void;
  /// Once for every room loaded (whose `loaded` passed), when it has left memory: unloaded
  /// (after its snapshot), handed over or lost to another process, closed after a failure or
  /// a conflict, or closed with the registry.
  unloaded?(room: PublishedRoom): void;
}
