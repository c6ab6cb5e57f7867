import type { EditorView } from 'prosemirror-view';
import { CollabClient, type CollabClientOptions } from './collab_client.js';

/// Options of `bindView`: those of a `CollabClient`, except what the view supplies (its
/// schema and plugins) and `onState`, which the binding uses to draw the view.
export type BindViewOptions = Omit<CollabClientOptions, 'schema' | 'plugins'>;

/// Connects an editor view that someone else made (Tiptap's `editor.view`, a view with its own
/// plugins) to a Scriptorium server. The client takes the view's schema and plugins, and from
/// then on owns the state: the view draws the client's state, and its transactions go to the
/// client (which applies them, sends their steps, and rebases them over remote ones). Until the
/// document is loaded the view is read-only: there is nothing to edit yet; with `readOnly` it
/// stays so.
///
/// Before remote steps are drawn, the binding has the view read any input still pending in the
/// DOM (its DOM observer's flush; prosemirror-view does that only on its next mutation or
/// selection event). Without it, a character typed or a caret moved in the last milliseconds
/// can be overwritten by the redraw of the remote state (a caret moved by Ctrl+End jumps
/// back).
///
/// This replaces the view's `dispatchTransaction`: libraries that listen for transactions
/// through their own dispatch (Tiptap's `update` event) do not see them; read the state from
/// `onState` instead. Returns the client; `client.close()` disconnects.
export function bindView(view: EditorView, options: BindViewOptions): CollabClient {
  const client = new CollabClient({
    ...options,
    schema: view.state.schema,
    plugins: view.state.plugins,
    onState(state, tr) {
      view.updateState(state);
      options.onState?.(state, tr);
    },
    beforeRemote() {
      readPendingInput(view);
      options.beforeRemote?.();
    },
  });
  view.setProps({
    dispatchTransaction: (tr) => {
      // Before the first join there is no state to apply it to; the view is not editable then.
      if (client.state) client.dispatch(tr);
    },
    // An observer (`readOnly`) never sends: an edit made in its view would sit unconfirmed
    // for ever, so its view is never editable.
    editable: () => client.state !== null && client.status !== 'failed' && !options.readOnly,
  });
  return client;
}

/// prosemirror-view's DOM observer (an internal of `EditorView`, present in every 1.x release):
/// `flush` reads pending DOM mutations and the DOM selection and dispatches what changed.
interface WithDomObserver {
  domObserver?: { flush(): void };
}

/// Has `view` read the input still pending in its DOM (typed text, a moved caret) and dispatch
/// it now. For a `CollabClient`'s `beforeRemote` when you make the view yourself; `bindView`
/// sets it up. Does nothing while a composition (IME) is under way, which ProseMirror reads
/// when it ends.
export function readPendingInput(view: EditorView): void {
  if (view.isDestroyed || view.composing) return;
  (view as unknown as WithDomObserver).domObserver?.flush();
}
