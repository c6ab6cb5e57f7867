import { collab, sendableSteps } from 'prosemirror-collab';
import type { Node } from 'prosemirror-model';
import { EditorState, TextSelection } from 'prosemirror-state';
import type { Step, StepMap } from 'prosemirror-transform';
import { rebaseSteps, StepRebaser } from '../schema/rebase.js';
import { refusedLocalSteps, type ClientState } from './client_state.js';
import { differenceMap } from './diff/doc_diff.js';

// Building a new editor state in place of the current one, when the steps that lead from one
// to the other are not what prosemirror-collab can apply: a reload of the server's document,
// our batch as the server rebased it otherwise, local steps dropped after a refusal. Undo
// history starts afresh in each; the unconfirmed steps are rebased onto the new document.

/// A state of `doc` at collab `version`, with the client's plugins. Collab comes first:
/// plugins that read the collab version in their own state (presence) see it already updated
/// for the transaction they apply.
export function freshState(s: ClientState, doc: Node, version: number): EditorState {
  return EditorState.create({
    schema: s.schema,
    doc,
    plugins: [collab({ version, clientID: s.clientID }), ...s.plugins],
  });
}

/// A fresh state of `doc` at `version` with `steps` applied as unconfirmed, and the selection
/// of `previous` moved by `map` (positions of the previous document to the new one's).
export function stateWithSteps(
  s: ClientState,
  doc: Node,
  version: number,
  steps: readonly Step[],
  previous: EditorState,
  map: (pos: number) => number,
): EditorState {
  const state = freshState(s, doc, version);
  const tr = state.tr;
  for (const step of steps) tr.step(step);
  const size = tr.doc.content.size;
  const anchor = Math.min(map(previous.selection.anchor), size);
  const head = Math.min(map(previous.selection.head), size);
  tr.setSelection(TextSelection.between(tr.doc.resolve(anchor), tr.doc.resolve(head)));
  return state.apply(tr);
}

/// Replaces the state with the server's document at `version`. Unconfirmed local steps are
/// rebased onto it (unless `dropLocal`), so an offline editor loses as little as possible;
/// those that no longer apply are reported through `onReload`. The first `landed` of them are
/// already in `doc` (a batch whose acknowledgement was lost) and are not applied again. The
/// selection follows the same mapping.
///
/// The server sends a whole document, not the steps that led to it, so the change from our
/// confirmed document to `doc` is reconstructed by comparing the two (`differenceMap`). A
/// local edit outside what changed keeps its place however much text others added or
/// removed elsewhere; one inside it is dropped, as an edit into text that others deleted
/// is. Applying the steps at their old positions instead would put an offline edit wherever
/// those positions fall in the new text.
export function reload(
  s: ClientState,
  doc: Node,
  version: number,
  dropLocal: boolean,
  epochChanged: boolean,
  landed = 0,
): void {
  s.options.beforeRemote?.();
  const previous = s.state;
  let state: EditorState;
  let dropped = 0;
  let replaced: ((pos: number) => number) | null = null;
  if (!previous) state = freshState(s, doc, version);
  else {
    const unconfirmed = sendableSteps(previous)?.steps ?? [];
    const keep = dropLocal ? 0 : landed;
    const moved = moveOnto(s.confirmedDoc!, unconfirmed, keep, doc, dropLocal);
    replaced = moved.map;
    dropped = unconfirmed.length - keep - moved.steps.length;
    state = stateWithSteps(s, doc, version, moved.steps, previous, moved.map);
  }
  s.state = state;
  s.confirmedDoc = doc;
  s.sent.sinceSent = null;
  s.stateReplaced(state, replaced);
  if (previous) {
    const reason = dropLocal
      ? refusedLocalSteps
      : epochChanged
        ? "the document's history was reset"
        : 'the server no longer held the steps to catch up';
    s.options.onReload?.({ dropped, reason });
  }
}

/// Rebases `unconfirmed` (the previous state's local steps, made on `confirmed`) onto `doc`,
/// leaving out the first `landed`, which `doc` already holds; none when `dropLocal`. Returns
/// the steps that still apply, and a function that maps a position of the previous state's
/// document to the document after them.
function moveOnto(
  confirmed: Node,
  unconfirmed: readonly Step[],
  landed: number,
  doc: Node,
  dropLocal: boolean,
): { steps: Step[]; map: (pos: number) => number } {
  // The confirmed document with the landed steps: what `doc` is compared with. (They were
  // made on it, so they apply; a state always comes with its confirmed document.)
  let base = confirmed;
  for (let i = 0; i < landed; i++) base = unconfirmed[i]!.apply(base).doc ?? base;
  const rest = unconfirmed.slice(landed);
  const over = differenceMap(base, doc);
  const maps = over ? [over] : [];
  // Dropped, they still move the selection back out of what they inserted.
  const { steps, rebaser } = dropLocal
    ? { steps: [], rebaser: new StepRebaser(rest, maps) }
    : rebaseSteps(rest, maps, doc);
  return { steps, map: (pos) => rebaser.mapAfter(pos) };
}

/// Rebuilds the state on the server's version of our last batch (`run`, ending at
/// `version`): the confirmed document plus `run`, with our later unconfirmed steps rebased
/// from our version of the batch onto the server's. Undo history starts afresh.
export function reconcile(
  s: ClientState,
  state: EditorState,
  run: readonly Step[],
  confirmed: Node,
  version: number,
): EditorState {
  const unconfirmed = sendableSteps(state)?.steps ?? [];
  const ours = unconfirmed.slice(0, Math.min(s.sent.steps.length, unconfirmed.length));
  const rest = unconfirmed.slice(ours.length);
  let doc = confirmed;
  for (let i = 0; i < run.length; i++) doc = run[i]!.apply(doc).doc!;
  const over: StepMap[] = [];
  for (let i = ours.length - 1; i >= 0; i--) over.push(ours[i]!.getMap().invert());
  for (let i = 0; i < run.length; i++) over.push(run[i]!.getMap());
  const moved = rebaseSteps(rest, over, doc);
  let next = freshState(s, doc, version);
  if (moved.steps.length > 0) {
    const tr = next.tr;
    for (const step of moved.steps) tr.step(step);
    next = next.apply(tr);
  }
  const size = next.doc.content.size;
  const anchor = Math.min(state.selection.anchor, size);
  const head = Math.min(state.selection.head, size);
  next = next.apply(
    next.tr.setSelection(TextSelection.between(next.doc.resolve(anchor), next.doc.resolve(head))),
  );
  s.state = next;
  s.confirmedDoc = doc;
  s.reconciles++;
  s.stateReplaced(next, (pos) => moved.rebaser.mapAfter(pos));
  return next;
}
