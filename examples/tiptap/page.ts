import { Editor } from '@tiptap/core';
import { bindView, type CollabClient } from '../../client/index.js';
import { extensions } from './extensions.js';

declare global {
  interface Window {
    /// For the browser test and the console.
    __example?: { editor: Editor; client: CollabClient };
  }
}

// A Tiptap editor on a Scriptorium document: Tiptap builds the view from its extensions, and
// `bindView` hands the view to a CollabClient, which loads the document, sends the steps of
// local edits and applies everyone else's. The document is `?doc=<id>` (default `welcome`);
// `&readonly=1` opens it as an observer, which follows the edits and cannot make any.
const params = new URLSearchParams(location.search);
const docId = params.get('doc') ?? 'welcome';
const status = document.getElementById('status')!;
const editor = new Editor({ element: document.getElementById('editor')!, extensions });
const client = bindView(editor.view, {
  url: location.origin,
  docId,
  readOnly: params.get('readonly') === '1',
  onStatus: (state) => {
    status.textContent = state;
    status.dataset['state'] = state;
  },
});
window.__example = { editor, client };
