import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { docIdPattern, errorBody, type ErrorCode } from '../schema/index.js';
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
};

/// Sends a coded error with the HTTP status that matches it.
export function sendError(res: Response, code: ErrorCode, message?: string): void {
  res.status(statusOf[code] ?? 500).json(errorBody(code, message));
}

/// The express application: `GET /healthz` and `GET /docs/:id`. Other parts (metrics, the web
/// editor) add their routers to it.
export function createHttpApp(context: HttpContext): Express {
  const app = express();
  app.disable('x-powered-by');

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
    } catch {
      return sendError(res, 'unavailable');
    }
    if (!room) return sendError(res, 'not-found');
    res.json({
      version: room.publishedVersion,
      epoch: room.epoch,
      doc: room.publishedDoc.toJSON(),
    });
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
