import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { docIdPattern, errorBody, type ErrorCode } from '../schema/index.js';
import { loadFailureCode } from './guard.js';
import type { Rooms } from './rooms.js';

/// What the HTTP routes need to know about the server around them.
export interface HttpContext {
  rooms: Rooms;
  storeKind: string;
  draining: () => boolean;
  sockets: () => number;
}

const statusOf: Partial<Record<ErrorCode, number>> = {
  'bad-request': 400,
  'bad-document-id': 400,
  'not-found': 404,
  unavailable: 503,
  'shutting-down': 503,
  corrupt: 500,
  internal: 500,
};

/// The security headers of every response. Documents are written by people the reader does
/// not necessarily trust, so the pages refuse to run anything but our own scripts:
/// - `script-src 'self'`: no inline script, no eval; a stored `<img onerror>` or `javascript:`
///   URL that got past the server's checks still cannot run;
/// - `style-src 'self'` plus inline style *attributes*: ProseMirror and the presence cursors
///   set `style` on elements; a style attribute cannot run script;
/// - `img-src` any http(s) or data: image, because documents hold images from anywhere (the
///   server already restricts their URLs to those schemes);
/// - `connect-src 'self'`: Socket.io to the same origin only; `object-src`, `base-uri`,
///   `frame-ancestors 'none'` and `form-action 'self'` shut the rest.
/// `upgrade-insecure-requests` and HSTS are left off: the standalone server is often run on
/// plain http on localhost, where they would break it (HSTS for `localhost` would even stick
/// to every other local app); whoever terminates TLS in front of it sets HSTS there.
/// `Referrer-Policy: no-referrer` keeps document addresses (their only key in open mode) out
/// of other sites' logs.
const securityHeaders = helmet({
  contentSecurityPolicy: {
    useDefaults: false,
    directives: {
      defaultSrc: ["'self'"],
      scriptSrc: ["'self'"],
      styleSrc: ["'self'"],
      styleSrcAttr: ["'unsafe-inline'"],
      imgSrc: ["'self'", 'https:', 'http:', 'data:'],
      connectSrc: ["'self'"],
      fontSrc: ["'self'"],
      objectSrc: ["'none'"],
      baseUri: ["'none'"],
      frameAncestors: ["'none'"],
      formAction: ["'self'"],
      scriptSrcAttr: ["'none'"],
    },
  },
  strictTransportSecurity: false,
  referrerPolicy: { policy: 'no-referrer' },
  // Images in documents come from other origins and do not opt in to embedding.
  crossOriginEmbedderPolicy: false,
});

/// Sends a coded error with the HTTP status that matches it.
export function sendError(res: Response, code: ErrorCode, message?: string): void {
  res.status(statusOf[code] ?? 500).json(errorBody(code, message));
}

/// The express application: `GET /healthz` and `GET /docs/:id`. Other parts (metrics, the web
/// editor) add their routers to it.
export function createHttpApp(context: HttpContext): Express {
  const app = express();
  app.disable('x-powered-by');
  // First, so every answer (pages, assets, JSON, 404s, errors) carries the headers.
  app.use(securityHeaders);

  app.get('/healthz', (_req, res) => {
    if (context.draining()) return sendError(res, 'shutting-down');
    res.json({
      ok: true,
      store: context.storeKind,
      documents: context.rooms.size,
      sockets: context.sockets(),
    });
  });

  app.get('/docs/:id', async (req, res) => {
    const id = req.params.id;
    if (!docIdPattern.test(id)) return sendError(res, 'bad-document-id');
    let room;
    try {
      room = await context.rooms.get(id, false);
    } catch (err) {
      return sendError(res, loadFailureCode(err));
    }
    if (!room) return sendError(res, 'not-found');
    res.json({ version: room.publishedVersion, epoch: room.epoch, doc: room.publishedJSON() });
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
