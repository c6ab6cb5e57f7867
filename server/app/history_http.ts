import express, {
  Router,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import type { CodedError, Collab } from '../index.js';
import { docIdPattern, isErrorCode } from '../../schema/protocol.js';
import { maxUserLength } from '../protocol/auth.js';
import { sendError } from './http.js';

// The history routes of the standalone server (docs/history.md): a thin layer over the
// collab's history API that checks access, validates every input into a coded 400 before the
// collab sees it, and answers the collab's refusals with their codes.

/// The part of the collab the history routes call.
export type HistoryCollab = Pick<
  Collab,
  'history' | 'documentAt' | 'changes' | 'nameVersion' | 'restore' | 'revert'
>;

/// Who may use the routes: `read` guards the three reads, `write` naming, restore and revert.
/// A write guard leaves the acting user (a token's `sub`, null in open mode) in
/// `res.locals.user`. Null: no guard.
export interface HistoryGuards {
  read: RequestHandler | null;
  write: RequestHandler | null;
}

/// The longest version name accepted, in UTF-16 code units.
export const maxVersionNameLength = 200;
/// The most entries one `GET /docs/:id/history` page may ask for.
export const maxHistoryLimit = 1000;
/// Request bodies are a few small fields: anything larger is refused `too-large` unread.
const maxBodyBytes = 4096;

/// A refusal of the request's input: answered `bad-request` with `message`.
class BadInput extends Error {}

/// The router of `GET /docs/:id/history`, `GET /docs/:id/versions/:version`,
/// `GET /docs/:id/changes`, `POST /docs/:id/versions/:version/name`, `POST /docs/:id/restore`
/// and `POST /docs/:id/revert`. Every answer is JSON; every refusal a coded error.
export function historyRouter(collab: HistoryCollab, guards: HistoryGuards): Router {
  const router = Router();
  addReads(router, collab, guards.read ? [guards.read] : []);
  addWrites(router, collab, [...(guards.write ? [guards.write] : []), jsonBody]);
  router.use('/docs/:id', bodyErrors);
  return router;
}

/// The three reads: the timeline, a version, the changes between two.
function addReads(router: Router, collab: HistoryCollab, read: RequestHandler[]): void {
  router.get(
    '/docs/:id/history',
    ...read,
    route(async (req, res, id) => {
      const before = optionalNumber(req.query['before'], 'before');
      const limit = optionalNumber(req.query['limit'], 'limit');
      const gapMs = optionalNumber(req.query['gapMs'], 'gapMs');
      if (limit !== undefined && (limit < 1 || limit > maxHistoryLimit)) {
        throw new BadInput(`limit must be from 1 to ${maxHistoryLimit}`);
      }
      res.json(
        await collab.history(id, {
          ...(before === undefined ? {} : { before }),
          ...(limit === undefined ? {} : { limit }),
          ...(gapMs === undefined ? {} : { gapMs }),
        }),
      );
    }),
  );

  router.get(
    '/docs/:id/versions/:version',
    ...read,
    route(async (req, res, id) => {
      const version = number(req.params['version'], 'version');
      const found = await collab.documentAt(id, version);
      res.json({ version: found.version, doc: found.doc.toJSON() });
    }),
  );

  router.get(
    '/docs/:id/changes',
    ...read,
    route(async (req, res, id) => {
      const from = number(req.query['from'], 'from');
      const to = number(req.query['to'], 'to');
      if (from > to) throw new BadInput('from must not be after to');
      res.json(await collab.changes(id, from, to));
    }),
  );
}

/// The three writes: naming a version, restoring one, reverting one author's changes.
function addWrites(router: Router, collab: HistoryCollab, write: RequestHandler[]): void {
  router.post(
    '/docs/:id/versions/:version/name',
    ...write,
    route(async (req, res, id) => {
      const version = number(req.params['version'], 'version');
      const body = req.body as Record<string, unknown>;
      const name = typeof body['name'] === 'string' ? body['name'].trim() : '';
      if (name.length === 0 || name.length > maxVersionNameLength) {
        throw new BadInput(`name must be a string of 1 to ${maxVersionNameLength} characters`);
      }
      res.json(await collab.nameVersion(id, version, name, { user: actingUser(res) }));
    }),
  );

  router.post(
    '/docs/:id/restore',
    ...write,
    route(async (req, res, id) => {
      const body = req.body as Record<string, unknown>;
      const version = bodyNumber(body['version'], 'version');
      if (version === undefined) throw new BadInput('version is required');
      res.json({ version: await collab.restore(id, version, { user: actingUser(res) }) });
    }),
  );

  router.post(
    '/docs/:id/revert',
    ...write,
    route(async (req, res, id) => {
      const body = req.body as Record<string, unknown>;
      const user = body['user'];
      if (typeof user !== 'string' || user.length === 0 || user.length > maxUserLength) {
        throw new BadInput(
          `user must be the id of the author whose changes to revert (1 to ${maxUserLength} characters)`,
        );
      }
      const fromVersion = bodyNumber(body['fromVersion'], 'fromVersion');
      const toVersion = bodyNumber(body['toVersion'], 'toVersion');
      if (fromVersion !== undefined && toVersion !== undefined && fromVersion > toVersion) {
        throw new BadInput('fromVersion must not be after toVersion');
      }
      const range = {
        user,
        ...(fromVersion === undefined ? {} : { fromVersion }),
        ...(toVersion === undefined ? {} : { toVersion }),
      };
      res.json(await collab.revert(id, range, { by: actingUser(res) }));
    }),
  );
}

/// Wraps a route: checks the document id, and answers a `BadInput` `bad-request` and a
/// collab's `CodedError` with its code (and `retryAfterMs`). Anything else is a bug, left to
/// the app's error handler.
function route(
  handler: (req: Request, res: Response, id: string) => Promise<void>,
): (req: Request, res: Response) => Promise<void> {
  return async (req, res) => {
    const id = req.params['id'];
    if (typeof id !== 'string' || !docIdPattern.test(id)) return sendError(res, 'bad-document-id');
    try {
      await handler(req, res, id);
    } catch (err) {
      if (err instanceof BadInput) return sendError(res, 'bad-request', err.message);
      const coded = err as Partial<CodedError> | null;
      if (!coded || !isErrorCode(coded.code)) throw err;
      const { code, message, retryAfterMs } = coded;
      sendError(res, code, message === code ? undefined : message, retryAfterMs);
    }
  };
}

/// Parses a JSON object body, of at most `maxBodyBytes`; refuses any other body `bad-request`
/// before the route runs.
const parseJson = express.json({ limit: maxBodyBytes, strict: true });
function jsonBody(req: Request, res: Response, next: NextFunction): void {
  if (!req.is('application/json')) {
    return sendError(res, 'bad-request', 'The body must be JSON (Content-Type: application/json)');
  }
  parseJson(req, res, (err?: unknown) => {
    if (err) return next(err);
    const body: unknown = req.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      return sendError(res, 'bad-request', 'The body must be a JSON object');
    }
    next();
  });
}

