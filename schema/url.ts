/// Which URLs a document may hold. Links and images are rendered by every editor of the
/// document, so a URL that runs script when clicked or loaded (`javascript:`, `vbscript:`,
/// `data:text/html`) would be stored cross-site scripting. Only these pass:
/// - links: `http:`, `https:`, `mailto:` and relative URLs (no scheme);
/// - images: `http:`, `https:`, relative URLs and `data:image/…` of a raster type (not SVG,
///   which is a document that may carry script when opened on its own).
///
/// Browsers ignore ASCII tab and newline anywhere in a URL and strip leading control
/// characters and spaces (`java\tscript:` is `javascript:`), so any control character makes a
/// URL unsafe rather than being cleaned, and so does white space at either end: an honest
/// editor never produces them.

const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/;
const control = /[\u0000-\u001f\u007f-\u009f]/;
const linkSchemes = new Set(['http', 'https', 'mailto']);
const imageSchemes = new Set(['http', 'https']);
const rasterData = /^data:image\/(?:png|gif|jpeg|webp|avif|bmp);base64,[A-Za-z0-9+/=]*$/;

/// True when `url` may be a link's `href`.
export function isSafeLinkUrl(url: string): boolean {
  if (!isClean(url)) return false;
  const match = scheme.exec(url);
  return match === null || linkSchemes.has(match[1]!.toLowerCase());
}

/// True when `url` may be an image's `src`.
export function isSafeImageUrl(url: string): boolean {
  if (!isClean(url)) return false;
  const match = scheme.exec(url);
  if (match === null) return true;
  const name = match[1]!.toLowerCase();
  return imageSchemes.has(name) || (name === 'data' && rasterData.test(url));
}

function isClean(url: string): boolean {
  return url.length > 0 && url === url.trim() && !control.test(url);
}
