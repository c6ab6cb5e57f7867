import type { DocJSON, SyncAnswer, SyncRequest } from '../../schema/events.js';
import type { Authority } from '../core/authority.js';
import type { ClientLedger } from './ledger.js';

/// What a sync answer is made from: an open room's published state.
export interface SyncSource {
  readonly epoch: string;
  /// The published version: steps past it are not durable yet, and never shown.
  readonly version: number;
  readonly authority: Authority;
  readonly ledger: ClientLedger;
  /// The document at `version` as JSON (serialised once per version by the room).
  json(): DocJSON;
}

/// The answer to `join` and `pull` from a room that may answer from its copy: the steps since
/// the client's version when the history still holds them all (and the epoch matches),
/// otherwise the whole published document, with how far it holds the batches of `clientID`
/// (the asking connection's), when the ledger remembers them.
export function syncAnswer(
  source: SyncSource,
  request: SyncRequest,
  clientID?: string,
): SyncAnswer {
  const { epoch, version: published } = source;
  const { version, epoch: asked } = request;
  if (version !== undefined && (asked === undefined || asked === epoch)) {
    const since = source.authority.stepsSince(version, published);
    if (since) {
      return {
        ok: true,
        epoch,
        version: published,
        steps: since.steps,
        clientIDs: since.clientIDs,
      };
    }
  }
  const acceptedThrough = clientID === undefined ? undefined : source.ledger.get(clientID);
  return {
    ok: true,
    epoch,
    version: published,
    doc: source.json(),
    ...(acceptedThrough === undefined ? {} : { acceptedThrough }),
  };
}
