/// How long a client id stays bound to its user after the user's last writing socket closed:
/// the time an editor may be offline with unconfirmed steps and still come back to them.
export const clientIdHoldMs = 24 * 60 * 60 * 1000;

/// Most bindings kept for users who are gone; past it the longest gone are forgotten first.
export const maxHeldClientIds = 50_000;

interface Binding {
  user: string;
  /// Writing sockets of `user` connected with this client id.
  sockets: number;
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
/// Bindings live in this process: a restart, or a document moving to another node, forgets
/// them (clients generate random ids, so a newcomer taking a known one is an attack, not an
/// accident, and needs a write token for the document).
export class ClientOwners {
  /// By `keyOf` document and client id.
  private readonly connected = new Map<string, Binding>();
  /// Bindings whose user has no writing socket left, by `keyOf`, in the order they were
  /// released: the first ones are the longest gone. The value is the user.
  private readonly gone = new Map<string, { user: string; releasedAt: number }>();

  constructor(
    private readonly holdMs = clientIdHoldMs,
    private readonly maxHeld = maxHeldClientIds,
  ) {}

  /// True when `user` may connect to `docId` with `clientID` at `now`: nobody holds it there,
  /// or `user` does.
  mayUse(docId: string, clientID: string, user: string, now: number): boolean {
    this.forgetOld(now);
    const key = keyOf(docId, clientID);
    const holder = this.connected.get(key)?.user ?? this.gone.get(key)?.user;
    return holder === undefined || holder === user;
  }

  /// Binds `clientID` on `docId` to `user` (who `mayUse` it) for one more writing socket.
  claim(docId: string, clientID: string, user: string): void {
    const key = keyOf(docId, clientID);
    const binding = this.connected.get(key);
    if (binding) {
      binding.sockets++;
      return;
    }
    this.gone.delete(key);
    this.connected.set(key, { user, sockets: 1 });
  }

  /// Counts one writing socket of `clientID` on `docId` out; the last one starts the hold.
  release(docId: string, clientID: string, now: number): void {
    const key = keyOf(docId, clientID);
    const binding = this.connected.get(key);
    if (!binding || --binding.sockets > 0) return;
    this.connected.delete(key);
    this.gone.set(key, { user: binding.user, releasedAt: now });
    this.forgetOld(now);
  }

  /// Bindings held, connected or not.
  get size(): number {
    return this.connected.size + this.gone.size;
  }

  /// Drops the bindings whose hold is over, and the longest gone past `maxHeld`: both are at
  /// the front of `gone`, so this stops at the first one it keeps.
  private forgetOld(now: number): void {
    for (const [key, held] of this.gone) {
      if (this.gone.size <= this.maxHeld && now - held.releasedAt < this.holdMs) return;
      this.gone.delete(key);
    }
  }
}

/// One key for a document and a client id: neither pattern allows a space.
function keyOf(docId: string, clientID: string): string {
  return `${docId} ${clientID}`;
}
