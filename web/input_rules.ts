import {
  ellipsis,
  emDash,
  inputRules,
  smartQuotes,
  textblockTypeInputRule,
  wrappingInputRule,
} from 'prosemirror-inputrules';
import type { Plugin } from 'prosemirror-state';
import { schema } from '../schema/index.js';

/// Markdown-like shortcuts typed at the start of a block: `# `–`### ` for headings, `> ` for a
/// blockquote, `* ` or `- ` for a bullet list, `1. ` for an ordered list; plus smart quotes,
/// `...` → … and `--` → —. Backspace right after a rule undoes it (see the keymap).
export function inputRulesPlugin(): Plugin {
  const { heading, blockquote, bullet_list, ordered_list } = schema.nodes;
  return inputRules({
    rules: [
      ...smartQuotes,
      ellipsis,
      emDash,
      wrappingInputRule(/^\s*>\s$/, blockquote!),
      // At most nine digits: the schema's largest order is 999 999 999, and a
      // longer number made a list the schema refuses, which threw in the page.
      wrappingInputRule(
        /^(\d{1,9})\.\s$/,
        ordered_list!,
        (match) => ({ order: Number(match[1]) }),
        (match, node) => node.childCount + (node.attrs['order'] as number) === Number(match[1]),
      ),
      wrappingInputRule(/^\s*([-+*])\s$/, bullet_list!),
      textblockTypeInputRule(/^(#{1,3})\s$/, heading!, (match) => ({ level: match[1]!.length })),
    ],
  });
}
