/// Which browser origins may open sockets: a browser sends `Origin` with every websocket
/// handshake and cross-site request, and a page on another site could otherwise open sockets
/// carrying the user's cookies. Clients that send no `Origin` (Node, native apps) are not
/// browsers acting for another site and are admitted; authentication still applies to them.
///
/// The server's own origin, taken from the request's `Host` (the origin a page served by this
/// server has), is always admitted: a page elsewhere cannot send our `Host` with its own
/// `Origin`. `allowed` adds the configured list (`ALLOWED_ORIGINS`, exact
/// `scheme://host[:port]` values): the host apps whose pages open sockets here.
export function originAllowed(
  origin: string | undefined,
  host: string | undefined,
  allowed: readonly string[],
): boolean {
  if (origin === undefined) return true;
  if (allowed.includes(origin)) return true;
  if (host === undefined) return false;
  return origin === `http://${host}` || origin === `https://${host}`;
}

/// Parses `ALLOWED_ORIGINS`: a comma list of origins (`https://app.example.com`). Returns the
/// list; throws a TypeError naming the first entry that is not an origin.
export function parseOrigins(text: string): string[] {
  const origins: string[] = [];
  for (const part of text.split(',')) {
    const entry = part.trim();
    if (entry === '') continue;
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      throw new TypeError(`not an origin: ${entry}`);
    }
    if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.origin !== entry) {
      throw new TypeError(`not an origin (scheme://host[:port], no path): ${entry}`);
    }
    origins.push(entry);
  }
  return origins;
}
