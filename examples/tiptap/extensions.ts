import { getSchema } from '@tiptap/core';
import Link from '@tiptap/extension-link';
import type { DOMOutputSpec } from '@tiptap/pm/model';
import StarterKit from '@tiptap/starter-kit';

/// What every link of the example is rendered with, whatever the document holds.
const linkRel = 'noopener noreferrer nofollow';

/// Tiptap's Link with `href` and `title` as its only attributes, rendered with `target="_blank"`
/// and `rel` {@link linkRel}. Tiptap's own keeps `rel`, `target` and `class` in the document and
/// renders them as stored, and any collaborator writes them in a step (the server checks steps
/// against this schema only): `rel="opener"` with `target="_blank"` gave the linked page
/// `window.opener` wherever the browser follows the link (a read-only page, a middle click), and
/// it could send the editor's tab elsewhere (reverse tabnabbing); a `target` naming a window or
/// `_top` navigates that one. Without the attributes in the schema, the server and every editor
/// drop them from the steps they read (ProseMirror keeps only the attributes a mark declares),
/// so they are never stored; the fixed values in `renderHTML` keep that so for any attribute
/// added back later.
///
/// Links do not open on click either: Tiptap opens them with `window.open(href, target)`,
/// without `noopener`, so a page linked by any collaborator would get `window.opener` too.
const SafeLink = Link.extend({
  addAttributes() {
    return {
      href: { default: null, parseHTML: (element) => element.getAttribute('href') },
      title: { default: null },
    };
  },
  renderHTML(props): DOMOutputSpec {
    const [tag, attrs, hole] = this.parent!(props) as [string, Record<string, unknown>, 0];
    return [tag, { ...attrs, target: '_blank', rel: linkRel }, hole];
  },
}).configure({ openOnClick: false });

/// The editor's extensions, shared by the page and the server: the server checks every step
/// against the schema they make, so both must use the same list.
///
/// StarterKit's trailing-node extension is off: it appends a paragraph whenever the document
/// ends with something else, and with several editors each would append its own. Its Link is
/// replaced by `SafeLink`.
export const extensions = [StarterKit.configure({ trailingNode: false, link: false }), SafeLink];

/// The ProseMirror schema of those extensions: what `createCollab` validates steps against.
export const schema = getSchema(extensions);
