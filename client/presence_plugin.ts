import { getVersion, sendableSteps } from 'prosemirror-collab';
import { Plugin, PluginKey, type EditorState, type Transaction } from 'prosemirror-state';
import { Mapping, type StepMap } from 'prosemirror-transform';
import { Decoration, DecorationSet } from 'prosemirror-view';
import { presenceColorPattern, type PresenceBroadcast } from '../schema/events.js';

/// Another editor's selection, in this editor's document positions.
export interface RemoteCursor {
  clientID: string;
  name: string;
  color: string;
  anchor: number;
  head: number;
}

/// What a presence transaction tells the plugin (as the meta of `presenceKey`).
export type PresenceAction =
  | { type: 'update'; presences: readonly PresenceBroadcast[] }
  | { type: 'place'; cursors: readonly RemoteCursor[] }
  | { type: 'leave'; clientID: string }
  | { type: 'clear' };

/// How many confirmed versions of step maps the plugin keeps to map a presence that was sent at
/// an older version than ours. Older ones are clamped instead, and corrected by the sender's
/// next update.
const versionLogLength = 1000;

/// The plugin's state. Replaced, never changed in place.
export class PresenceState {
  constructor(
    /// Cursors by client id, mapped through every transaction.
    readonly cursors: ReadonlyMap<string, RemoteCursor>,
    /// Presences sent at a version this editor has not reached yet: placed once it has.
    /// (Fresh ones pass through here too, and are placed in the same transaction.)
    readonly ahead: ReadonlyMap<string, PresenceBroadcast>,
    /// `maps[i]` maps the document at version `logEnd - maps.length + i` to the next version.
    readonly maps: readonly StepMap[],
    readonly logEnd: number,
    readonly decorations: DecorationSet,
  ) {}
}

/// The key of the presence plugin's state and of its transactions' meta.
export const presenceKey = new PluginKey<PresenceState>('scriptorium-presence');

/// The remote cursors shown in `state`, in no particular order (empty without the plugin).
export function remoteCursors(state: EditorState): RemoteCursor[] {
  const plugin = presenceKey.getState(state);
  return plugin ? [...plugin.cursors.values()] : [];
}

/// The plugin behind `Presence.plugin`, usable on its own: feed it presences with transactions
/// whose `presenceKey` meta is a `PresenceAction`.
export function presencePlugin(): Plugin<PresenceState> {
  return new Plugin<PresenceState>({
    key: presenceKey,
    state: {
      // The log starts at the first transaction that confirms steps (see `apply`).
      init: () => new PresenceState(new Map(), new Map(), [], -1, DecorationSet.empty),
      apply(tr, value, oldState, newState) {
        const action = tr.getMeta(presenceKey) as PresenceAction | undefined;
        const before = getVersion(oldState);
        const after = getVersion(newState);
        if (!action && !tr.docChanged && before === after) return value;

        let maps = value.maps;
        let logEnd = value.logEnd;
        if (after > before) {
          if (logEnd !== before) {
            maps = [];
            logEnd = before;
          }
          maps = maps.concat(confirmedMaps(tr, oldState, after - before));
          if (maps.length > versionLogLength) maps = maps.slice(maps.length - versionLogLength);
          logEnd = after;
        }

        const cursors = new Map(value.cursors);
        const ahead = new Map(value.ahead);
        if (tr.docChanged) {
          for (const [id, cursor] of cursors) {
            cursors.set(id, {
              ...cursor,
              anchor: tr.mapping.map(cursor.anchor, 1),
              head: tr.mapping.map(cursor.head, 1),
            });
          }
        }
        if (action?.type === 'update') {
          for (const presence of action.presences) {
            cursors.delete(presence.clientID);
            ahead.set(presence.clientID, presence);
          }
        } else if (action?.type === 'place') {
          for (const cursor of action.cursors) {
            cursors.set(cursor.clientID, cursor);
            ahead.delete(cursor.clientID);
          }
        } else if (action?.type === 'leave') {
          cursors.delete(action.clientID);
          ahead.delete(action.clientID);
        } else if (action?.type === 'clear') {
          cursors.clear();
          ahead.clear();
        }
        for (const [id, presence] of ahead) {
          if (presence.version > after) continue;
          cursors.set(id, placeCursor(presence, newState, maps, logEnd));
          ahead.delete(id);
        }
        return new PresenceState(cursors, ahead, maps, logEnd, decorate(newState, cursors));
      },
    },
    props: {
      decorations: (state) => presenceKey.getState(state)?.decorations ?? null,
    },
  });
}

