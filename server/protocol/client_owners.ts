/// How long a client id stays bound to its user after the user's last writing socket closed:
/// the time an editor may be offline with unconfirmed steps and still come back to them.
export const clientIdHoldMs = 24 * 60 * 60 * 1000;

/// Most bindings kept for users who are gone, in all, for one user, and on one document. Past
/// any of them the releasing user's own longest gone binding is forgotten (see `release`).
export const maxHeldClientIds = 50_000;
export const maxHeldClientIdsPerUser = 1_000;
export const maxHeldClientIdsPerDocument = 10_000;

/// The bounds of a `ClientOwners`.
export interface HoldLimits {
  holdMs: number;
  maxHeld: number;
  maxHeldPerUser: number;
  maxHeldPerDocument: number;
}

interface Binding {
  user: string;
  /// Writing sockets of `user` connected with this client id.
  sockets: number;
}

interface Held {
  user: string;
  docId: string;
  releasedAt: number;
}

/// Which user each client id belongs to on each document, in authenticated mode.
/// prosemirror-collab recognises its own steps by client id, and client ids are public (every
/// broadcast carries them): a user who could write under another's id would make that editor
/// take those steps for its own and drop its real ones, silently diverging from the server.
/// So a client id is bound to the first user who writes with it on a document, while that user
/// is connected and for `clientIdHoldMs` after, which covers an editor that lost its
/// connection with edits still unconfirmed. Per document, because steps are recognised per
/// document: bound across documents, anyone with a write token for a document of their own
/// could take an id seen in another's broadcasts and lock its editor out of its own document
/// for the hold. One instance serves every namespace a collab is attached to, as the rooms do.
///
/// The bindings of users who are gone are bounded in all, per user and per document, and a
/// bound reached forgets only the releasing user's own bindings: one user's handshakes (which
/// are rate-limited too) cannot push out another's. Bindings live in this process: a restart,
/// or a document moving to another node, forgets them. `claim` says when a claim found no
/// binding, so that the protocol serves that socket as one that has sent nothing under the id
/// yet (docs/protocol.md, "Client ids").
export class ClientOwners {
  /// By `keyOf` document and client id.
  private readonly connected = new Map<string, Binding>();
  /// Bindings whose user has no writing socket left, by `keyOf`, in the order they were
  /// released: the first ones are the longest gone.
  private readonly gone = new Map<string, Held>();
  /// The same, by user, each in the order released.
  private readonly goneOfUser = new Map<string, Map<string, Held>>();
  /// How many of `gone` are on each document.
  private readonly goneOnDocument = new Map<string, number>();
  private readonly limits: HoldLimits;

  constructor(limits: Partial<HoldLimits> = {}) {
    this.limits = {
      holdMs: limits.holdMs ?? clientIdHoldMs,
      maxHeld: limits.maxHeld ?? maxHeldClientIds,
      maxHeldPerUser: limits.maxHeldPerUser ?? maxHeldClientIdsPerUser,
      maxHeldPerDocument: limits.maxHeldPerDocument ?? maxHeldClientIdsPerDocument,
    };
  }

  /// True when `user` may connect to `docId` with `clientID` at `now`: nobody holds it there,
  /// or `user` does.
  mayUse(docId: string, clientID: string, user: string, now: number): boolean {
    this.forgetOld(now);
    const key = keyOf(docId, clientID);
    const holder = this.connected.get(key)?.user ?? this.gone.get(key)?.user;
    return holder === undefined || holder === user;
  }

  /// Binds `clientID` on `docId` to `user` (who `mayUse` it) for one more writing socket.
  /// Returns true when there was no binding to take up: the id is new to this process on this
  /// document (never used, or its binding forgotten).
  claim(docId: string, clientID: string, user: string): boolean {
    const key = keyOf(docId, clientID);
    const binding = this.connected.get(key);
    if (binding) {
      binding.sockets++;
      return false;
    }
    const held = this.gone.get(key);
    if (held) this.forget(key, held);
    this.connected.set(key, { user, sockets: 1 });
    return held === undefined;
  }

  /// Counts one writing socket of `clientID` on `docId` out; the last one starts the hold.
  /// A bound reached forgets the releasing user's longest gone binding (on this document,
  /// for the bound per document).
  release(docId: string, clientID: string, now: number): void {
    const key = keyOf(docId, clientID);
    const binding = this.connected.get(key);
    if (!binding || --binding.sockets > 0) return;
    this.connected.delete(key);
    const user = binding.user;
    const held: Held = { user, docId, releasedAt: now };
    this.gone.set(key, held);
    let ofUser = this.goneOfUser.get(user);
    if (!ofUser) {
      ofUser = new Map();
      this.goneOfUser.set(user, ofUser);
    }
    ofUser.set(key, held);
    this.goneOnDocument.set(docId, (this.goneOnDocument.get(docId) ?? 0) + 1);
    this.forgetOld(now);
    const { maxHeld, maxHeldPerUser, maxHeldPerDocument } = this.limits;
    // The entry just added is the user's: each bound is back within reach by forgetting theirs.
    while (ofUser.size > 0 && (ofUser.size > maxHeldPerUser || this.gone.size > maxHeld)) {
      const [oldest, entry] = ofUser.entries().next().value!;
      this.forget(oldest, entry);
    }
    if ((this.goneOnDocument.get(docId) ?? 0) > maxHeldPerDocument) {
      for (const [other, entry] of ofUser) {
        if (entry.docId !== docId) continue;
        this.forget(other, entry);
        break;
      }
    }
  }

  /// Bindings held, connected or not.
  get size(): number {
    return this.connected.size + this.gone.size;
  }

  private forget(key: string, held: Held): void {
    this.gone.delete(key);
    const ofUser = this.goneOfUser.get(held.user);
    ofUser?.delete(key);
    if (ofUser?.size === 0) this.goneOfUser.delete(held.user);
    const onDocument = (this.goneOnDocument.get(held.docId) ?? 0) - 1;
    if (onDocument > 0) this.goneOnDocument.set(held.docId, onDocument);
    else this.goneOnDocument.delete(held.docId);
  }

  /// Drops the bindings whose hold is over: they are at the front of `gone`, so this stops at
  /// the first one it keeps.
  private forgetOld(now: number): void {
    for (const [key, held] of this.gone) {
      if (now - held.releasedAt < this.limits.holdMs) return;
      this.forget(key, held);
    }
  }
}

/// One key for a document and a client id: neither pattern allows a space.
function keyOf(docId: string, clientID: string): string {
  return `${docId} ${clientID}`;
}
