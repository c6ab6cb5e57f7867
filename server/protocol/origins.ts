import { isIP } from 'node:net';

/// Which browser origins may open sockets: a browser sends `Origin` with every websocket
/// handshake and cross-site request, and a page on another site could otherwise open sockets
/// carrying the user's cookies. Clients that send no `Origin` (Node, native apps) are not
/// browsers acting for another site and are admitted; authentication still applies to them.
///
/// The server's own origin, taken from the request's `Host` (the origin a page served by this
/// server has), is admitted: a page elsewhere cannot send our `Host` with its own `Origin`.
/// Except through DNS rebinding: a page on a name the attacker points at this server's address
/// is, to the browser, on the server's own origin; it sends that name as `Host`, and over plain
/// http its same-origin requests (a polling handshake) carry no `Origin` at all. With tokens
/// that gains nothing (the page has none); in open mode (`openMode`) it would reach every
/// document of a server the attacker's site could not reach otherwise (a developer's, on their
/// own machine). There every request must come under a `Host` no other site can have
/// (`hostIsLocal`) or one of `allowed`'s, with an `Origin` or without. `allowed` is the
/// configured list (`ALLOWED_ORIGINS`, exact `scheme://host[:port]` values): the host apps
/// whose pages open sockets here, and the names an open server is served under.
export function originAllowed(
  origin: string | undefined,
  host: string | undefined,
  allowed: readonly string[],
  openMode = false,
): boolean {
  // In open mode the host comes first, whatever the origin: a rebinding page's same-origin
  // requests (a polling handshake, a fetch) carry no Origin at all over plain http.
  if (openMode && host !== undefined && !hostServed(host, allowed)) return false;
  if (origin === undefined) return true;
  if (allowed.includes(origin)) return true;
  if (host === undefined) return false;
  return origin === `http://${host}` || origin === `https://${host}`;
}

/// Whether an open server answers requests under `host`: a local name, or the host of one of
/// `allowed`.
export function hostServed(host: string, allowed: readonly string[]): boolean {
  return hostIsLocal(host) || hostAllowed(host, allowed);
}

/// Whether `host` (a `Host` header) names this server in a way no other site can: an IP
/// address, or `localhost` and the names under it (which browsers resolve to this machine
/// themselves). Any other name may be one an attacker's DNS points here.
export function hostIsLocal(host: string): boolean {
  let name = host.toLowerCase();
  if (name.startsWith('[')) {
    const end = name.indexOf(']');
    return end > 0 && isIP(name.slice(1, end)) === 6;
  }
  const colon = name.lastIndexOf(':');
  if (colon >= 0) name = name.slice(0, colon);
  if (name.endsWith('.')) name = name.slice(0, -1);
  return isIP(name) !== 0 || name === 'localhost' || name.endsWith('.localhost');
}

/// Whether `host` (a `Host` header) is one of the `allowed` origins' hosts.
export function hostAllowed(host: string, allowed: readonly string[]): boolean {
  const name = host.toLowerCase();
  return allowed.some((origin) => new URL(origin).host === name);
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
