import { getVersion, sendableSteps } from 'prosemirror-collab';
import type { EditorState, Plugin, Transaction } from 'prosemirror-state';
import { Mapping } from 'prosemirror-transform';
import {
  presenceColorPattern,
  presenceNameMaxLength,
  type PresenceBroadcast,
} from '../schema/events.js';
import type { CollabClient, CollabStatus } from './collab_client.js';
import {
  isDisplayable,
  presenceKey,
  presencePlugin,
  remoteCursors,
  type PresenceAction,
  type PresenceState,
} from './presence_plugin.js';

export { presenceKey, remoteCursors, type RemoteCursor } from './presence_plugin.js';

/// Options of a `Presence`.
export interface PresenceOptions {
  name: string;
  color: string;
  /// Shortest time between two presence messages sent; the server relays at most one per
  /// socket in each of its own intervals (`presenceIntervalMs`) anyway.
  intervalMs?: number;
}

/// Shows other editors' cursors and selections and tells them where ours is.
///
/// `plugin` goes into the editor state (through `CollabClientOptions.plugins`): it keeps remote
/// cursors in this editor's coordinates, maps them through every transaction, and draws them as
/// decorations (a caret with a name label, a tinted selection). Wire the rest with `connect`
/// (the socket events), `stateChanged` (from `onState`) and `statusChanged` (from `onStatus`).
///
/// Positions on the wire are positions in the document at the sent `version`: the sender maps
/// its selection back through its unconfirmed steps, and a receiver maps them forward through
/// the confirmed steps since that version (a log of step maps kept in the plugin) and then its
/// own unconfirmed steps. A presence from a version the receiver has not reached waits until it
/// has; one older than the log is clamped to the document.
export class Presence {
  readonly plugin: Plugin<PresenceState>;
  name: string;
  color: string;

  private client: CollabClient | null = null;
  private readonly intervalMs: number;
  private joined = false;
  private lastSentAt = 0;
  private lastSent = '';
  private timer: ReturnType<typeof setTimeout> | null = null;
  /// The last presence of every client we know, as received: re-placed after a reload, and
  /// what tells a newcomer (whom we then greet with our own presence) from a known editor.
  private readonly known = new Map<string, PresenceBroadcast>();
  /// The state of the last state change: its selection, and the cursors drawn in it.
  private lastState: EditorState | null = null;
  /// The last presence sent lost its place being mapped back through our unconfirmed steps (a
  /// caret inside or before text of ours the server has not confirmed): receivers will draw
  /// it at the end of that text. Sent again as those steps are confirmed.
  private imprecise = false;

  constructor(options: PresenceOptions) {
    // Checked as `setIdentity` checks them: the server refuses a presence with a longer name
    // or another colour format, and counts each as a protocol error, until it closes the
    // connection.
    this.name = displayName(options.name);
    this.color = presenceColorPattern.test(options.color) ? options.color : defaultColor;
    this.intervalMs = options.intervalMs ?? 50;
    this.plugin = presencePlugin();
  }

  /// Listens for `presence` and `presence-leave` on the client's socket.
  connect(client: CollabClient): void {
    this.client = client;
    client.socket.on('presence', (presence) => {
      if (!isDisplayable(presence)) return;
      const newcomer = !this.known.has(presence.clientID);
      this.known.set(presence.clientID, presence);
      this.apply({ type: 'update', presences: [presence] });
      // A newcomer was told our presence as the server last relayed it, possibly at an old
      // version it cannot map: send a fresh one.
      if (newcomer) this.schedule(true);
    });
    client.socket.on('presence-leave', ({ clientID }) => {
      this.known.delete(clientID);
      this.apply({ type: 'leave', clientID });
    });
  }

