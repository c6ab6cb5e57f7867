import type { Node, Schema } from 'prosemirror-model';
import { EditorState } from 'prosemirror-state';
import { Decoration, DecorationSet, EditorView } from 'prosemirror-view';
import type { AttributedChange, Span } from './history_api.js';
import type { AuthorColours } from './history_authors.js';
import { linkView } from './link_view.js';

/// What a shown version is: its document, the one it is compared with (null when that could
/// not be read: deleted text is then marked without its words), and the changes between them.
export interface ShownVersion {
  doc: Node;
  before: Node | null;
  changes: readonly AttributedChange[];
}

/// A read-only view of one version of the document, with the text inserted since the version
/// it is compared with underlined in its author's colour, and the deleted text struck through
/// where it was, in its author's colour.
export class VersionView {
  private view: EditorView | null = null;

  constructor(
    private readonly element: HTMLElement,
    private readonly schema: Schema,
    private readonly colours: AuthorColours,
  ) {}

  /// Parses a version's JSON (throws a RangeError when it does not fit the schema).
  parse(json: unknown): Node {
    return this.schema.nodeFromJSON(json);
  }

  /// Shows `version`, replacing what was shown.
  show(version: ShownVersion): void {
    const decorations = decorate(version, this.colours);
    const state = EditorState.create({ doc: version.doc });
    if (this.view) {
      this.view.setProps({ state, decorations: () => decorations });
      return;
    }
    this.view = new EditorView(this.element, {
      state,
      editable: () => false,
      decorations: () => decorations,
      // Links drawn as the live editor draws them (an address that is not a web or mail one
      // is not followed).
      markViews: { link: linkView },
    });
  }

  /// Removes the view (the panel closed).
  clear(): void {
    this.view?.destroy();
    this.view = null;
    this.element.replaceChildren();
  }
}

/// The decorations of `version`'s changes: an inline decoration per inserted span (positions
/// in the shown document, B), a widget with the deleted spans' text at the start of each
/// change.
function decorate(version: ShownVersion, colours: AuthorColours): DecorationSet {
  const { doc, before, changes } = version;
  const found: Decoration[] = [];
  for (let i = 0; i < changes.length; i++) {
    const change = changes[i]!;
    colours.learn(change.inserted);
    colours.learn(change.deleted);
    let pos = change.fromB;
    for (let j = 0; j < change.inserted.length; j++) {
      const span = change.inserted[j]!;
      const end = Math.min(pos + span.length, doc.content.size);
      if (end > pos) {
        const colour = colours.ofSpan(span);
        found.push(
          Decoration.inline(pos, end, {
            class: 'history-inserted',
            style: `background-color: ${colour}33; border-bottom-color: ${colour}`,
            'data-user': span.user ?? '',
            title: describe(span),
          }),
        );
      }
      pos += span.length;
    }
    if (change.deleted.length > 0) {
      found.push(
        Decoration.widget(change.fromB, () => deletedText(change, before, colours), {
          side: -1,
          key: `deleted-${i}-${change.fromA}-${change.toA}`,
          ignoreSelection: true,
        }),
      );
    }
  }
  return DecorationSet.create(doc, found);
}

/// The text a change deleted, one struck-through run per span in its author's colour.
function deletedText(
  change: AttributedChange,
  before: Node | null,
  colours: AuthorColours,
): HTMLElement {
  const wrapper = document.createElement('span');
  wrapper.className = 'history-deleted';
  let pos = change.fromA;
  for (let i = 0; i < change.deleted.length; i++) {
    const span = change.deleted[i]!;
    const end = before ? Math.min(pos + span.length, before.content.size) : pos;
    const run = document.createElement('span');
    run.dataset['user'] = span.user ?? '';
    run.title = `Deleted: ${describe(span)}`;
    run.style.color = colours.ofSpan(span);
    // Block boundaries read as spaces; without the older document, a mark that says "here".
    run.textContent = before && end > pos ? before.textBetween(pos, end, ' ', ' ') : '⌫';
    wrapper.append(run);
    pos += span.length;
  }
  return wrapper;
}

/// Who made a span and when, for its tooltip.
function describe(span: Span): string {
  return `${span.user ?? 'anonymous'}, ${new Date(span.at).toLocaleString()}`;
}