/// Answers the body parser's refusals with codes: `too-large` past `maxBodyBytes`,
/// `bad-request` for malformed JSON.
function bodyErrors(err: unknown, _req: Request, res: Response, next: NextFunction): void {
  const type = (err as { type?: unknown }).type;
  if (res.headersSent) return next(err);
  if (type === 'entity.too.large') {
    return sendError(res, 'too-large', `The body must be at most ${maxBodyBytes} bytes`);
  }
  if (type === 'entity.parse.failed') return sendError(res, 'bad-request', 'Malformed JSON body');
  next(err);
}

/// A version or count from a path segment or query string: a whole decimal number from 0 to
/// 2^53 − 1 and nothing else (no sign, exponent, fraction or repeated parameter).
function number(value: unknown, name: string): number {
  if (value === undefined) throw new BadInput(`${name} is required`);
  if (typeof value !== 'string' || !/^(0|[1-9][0-9]{0,15})$/.test(value)) {
    throw new BadInput(`${name} must be a whole number from 0`);
  }
  const parsed = Number(value);
  if (!Number.isSafeInteger(parsed)) throw new BadInput(`${name} is too large`);
  return parsed;
}

function optionalNumber(value: unknown, name: string): number | undefined {
  return value === undefined ? undefined : number(value, name);
}

/// A version from a JSON body: absent, or a whole number from 0 to 2^53 − 1.
function bodyNumber(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new BadInput(`${name} must be a whole number from 0`);
  }
  return value;
}

/// The user the write guard found (a token's `sub`), or null in open mode.
function actingUser(res: Response): string | null {
  const user: unknown = res.locals['user'];
  return typeof user === 'string' ? user : null;
}