  /// Call with every state change (`CollabClientOptions.onState`): sends our presence when our
  /// own selection moved, and re-places known cursors after a reload.
  stateChanged(state: EditorState, tr: Transaction | null): void {
    const previous = this.lastState;
    this.lastState = state;
    if (tr === null) {
      this.replaced(previous);
      this.schedule(true);
      return;
    }
    // Our own presence bookkeeping: not a move of our selection.
    if (tr.getMeta(presenceKey) !== undefined) return;
    // A caret sent imprecisely is sent again with every change, such as the confirmation of
    // our steps (a transaction with neither a step nor a selection of its own).
    if (this.imprecise) {
      this.schedule(false);
      return;
    }
    if (tr.getMeta('rebased') !== undefined) {
      // Remote steps. Receivers map our caret through them themselves, as any position:
      // after text inserted right at it. Ours stays before such text (prosemirror-collab's
      // `mapSelectionBackward`): that case is sent.
      const before = previous?.selection;
      const apart =
        before !== undefined &&
        (tr.mapping.map(before.anchor, 1) !== state.selection.anchor ||
          tr.mapping.map(before.head, 1) !== state.selection.head);
      if (apart) this.schedule(false);
      return;
    }
    if (tr.selectionSet || tr.docChanged) this.schedule(false);
  }

  /// The state was replaced (a reload, or a batch of ours the server rebased otherwise): the
  /// plugin starts afresh in it. The cursors drawn in `previous` are moved as the selection was
  /// (`CollabClient.replacedMap`); the presences not drawn yet are placed from what they said.
  private replaced(previous: EditorState | null): void {
    const map = this.client?.replacedMap ?? null;
    const drawn = previous && map ? remoteCursors(previous) : [];
    const state = this.client?.state;
    if (drawn.length > 0 && state) {
      const size = state.doc.content.size;
      const move = (pos: number): number => Math.max(0, Math.min(size, map!(pos)));
      const cursors = drawn.map((c) => ({ ...c, anchor: move(c.anchor), head: move(c.head) }));
      this.apply({ type: 'place', cursors });
    }
    const waiting = [...this.known.values()].filter(
      (presence) => !drawn.some((cursor) => cursor.clientID === presence.clientID),
    );
    if (waiting.length > 0) this.apply({ type: 'update', presences: waiting });
  }

  /// Call with every status change (`CollabClientOptions.onStatus`): announces us after each
  /// (re)join, and forgets the others while disconnected (their cursors would only go stale;
  /// the server introduces them again after we rejoin).
  statusChanged(status: CollabStatus): void {
    const joined = status === 'synced' || status === 'sending';
    if (joined && !this.joined) {
      this.joined = true;
      this.schedule(true);
    } else if (!joined && this.joined) {
      this.joined = false;
      this.known.clear();
      this.apply({ type: 'clear' });
    }
  }

  /// Changes the name or colour shown to others, and tells them.
  setIdentity(name: string, color: string): void {
    this.name = displayName(name);
    if (presenceColorPattern.test(color)) this.color = color;
    this.schedule(true);
  }

  /// Stops the pending send, if any.
  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private apply(action: PresenceAction): void {
    if (!this.client?.state) return;
    // A key the view has not read yet (a selection moved in the DOM) would be undone by the
    // redraw, which writes the state's older selection back.
    this.client.readPendingInput();
    const state = this.client.state;
    this.client.dispatch(state.tr.setMeta(presenceKey, action));
  }

  /// Sends now, or at the end of the current throttle window. `force` sends even when nothing
  /// changed since the last message (greeting a newcomer, rejoining).
  private schedule(force: boolean): void {
    if (force) this.lastSent = '';
    if (this.timer !== null) return;
    const wait = this.lastSentAt + this.intervalMs - Date.now();
    if (wait <= 0) {
      this.send();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      this.send();
    }, wait);
  }

  private send(): void {
    const state = this.client?.state;
    if (!this.client || !state || !this.joined) return;
    let { anchor, head } = state.selection;
    const local = sendableSteps(state);
    this.imprecise = false;
    if (local) {
      const forward = new Mapping(local.steps.map((step) => step.getMap()));
      const back = forward.invert();
      anchor = back.map(anchor, -1);
      head = back.map(head, -1);
      // Receivers will map these forward through the same steps once confirmed, with bias 1.
      this.imprecise =
        forward.map(anchor, 1) !== state.selection.anchor ||
        forward.map(head, 1) !== state.selection.head;
    }
    const update = { version: getVersion(state), anchor, head, name: this.name, color: this.color };
    const key = JSON.stringify(update);
    if (key === this.lastSent) return;
    this.lastSent = key;
    this.lastSentAt = Date.now();
    this.client.socket.emit('presence', update);
  }
}

const defaultColor = '#6b7280';

/// A name the server takes: cut to its length limit, never empty.
function displayName(name: string): string {
  return name.slice(0, presenceNameMaxLength) || 'Anonymous';
}
