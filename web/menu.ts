import { setBlockType, toggleMark, wrapIn, lift } from 'prosemirror-commands';
import { redo, undo } from 'prosemirror-history';
import {
  icons,
  menuBar,
  MenuItem,
  type MenuElement,
  type MenuItemSpec,
  type IconSpec,
} from 'prosemirror-menu';
import type { MarkType, NodeType } from 'prosemirror-model';
import { wrapInList } from 'prosemirror-schema-list';
import type { Command, EditorState, Plugin } from 'prosemirror-state';
import { schema } from '../schema/index.js';

/// The menu bar plugin: marks (bold, italic, code, strike, link), block types (paragraph,
/// headings 1–3), wrappers (bullet and ordered list, blockquote, lift out) and undo/redo.
/// Every item has a `title` naming it (and its key), which is also how the browser tests find it.
export function menuPlugin(): Plugin {
  const { strong, em, code, strike, link } = schema.marks;
  const { paragraph, heading, bullet_list, ordered_list, blockquote } = schema.nodes;
  const content: MenuElement[][] = [
    [
      markItem(strong!, 'Bold (Mod-b)', icons['strong']!),
      markItem(em!, 'Italic (Mod-i)', icons['em']!),
      markItem(code!, 'Code (Mod-`)', icons['code']!),
      markItem(strike!, 'Strikethrough (Mod-Shift-s)', {
        text: 'S',
        css: 'text-decoration: line-through; font-weight: bold',
      }),
      linkItem(link!),
    ],
    [
      blockItem(paragraph!, 'Paragraph (Shift-Ctrl-0)', '¶', {}),
      blockItem(heading!, 'Heading 1 (Shift-Ctrl-1)', 'H1', { level: 1 }),
      blockItem(heading!, 'Heading 2 (Shift-Ctrl-2)', 'H2', { level: 2 }),
      blockItem(heading!, 'Heading 3 (Shift-Ctrl-3)', 'H3', { level: 3 }),
    ],
    [
      commandItem('Bullet list (Shift-Ctrl-8)', icons['bulletList']!, wrapInList(bullet_list!)),
      commandItem('Ordered list (Shift-Ctrl-9)', icons['orderedList']!, wrapInList(ordered_list!)),
      commandItem('Blockquote (Ctrl->)', icons['blockquote']!, wrapIn(blockquote!)),
      commandItem('Lift out of enclosing block (Mod-[)', icons['lift']!, lift),
    ],
    [
      commandItem('Undo your last change (Mod-z)', icons['undo']!, undo),
      commandItem('Redo (Mod-y)', icons['redo']!, redo),
    ],
  ];
  return menuBar({ content, floating: true });
}

function commandItem(title: string, icon: IconSpec, command: Command): MenuItem {
  return new MenuItem({
    title,
    icon,
    run: command,
    enable: (state) => command(state),
  });
}

function markItem(type: MarkType, title: string, icon: IconSpec): MenuItem {
  const command = toggleMark(type);
  return new MenuItem({
    title,
    icon,
    run: command,
    enable: (state) => command(state),
    active: (state) => markActive(state, type),
  });
}

function blockItem(
  type: NodeType,
  title: string,
  label: string,
  attrs: Record<string, unknown>,
): MenuItem {
  const command = setBlockType(type, attrs);
  const spec: MenuItemSpec = {
    title,
    icon: { text: label, css: 'font-weight: bold; font-size: 85%' },
    run: command,
    enable: (state) => command(state),
    active: (state) => {
      const { $from, to, node } = state.selection as typeof state.selection & {
        node?: unknown;
      };
      if (node) return false;
      return to <= $from.end() && $from.parent.hasMarkup(type, attrs);
    },
  };
  return new MenuItem(spec);
}

/// Adds a link to the selection (asking for its address), or removes the link there.
function linkItem(type: MarkType): MenuItem {
  return new MenuItem({
    title: 'Add or remove a link',
    icon: icons['link']!,
    active: (state) => markActive(state, type),
    enable: (state) => !state.selection.empty,
    run(state, dispatch, view) {
      if (markActive(state, type)) {
        toggleMark(type)(state, dispatch);
        return;
      }
      const href = window.prompt('Link address', 'https://');
      // Everyone in the document gets this link: refuse `javascript:` and other schemes that
      // would run something when clicked.
      if (!href || !/^(https?:|mailto:|\/|#)/i.test(href.trim())) return;
      toggleMark(type, { href: href.trim(), title: null })(view.state, view.dispatch);
      view.focus();
    },
  });
}

function markActive(state: EditorState, type: MarkType): boolean {
  const { from, $from, to, empty } = state.selection;
  if (empty) return !!type.isInSet(state.storedMarks ?? $from.marks());
  return state.doc.rangeHasMark(from, to, type);
}
