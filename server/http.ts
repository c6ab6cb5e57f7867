import express, { type Express, type Response } from 'express';
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
