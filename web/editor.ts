import { sendableSteps } from 'prosemirror-collab';
import { history } from 'prosemirror-history';
import { EditorView } from 'prosemirror-view';
import {
  CollabClient,
  Presence,
  readPendingInput,
  refusedLocalSteps,
  remoteCursors,
} from '../client/index.js';
import type { Identity } from './identity.js';
import { inputRulesPlugin } from './input_rules.js';
import { keymapPlugins } from './keymap.js';
import { linkView } from './link_view.js';
import { menuPlugin } from './menu.js';
import { PeopleList } from './people_list.js';
import { StatusBar } from './status_bar.js';

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
  const statusBar = new StatusBar(elements.status);
  const people = new PeopleList(elements.people);
  const presence = new Presence({ name: identity.name, color: identity.color });
  let self = identity;
  let view: EditorView | null = null;
  let loaded = false;
  let unreachable = false;
  // The server refused the token and `token` is a function, so the client asks it again at
  // every retry: the person can bring a fresh one (see `tokenNotice`).
  let tokenRefused = false;
  let refusal = '';

  const client = new CollabClient({
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
        loaded = true;
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
      refresh();
    },
    // Typing not yet read from the DOM would be drawn over by the remote steps.
    beforeRemote() {
      if (view) readPendingInput(view);
    },
    onStatus(status) {
      presence.statusChanged(status);
      if (status === 'failed') showFailure();
      refresh();
    },
    onReload({ dropped, reason }) {
      if (dropped === 0) return;
      // The client's error is the refusal only for a drop it made for one: a reload for
      // another reason later would otherwise be blamed on an old refusal.
      const why =
        reason === refusedLocalSteps && client.error
          ? `: ${refusalText(client.error.message, dropped)}`
          : '';
      notice(
        `${dropped === 1 ? '1 change' : `${dropped} changes`} could not be kept (${reason})${why}.`,
      );
    },
  });
  presence.connect(client);
  client.socket.on('connect', () => {
    unreachable = false;
    if (tokenRefused) elements.notice.hidden = true;
    tokenRefused = false;
    refresh();
  });
  client.socket.on(
    'connect_error',
    (err: Error & { data?: { code?: unknown; message?: unknown } }) => {
      unreachable = true;
      tokenRefused = err.data?.code === 'unauthorized' && typeof token === 'function';
      if (tokenRefused) refusal = String(err.data?.message ?? '');
      refresh();
    },
  );

  function unsentCount(): number {
    return client.state ? (sendableSteps(client.state)?.steps.length ?? 0) : 0;
  }

  function refresh(): void {
    const unsent = unsentCount();
    statusBar.show({
      status: client.status,
      error: client.error,
      loaded,
      unsent,
      unreachable,
      tokenRefused,
    });
    // Redrawn with every change, so that the count it gives stays true while the person types.
    if (tokenRefused) tokenNotice(unsent);
  }

  /// The token of the page expired (typically during an offline stretch). Reloading would
  /// discard the unsent changes, and the expired link cannot open the document again; a fresh
  /// link opened in this tab changes only the fragment, which the `token` function reads.
  function tokenNotice(unsent: number): void {
    if (!loaded) {
      notice(
        `This document cannot be opened: ${refusal || 'the access token was refused'}. ` +
          'Open a fresh link to it in this tab (paste it into the address bar).',
      );
      return;
    }
    const kept = unsent === 1 ? '1 unsent change is' : `${unsent} unsent changes are`;
    notice(
      `The access token in this address was refused: ${refusal || 'it may have expired'}. ` +
        (unsent > 0
          ? `${kept} kept in this tab only: reloading the page would discard them. `
          : '') +
        'Open a fresh link to this document in this tab (paste it into the address bar) to ' +
        (unsent > 0 ? 'send them.' : 'go on.'),
    );
  }

  function showFailure(): void {
    const error = client.error;
    const reason = error ? `${error.message} (${error.code})` : 'the server refused this editor';
    if (!loaded) {
      notice(`This document cannot be opened: ${reason}.`);
    } else {
      // The state and its unsent steps stay in this page; a reload starts from the server's.
      const unsent = unsentCount();
      const lost =
        unsent === 0
          ? ''
          : ` ${unsent === 1 ? '1 change was' : `${unsent} changes were`} not sent, and ` +
            'reloading discards them: copy what you need to keep first.';
      notice(
        `This editor was disconnected for good: ${reason}.${lost} Reload the page to continue.`,
      );
    }
    view?.setProps({ editable: () => false });
  }

  function notice(text: string): void {
    elements.notice.textContent = text;
    elements.notice.hidden = false;
  }

  refresh();
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

/// A refusal as a notice tells it. The server's "Step 0 would make the document larger than …"
/// names a step of a batch the reader never saw, and a full document refuses a whole backlog in
/// one notice: the notice speaks of the changes it counts instead.
function refusalText(message: string, dropped: number): string {
  const size = /^Step \d+ (would make the document larger than .*)$/.exec(message);
  return size ? `${dropped === 1 ? 'it' : 'they'} ${size[1]}` : message;
}
