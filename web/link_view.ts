import type { Mark } from 'prosemirror-model';
import type { MarkView } from 'prosemirror-view';

// What a link may open. Relative addresses resolve to the page's own http(s) origin.
const openableProtocols = new Set(['http:', 'https:', 'mailto:']);

/// `href` when following it would open an http, https or mailto address, resolved against
/// `base` (the page's address) as the browser resolves a link; null for anything else
/// (`javascript:`, `data:`, `vbscript:`, an unparsable address, a value that is not a string).
///
/// The browser's own URL parser decides, not a pattern: it is the one that will follow the
/// link, so tricks it undoes (`java\tscript:`, leading control characters, upper case) cannot
/// slip between the check and the click.
export function openableHref(href: unknown, base: string): string | null {
  if (typeof href !== 'string') return null;
  let url: URL;
  try {
    url = new URL(href, base);
  } catch {
    return null;
  }
  return openableProtocols.has(url.protocol) ? href : null;
}

/// The editor's view of a link mark (`markViews: { link: linkView }`): an `<a>` that opens
/// its address in a new tab, with `rel="noopener noreferrer"` so the opened page gets neither
/// a handle on this window nor the document's address (its only key) as Referer. A link whose
/// address is not openable (see `openableHref`) is drawn without an `href`, so nothing
/// happens when it is clicked, with a title saying why.
///
/// The server refuses such links in new steps; this covers documents stored before it did,
/// and pages served without the Content-Security-Policy (which would also block a
/// `javascript:` link) by a proxy that drops headers.
export function linkView(mark: Mark): MarkView {
  const dom = document.createElement('a');
  const href = openableHref(mark.attrs['href'], document.baseURI);
  const title: unknown = mark.attrs['title'];
  if (href !== null) {
    dom.href = href;
    dom.target = '_blank';
    dom.rel = 'noopener noreferrer';
    if (typeof title === 'string') dom.title = title;
  } else {
    dom.className = 'inert-link';
    dom.title = 'This link is disabled: its address is not a web or mail address';
  }
  return { dom };
}