/// The maps of the `count` steps a transaction confirmed, in the authority's order. Our own
/// confirmed steps are the first unconfirmed ones of the old state (the transaction carries no
/// step for them); remote steps follow the inverted unconfirmed steps in a transaction built by
/// `receiveTransaction`, whose `rebased` meta says how many those are.
function confirmedMaps(tr: Transaction, oldState: EditorState, count: number): StepMap[] {
  const unconfirmed = sendableSteps(oldState)?.steps ?? [];
  const rebased = tr.getMeta('rebased') as number | undefined;
  const ours = rebased === undefined ? count : unconfirmed.length - rebased;
  const result: StepMap[] = [];
  for (let i = 0; i < ours && i < unconfirmed.length; i++) result.push(unconfirmed[i]!.getMap());
  if (rebased !== undefined) {
    const remote = tr.mapping.maps.slice(rebased, rebased + count - ours);
    for (const map of remote) result.push(map);
  }
  return result;
}

/// Maps a presence's positions from its version to this editor's document.
function placeCursor(
  presence: PresenceBroadcast,
  state: EditorState,
  maps: readonly StepMap[],
  logEnd: number,
): RemoteCursor {
  const mapping = new Mapping();
  const logStart = logEnd - maps.length;
  if (presence.version >= logStart && logEnd >= 0) {
    for (let v = presence.version; v < logEnd; v++) mapping.appendMap(maps[v - logStart]!);
  }
  const local = sendableSteps(state);
  if (local) for (const step of local.steps) mapping.appendMap(step.getMap());
  const size = state.doc.content.size;
  const clamp = (pos: number) => Math.max(0, Math.min(size, mapping.map(pos, 1)));
  return {
    clientID: presence.clientID,
    name: presence.name,
    color: presence.color,
    anchor: clamp(presence.anchor),
    head: clamp(presence.head),
  };
}

function decorate(state: EditorState, cursors: ReadonlyMap<string, RemoteCursor>): DecorationSet {
  if (cursors.size === 0) return DecorationSet.empty;
  const decorations: Decoration[] = [];
  for (const cursor of cursors.values()) {
    const from = Math.min(cursor.anchor, cursor.head);
    const to = Math.max(cursor.anchor, cursor.head);
    if (from < to) {
      decorations.push(
        Decoration.inline(from, to, {
          class: 'scriptorium-selection',
          style: `background-color: ${cursor.color}33`,
        }),
      );
    }
    decorations.push(
      Decoration.widget(cursor.head, () => caret(cursor), {
        key: `${cursor.clientID}|${cursor.name}|${cursor.color}`,
        side: 1,
      }),
    );
  }
  return DecorationSet.create(state.doc, decorations);
}

/// The caret of a remote cursor: a coloured bar with the editor's name above it.
function caret(cursor: RemoteCursor): HTMLElement {
  const bar = document.createElement('span');
  bar.className = 'scriptorium-caret';
  bar.dataset['clientId'] = cursor.clientID;
  bar.style.borderColor = cursor.color;
  const label = document.createElement('span');
  label.className = 'scriptorium-caret-label';
  label.style.backgroundColor = cursor.color;
  label.textContent = cursor.name;
  bar.append(label);
  return bar;
}

/// Whether a received presence can be drawn safely (its colour goes into a style attribute).
export function isDisplayable(presence: PresenceBroadcast): boolean {
  return (
    typeof presence.clientID === 'string' &&
    typeof presence.name === 'string' &&
    presenceColorPattern.test(presence.color) &&
    Number.isInteger(presence.version) &&
    Number.isInteger(presence.anchor) &&
    Number.isInteger(presence.head)
  );
}
