import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { MetricsWindow } from '../../metrics/index.js';
import { docIdPattern } from '../../schema/events.js';
import { CodedError, type Authenticate } from '../index.js';
import { createTokenVerifier, type Access, type TokenVerifier } from '../protocol/auth.js';
import { hostServed, originAllowed } from '../protocol/origins.js';
import type { Config } from '../config.js';
import { sendError } from './http.js';

// The standalone server's access control: JWTs for sockets and `GET /docs/:id`, the browser
// origins admitted, the metrics token, and document ids kept out of metrics output.

/// The token verifier the configuration asks for, or null in open mode.
export function verifierFor(config: Readonly<Config>): TokenVerifier | null {
  if (config.authSecret === null && config.authPublicKey === null) return null;
  return createTokenVerifier({
    secret: config.authSecret,
    publicKey: config.authPublicKey,
    audience: config.authAudience,
    issuer: config.authIssuer,
  });
}

/// The `authenticate` hook of the standalone server: the handshake's `auth.token` is a JWT
/// whose `sub` is the user, `doc` the documents it covers (an id, `prefix*` or `*`), `access`
/// `read` or `write`, and `exp` when it stops being valid.
export function tokenAuthenticate(verifier: TokenVerifier): Authenticate {
  return async ({ auth, docId }) => {
    const outcome = await verifier.verify(auth['token'], docId);
    if (!outcome.ok) throw new CodedError(outcome.code, outcome.message);
    const { user, access, expiresAt } = outcome.grant;
    return { user, access, expiresAt };
  };
}

/// Requires `Authorization: Bearer <token>` with read access to the document of `GET
/// /docs/:id`: 401 `unauthorized` without a good token, 403 `forbidden` out of its scope.
export function documentReadGuard(verifier: TokenVerifier): RequestHandler {
  return documentGuard(verifier, 'read');
}

/// Requires `Authorization: Bearer <token>` granting `need` on the document of a
/// `/docs/:id…` route: 401 `unauthorized` without a good token, 403 `forbidden` out of its
/// scope or with read access where write is needed. Leaves the token's `sub` in
/// `res.locals.user` for the route (the acting user).
export function documentGuard(verifier: TokenVerifier, need: Access): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const id = req.params['id'];
    // The route answers malformed ids itself.
    if (typeof id !== 'string' || !docIdPattern.test(id)) return next();
    verifier.verify(bearer(req), id).then((outcome) => {
      if (outcome.ok && (need === 'read' || outcome.grant.access === 'write')) {
        res.locals['user'] = outcome.grant.user;
        return next();
      }
      if (outcome.ok) return sendError(res, 'forbidden', 'This token grants read access only');
      if (outcome.code === 'unauthorized') res.set('WWW-Authenticate', 'Bearer');
      sendError(res, outcome.code, outcome.message);
    }, next);
  };
}

/// Requires `Authorization: Bearer <token>` equal to `token` (compared in constant time).
export function metricsGuard(token: string): RequestHandler {
  const expected = createHash('sha256').update(token).digest();
  return (req: Request, res: Response, next: NextFunction) => {
    const given = createHash('sha256')
      .update(bearer(req) ?? '')
      .digest();
    if (timingSafeEqual(given, expected)) return next();
    res.set('WWW-Authenticate', 'Bearer');
    sendError(res, 'unauthorized', 'A metrics token is needed (Authorization: Bearer …)');
  };
}

/// The token of an `Authorization: Bearer …` header, or null.
function bearer(req: Request): string | null {
  const header = req.get('authorization');
  const match = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  return match ? match[1]! : null;
}

/// Socket.io's `allowRequest`: refuses a browser handshake from an origin that is neither the
/// server's own nor in `allowed` (a page elsewhere must not open sockets with the user's
/// cookies); clients that send no `Origin` are not browsers and pass. In `openMode`, the
/// server's own origin counts only under a local `Host` (see `originAllowed`).
export function originCheck(
  allowed: readonly string[],
  openMode = false,
): (req: IncomingMessage, callback: (err: string | null | undefined, ok: boolean) => void) => void {
  return (req, callback) => {
    const ok = originAllowed(req.headers.origin, req.headers.host, allowed, openMode);
    callback(ok ? null : 'origin not allowed', ok);
  };
}

/// The read guard of `GET /docs/:id` in open mode: a request under a `Host` that is neither
/// local nor one of `allowed`'s is refused `forbidden`, whatever else it carries. A page that
/// DNS rebinding put on this server's address sees it as its own origin, and its same-origin
/// `fetch` over plain http sends neither `Origin` nor `Sec-Fetch-Site`: it could read every
/// document otherwise. A client elsewhere that reaches an open server under another name (a
/// service name in a container network) has that name listed in `ALLOWED_ORIGINS`.
export function openReadGuard(allowed: readonly string[]): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const host = req.headers.host;
    if (host === undefined || hostServed(host, allowed)) return next();
    sendError(
      res,
      'forbidden',
      `An open server answers only under a local host name or one of ALLOWED_ORIGINS, not ${host}`,
    );
  };
}

/// The write guard of the `/docs/:id…` routes that change a document in open mode: the read
/// guard's `Host` check, and a browser's request only from an origin that may open sockets
/// here (`originAllowed`). Together with the JSON body those routes require (which a form or
/// a plain cross-site `fetch` cannot send without a CORS preflight we never answer), a page
/// elsewhere cannot make a visitor's browser restore or revert a document. The acting user is
/// nobody (null).
export function openWriteGuard(allowed: readonly string[]): RequestHandler {
  const hostCheck = openReadGuard(allowed);
  return (req: Request, res: Response, next: NextFunction) => {
    hostCheck(req, res, () => {
      if (!originAllowed(req.headers.origin, req.headers.host, allowed, true)) {
        return sendError(res, 'forbidden', 'Requests from this origin may not change documents');
      }
      res.locals['user'] = null;
      next();
    });
  };
}

/// Replaces document ids in metrics windows by labels that stay the same while the process
/// runs (so a busy document can be followed on the dashboard) but cannot be turned back into
/// ids: the id is the only key to a document, and metrics are read by more people than
/// documents are.
export function docIdRedactor(): (window: MetricsWindow) => MetricsWindow {
  const key = randomBytes(32);
  const labels = new Map<string, string>();
  const label = (id: string): string => {
    let found = labels.get(id);
    if (found === undefined) {
      found = `doc-${createHash('sha256').update(key).update(id).digest('hex').slice(0, 12)}`;
      // Bounded: labels are cheap to recompute.
      if (labels.size > 10_000) labels.clear();
      labels.set(id, found);
    }
    return found;
  };
  return (window) => ({
    ...window,
    topDocuments: window.topDocuments.map((doc) => ({ ...doc, documentId: label(doc.documentId) })),
  });
}
