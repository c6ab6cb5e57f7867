import express, {
  type Express,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import helmet from 'helmet';
import type { CodedError, Collab } from '../index.js';
import { docIdPattern, errorBody, isErrorCode, type ErrorCode } from '../../schema/protocol.js';

/// What the HTTP routes need to know about the server around them.
export interface HttpContext {
  /// The authority the routes read documents, counts and readiness from.
  collab: Collab;
  storeKind: string;
  /// This node's id: every answer names it in `x-scriptorium-node`, so that an operator (and a
  /// test) can see which node behind a gateway served a request.
  nodeId: string;
  /// True once the server is shutting down: `/healthz` answers `shutting-down` from then on.
  draining: () => boolean;
  /// Whether `/healthz` shows the documents and sockets counts: not when a metrics token
  /// hides the same numbers on `/metrics` (`/healthz` is public, through the gateway too).
  healthCounts: boolean;
  /// Checks a `GET /docs/:id` request before it is answered (a bearer token); none: open.
  readGuard?: RequestHandler | null;
}

const statusOf: Partial<Record<ErrorCode, number>> = {
  'bad-request': 400,
  'bad-document-id': 400,
  'not-found': 404,
  unavailable: 503,
  'shutting-down': 503,
  corrupt: 500,
  internal: 500,
  'rate-limited': 429,
  'too-many-documents': 503,
  moved: 503,
  unauthorized: 401,
  forbidden: 403,
  'history-gone': 410,
  'too-large': 413,
  'too-deep': 413,
};

/// The security headers of every answer, helmet's defaults with these choices:
///
/// Documents are written by people their readers do not necessarily trust, so the pages run
/// nothing but the scripts we serve: a `javascript:` URL, an `onerror` attribute or a `<script>`
/// that got into the page by any route is refused by the browser, which reports it as a
/// `securitypolicyviolation`. Our pages keep no inline script or `<style>`, so neither script
/// nor style needs 'unsafe-inline'. (Inline styles set from script, such as the remote carets'
/// colours, go through the CSSOM, which the policy does not govern.)
///
/// - `img-src` takes any http(s) or data: image: documents hold images from anywhere, and the
///   server restricts their URLs to those schemes;
/// - `connect-src 'self'`: Socket.io (polling and WebSocket) and the dashboard's fetches go to
///   the origin that served the page, never elsewhere;
/// - `object-src`, `base-uri` and `form-action 'none'` (we have no plugins, `<base>` or forms)
///   and `frame-ancestors 'none'` (with `X-Frame-Options: DENY` for older browsers) shut what
///   is left;
/// - `Referrer-Policy: no-referrer`: a document's address is its only key, and images from
///   other hosts and followed links would otherwise carry it in their Referer header.
///
/// HSTS and `upgrade-insecure-requests` are left out: the standalone server speaks plain http
/// and is often run on localhost or a LAN address, where the upgrade would break every asset
/// and HSTS (kept per host, whatever the port) would force https on every other local app for
/// a year. TLS, when there is any, ends at a proxy in front of us, and that proxy knows whether
/// the whole host may be pinned to https: set HSTS there. `Cross-Origin-Embedder-Policy` stays
/// off too, because images from other hosts do not opt in to being embedded.
const securityHeaders = helmet({
  contentSecurityPolicy: {
    useDefaults: false,
    directives: {
      defaultSrc: ["'self'"],
      scriptSrc: ["'self'"],
      scriptSrcAttr: ["'none'"],
      styleSrc: ["'self'"],
      imgSrc: ["'self'", 'https:', 'http:', 'data:'],
      connectSrc: ["'self'"],
      objectSrc: ["'none'"],
      baseUri: ["'none'"],
      formAction: ["'none'"],
      frameAncestors: ["'none'"],
    },
  },
  strictTransportSecurity: false,
  crossOriginEmbedderPolicy: false,
  referrerPolicy: { policy: 'no-referrer' },
  xFrameOptions: { action: 'deny' },
});

/// Sends a coded error with the HTTP status that matches it (and `retryAfterMs` when given).
export function sendError(
  res: Response,
  code: ErrorCode,
  message?: string,
  retryAfterMs?: number,
): void {
  res.status(statusOf[code] ?? 500).json(errorBody(code, message, retryAfterMs));
}

/// The express application: `GET /healthz` and `GET /docs/:id`. Other parts (metrics, the web
/// editor) add their routers to it. Every answer it makes, whatever router makes it (404s and
/// error answers included), carries the security headers described at `securityHeaders`.
export function createHttpApp(context: HttpContext): Express {
  const app = express();
  app.disable('x-powered-by');
  // First of all middleware: a router added later, or an error before any route, still
  // answers with the headers.
  app.use(securityHeaders);
  app.use((_req: Request, res: Response, next: NextFunction) => {
    res.set('x-scriptorium-node', context.nodeId);
    next();
  });

  const { collab } = context;
  app.get('/healthz', (_req, res) => {
    if (context.draining()) return sendError(res, 'shutting-down');
    if (!context.healthCounts) return res.json({ ok: true, store: context.storeKind });
    const stats = collab.stats();
    res.json({
      ok: true,
      store: context.storeKind,
      documents: stats.documents,
      sockets: stats.editors,
    });
  });

  // Readiness, for load balancers and deploys: unlike /healthz (the process runs), it checks
  // what serving needs.
  app.get('/readyz', async (_req, res) => {
    const health = await collab.health();
    if (!health.ready) {
      return sendError(
        res,
        health.draining ? 'shutting-down' : 'unavailable',
        health.reason ?? undefined,
      );
    }
    res.json({ ok: true });
  });

  const guards = context.readGuard ? [context.readGuard] : [];
  app.get('/docs/:id', ...guards, async (req: Request, res: Response) => {
    const id = req.params['id'];
    if (typeof id !== 'string' || !docIdPattern.test(id)) {
      return sendError(res, 'bad-document-id');
    }
    let found;
    try {
      found = await collab.document(id);
    } catch (err) {
      // A `CodedError`; `moved` knows when the document is likely served elsewhere.
      const { code, retryAfterMs } = err as CodedError;
      return sendError(res, isErrorCode(code) ? code : 'internal', undefined, retryAfterMs);
    }
    if (!found) return sendError(res, 'not-found');
    res.json({ version: found.version, epoch: found.epoch, doc: found.doc.toJSON() });
  });

  return app;
}

/// Ends the route list: any other path gets a coded 404, and an error thrown by a route (or a
/// malformed request express refuses) a coded JSON answer instead of express's HTML page.
/// Mount it after every router.
export function finishHttpApp(app: Express): void {
  app.use((req: Request, res: Response) => {
    sendError(res, 'not-found', `No route for ${req.method} ${req.path}`);
  });
  // Express recognises an error handler by its four parameters.
  app.use((err: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) return next(err);
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return sendError(res, 'bad-request', (err as Error).message);
    }
    sendError(res, 'unavailable', 'The server failed to answer this request');
  });
}
