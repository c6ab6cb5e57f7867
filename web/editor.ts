import { history } from 'prosemirror-history';
import { EditorView } from 'prosemirror-view';
import { CollabClient, Presence, readPendingInput, remoteCursors } from '../client/index.js';
import { EditorStatus } from './editor_status.js';
import type { Identity } from './identity.js';
import { inputRulesPlugin } from './input_rules.js';
import { keymapPlugins } from './keymap.js';
import { linkView } from './link_view.js';
import { menuPlugin } from './menu.js';
import { PeopleList } from './people_list.js';

/// Where the editor draws itself in the page.
export interface EditorElements {
  /// Receives the menu bar and the editable document once it has loaded.
  editor: HTMLElement;
  status: HTMLElement;
  people: HTMLElement;
  /// Shown with a message when the document cannot be opened or local changes were refused.
  notice: HTMLElement;
}

/// A running browser editor: the collab client (which holds the state) and the view that shows
/// it, null until the document has loaded.
export interface Editor {
  readonly client: CollabClient;
  readonly presence: Presence;
  readonly view: EditorView | null;
  /// Changes the name and colour shown to the others.
  setIdentity(identity: Identity): void;
}

/// Opens document `docId` on the server at `url` and shows it in `elements`.
///
/// The client owns the state: the view's `dispatchTransaction` hands every transaction to
/// `client.dispatch`, and the view is redrawn from `onState`, for local and remote changes
/// alike. Undo only undoes this editor's steps: remote steps arrive through prosemirror-collab's
/// `receiveTransaction`, which marks them `addToHistory: false` and `rebased`, so
/// prosemirror-history leaves them out and rebases its own items over them.
export function openEditor(
  url: string,
  docId: string,
  identity: Identity,
  elements: EditorElements,
  token: string | (() => string) | null = null,
): Editor {
  const people = new PeopleList(elements.people);
  const presence = new Presence({ name: identity.name, color: identity.color });
  let self = identity;
  let view: EditorView | null = null;

  const client: CollabClient = new CollabClient({
    url,
    docId,
    ...(token === null ? {} : { token }),
    plugins: [presence.plugin, history(), inputRulesPlugin(), ...keymapPlugins(), menuPlugin()],
    onState(state, tr) {
      if (!view) {
        view = new EditorView(elements.editor, {
          state,
          dispatchTransaction: (transaction) => client.dispatch(transaction),
          markViews: { link: linkView },
        });
        status.loaded = true;
      } else {
        // A rebuilt state (a reload: history gone, a new epoch, refused steps) brings new plugin
        // views, and the menu bar's moves the editable element, which blurs it: the status says
        // all is saved while the next keys go nowhere. Focus again; the selection is the one
        // the client mapped into the new state.
        const focused = tr === null && view.hasFocus();
        view.updateState(state);
        if (focused && !view.hasFocus()) view.focus();
      }
      presence.stateChanged(state, tr);
      // Presence may have dispatched (after a reload it places the cursors again), which ran
      // this callback for the newer state inside: the list is drawn from the newest one, as the
      // carets are, or an older state's (a reloaded one holds no cursors yet) would win.
      people.show(self, remoteCursors(client.state ?? state));
      status.refresh();
    },
    // Typing not yet read from the DOM would be drawn over by the remote steps.
    beforeRemote() {
      if (view) readPendingInput(view);
    },
    onStatus(clientStatus) {
      presence.statusChanged(clientStatus);
      if (clientStatus === 'failed') {
        status.failed();
        view?.setProps({ editable: () => false });
      }
      status.refresh();
    },
    onReload({ dropped, reason }) {
      status.dropped(dropped, reason);
    },
  });
  const status = new EditorStatus(elements.status, elements.notice, client);
  presence.connect(client);
  client.socket.on('connect', () => status.connected());
  client.socket.on('connect_error', (err: Error) =>
    status.connectFailed(err, typeof token === 'function'),
  );

  status.refresh();
  return {
    client,
    presence,
    get view() {
      return view;
    },
    setIdentity(identity) {
      self = identity;
      presence.setIdentity(identity.name, identity.color);
      if (client.state) people.show(self, remoteCursors(client.state));
    },
  };
}
