import {
  baseKeymap,
  chainCommands,
  exitCode,
  joinDown,
  joinUp,
  lift,
  selectParentNode,
  setBlockType,
  toggleMark,
  wrapIn,
} from 'prosemirror-commands';
import { redo, undo } from 'prosemirror-history';
import { undoInputRule } from 'prosemirror-inputrules';
import { keymap } from 'prosemirror-keymap';
import { liftListItem, sinkListItem, splitListItem, wrapInList } from 'prosemirror-schema-list';
import type { Command, Plugin } from 'prosemirror-state';
import { schema } from '../schema/index.js';

const mac = typeof navigator !== 'undefined' && /Mac|iP(hone|[oa]d)/.test(navigator.platform);

/// The editor's keymaps, most specific first: marks, block types, lists and history (as in
/// prosemirror-example-setup), then prosemirror-commands' base keymap.
export function keymapPlugins(): Plugin[] {
  const { strong, em, code, strike } = schema.marks;
  const { paragraph, heading, bullet_list, ordered_list, blockquote, list_item, hard_break } =
    schema.nodes;
  const keys: Record<string, Command> = {
    'Mod-z': undo,
    'Shift-Mod-z': redo,
    Backspace: undoInputRule,
    'Alt-ArrowUp': joinUp,
    'Alt-ArrowDown': joinDown,
    'Mod-BracketLeft': lift,
    Escape: selectParentNode,
    'Mod-b': toggleMark(strong!),
    'Mod-B': toggleMark(strong!),
    'Mod-i': toggleMark(em!),
    'Mod-I': toggleMark(em!),
    'Mod-`': toggleMark(code!),
    'Mod-Shift-s': toggleMark(strike!),
    'Shift-Ctrl-8': wrapInList(bullet_list!),
    'Shift-Ctrl-9': wrapInList(ordered_list!),
    'Ctrl->': wrapIn(blockquote!),
    Enter: splitListItem(list_item!),
    'Mod-[': liftListItem(list_item!),
    'Mod-]': sinkListItem(list_item!),
    'Shift-Ctrl-0': setBlockType(paragraph!),
  };
  if (!mac) keys['Mod-y'] = redo;
  const br: Command = (state, dispatch) => {
    dispatch?.(state.tr.replaceSelectionWith(hard_break!.create()).scrollIntoView());
    return true;
  };
  const hardBreak = chainCommands(exitCode, br);
  keys['Mod-Enter'] = hardBreak;
  keys['Shift-Enter'] = hardBreak;
  if (mac) keys['Ctrl-Enter'] = hardBreak;
  for (let level = 1; level <= 6; level++) {
    keys[`Shift-Ctrl-${level}`] = setBlockType(heading!, { level });
  }
  return [keymap(keys), keymap(baseKeymap)];
}
