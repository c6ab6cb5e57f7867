import type { EditorView } from 'prosemirror-view';
import { CollabClient, type CollabClientOptions } from './collab_client.js';

/// Options of `bindView`: those of a `CollabClient`, except what the view supplies (its
/// schema and plugins) and `onState`, which the binding uses to draw the view.
export type BindViewOptions = Omit<CollabClientOptions, 'schema' | 'plugins'>;

/// Connects an editor view that someone else made (Tiptap's `editor.view`, a view with its own
/// plugins) to a Scriptorium server. The client takes the view's schema and plugins, and from
/// then on owns the state: the view draws the client's state, and its transactions go to the
/// client (which applies them, sends their steps, and rebases them over remote ones). Until the
/// document is loaded the view is read-only: there is nothing to edit yet.
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
  });
  view.setProps({
    dispatchTransaction: (tr) => {
      // Before the first join there is no state to apply it to; the view is not editable then.
      if (client.state) client.dispatch(tr);
    },
    editable: () => client.state !== null && client.status !== 'failed',
  });
  return client;
}
