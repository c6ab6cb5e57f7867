import { remoteCursors } from '../client/index.js';
import { docIdPattern } from '../schema/protocol.js';
import { openEditor, type Editor } from './editor.js';
import { HistoryApi } from './history_api.js';
import { AuthorColours, tokenSubject } from './history_authors.js';
import { HistoryPanel } from './history_panel.js';
import { VersionView } from './history_view.js';
import { loadIdentity, saveIdentity } from './identity.js';

declare global {
  interface Window {
    /// The running editor, for the browser tests and for poking at from the console.
    __scriptorium?: Editor;
  }
}

/// The page's entry point: opens the document named by the URL (`/d/<id>`) on the server that
/// served the page. Sharing the URL is how people edit together.
function main(): void {
  const element = (id: string) => document.getElementById(id)!;
  const notice = element('notice');
  const match = /^\/d\/([^/]+)\/?$/.exec(location.pathname);
  const docId = match ? decodeURIComponent(match[1]!) : '';
  if (!docIdPattern.test(docId)) {
    // The server answers such URLs with an error page itself; this covers a page saved or
    // served from elsewhere.
    notice.textContent = 'This address does not name a document.';
    notice.hidden = false;
    return;
  }
  document.title = `${docId} · Scriptorium`;

  let identity = loadIdentity();
  const token = tokenSource();
  const editor = openEditor(
    location.origin,
    docId,
    identity,
    {
      editor: element('editor'),
      status: element('status'),
      people: element('people'),
      notice,
    },
    token,
  );
  window.__scriptorium = editor;
  historyPanel(new HistoryApi(docId, token), editor, () => ({
    user: token ? tokenSubject(token()) : null,
    colour: identity.color,
  }));
  // Unsent changes live only in this tab: closing or reloading it would lose them (an offline
  // stretch, a server refusing this editor for good). The browser asks first; its own wording,
  // since browsers no longer show a page's.
  addEventListener('beforeunload', (event) => {
    if (!editor.client.hasUnconfirmed) return;
    event.preventDefault();
    event.returnValue = '';
  });

  const nameInput = element('name') as HTMLInputElement;
  nameInput.value = identity.name;
  nameInput.addEventListener('change', () => {
    const name = nameInput.value.trim();
    if (!name) {
      nameInput.value = identity.name;
      return;
    }
    identity = { ...identity, name };
    saveIdentity(identity);
    editor.setIdentity(identity);
  });
}

/// The History panel, its colours those of the editors present (this page's own included).
function historyPanel(
  api: HistoryApi,
  editor: Editor,
  self: () => { user: string | null; colour: string },
): HistoryPanel {
  const element = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
  const colours = new AuthorColours(() => {
    const present = new Map([[editor.client.clientID, self().colour]]);
    const state = editor.client.state;
    if (state)
      for (const cursor of remoteCursors(state)) present.set(cursor.clientID, cursor.color);
    return present;
  }, self);
  return new HistoryPanel(
    api,
    {
      toggle: element('history-toggle'),
      panel: element('history-panel'),
      entries: element('history-entries'),
      older: element('history-older'),
      gap: element('history-gap'),
      view: element('history-view'),
      title: element('history-title'),
      nameInput: element('history-name-input'),
      name: element('history-name'),
      restore: element('history-restore'),
      revertUser: element('history-revert-user'),
      revert: element('history-revert'),
      message: element('history-message'),
      hidden: [element('editor'), element('people-column')],
    },
    new VersionView(element('history-doc'), editor.client.schema, colours),
    colours,
  );
}

/// Where the client gets its token: none without one in the address; otherwise a function,
/// which the client calls again at every (re)connection. It reads the fragment each time, so
/// that when the token expires (during an offline stretch, say) a fresh link opened in the
/// same tab, which changes only the fragment and keeps the page with its unsent changes, lets
/// the client back in. Without a token in the fragment it keeps the one the page opened with.
function tokenSource(): (() => string) | null {
  const initial = tokenFromFragment();
  if (initial === null) return null;
  return () => tokenFromFragment() ?? initial;
}

/// The access token, from the address's fragment (`/d/<id>#token=…`): a fragment never
/// reaches the server, so the token stays out of its logs and of proxies' logs. Read by hand,
/// as the dashboard reads its own: URLSearchParams takes `+` for a space, and a host's opaque
/// token (base64, say) may hold `+`. Percent-escapes are decoded once; a malformed one leaves
/// the value as written. Null when there is none.
function tokenFromFragment(): string | null {
  const parts = location.hash.slice(1).split('&');
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (!part.startsWith('token=')) continue;
    const value = part.slice('token='.length);
    if (value === '') return null;
    try {
      return decodeURIComponent(value);
    } catch {
      return value;
    }
  }
  return null;
}

main();
