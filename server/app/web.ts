import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { type Response, type Router } from 'express';
import { docIdPattern } from '../../schema/events.js';
import { errors } from '../../schema/errors.js';

/// Options of `createWebRouter`.
export interface WebRouterOptions {
  /// The folder `npm run build` writes the browser bundle to (`dist/web-bundle/`). By default,
  /// found next to this file's compiled output.
  bundleDir?: string;
}

const defaultBundleDir = fileURLToPath(new URL('../../web-bundle/', import.meta.url));

/// The browser editor's routes: `GET /` makes a new random document id and redirects (302) to
/// `/d/<id>`; `GET /d/:id` serves the editor page, which opens that document (400 with an error
/// page for an id that is not one); `/assets/…` serves the bundle's script and style (not its
/// source maps). When the bundle has not been built, the pages answer 503 saying so rather
/// than failing obscurely in the browser.
export function createWebRouter(options: WebRouterOptions = {}): Router {
  const bundleDir = options.bundleDir ?? defaultBundleDir;
  const indexFile = `${bundleDir.replace(/\/$/, '')}/index.html`;
  const router = express.Router();

  router.get('/', (_req, res) => {
    // 12 random bytes: unguessable enough that a document's address is its only key.
    res.redirect(302, `/d/${randomBytes(12).toString('base64url')}`);
  });

  router.get('/d/:id', (req, res) => {
    if (!docIdPattern.test(req.params.id)) {
      return errorPage(res, 400, 'Not a document address', errors['bad-document-id'].message);
    }
    if (!existsSync(indexFile)) {
      return errorPage(
        res,
        503,
        'The editor is not built',
        'Run `npm run build` on the server to bundle the web editor.',
      );
    }
    // The page is the same for every document; the script reads the id from the address.
    res.set('Cache-Control', 'no-cache');
    res.sendFile(indexFile);
  });

  // The bundle's source maps stay on the server: they carry the sources and the build
  // machine's paths, which are nobody else's business. The page itself is served at `/d/:id`
  // only, with its own caching. Both answer the app's 404.
  router.use('/assets', (req, _res, next) => {
    const path = servedPath(req.path);
    next(path === null || /\.map$/i.test(path) || path === 'index.html' ? 'router' : undefined);
  });
  router.use(
    '/assets',
    express.static(bundleDir, {
      index: false,
      // Not content-hashed names: let browsers revalidate so a rebuilt bundle is picked up.
      cacheControl: true,
      maxAge: 0,
    }),
  );

  return router;
}

/// The file `express.static` serves for `path` (the request's path under `/assets`), relative to
/// the bundle's folder, as its file server (`send`) finds it: decoded, then normalised, so
/// that `main.js.map/.`, `x/../main.js.map` and `main.js.ma%70` all name main.js.map; trailing
/// slashes dropped. Null for a path it would not serve (an escape that does not decode, a null
/// byte, a way out of the folder).
function servedPath(path: string): string | null {
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return null;
  }
  if (decoded.includes('\0')) return null;
  const normal = posix.normalize(`./${decoded}`).replace(/\/+$/, '');
  if (normal === '..' || normal.startsWith('../')) return null;
  return normal;
}

function errorPage(res: Response, status: number, title: string, detail: string): void {
  res
    .status(status)
    .type('html')
    .send(
      // The editor's stylesheet, not a <style> element, so that the Content-Security-Policy
      // needs no 'unsafe-inline'. When the bundle is not built (the 503 page) the page shows
      // unstyled, which is fine for a message to whoever runs the server.
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}` +
        ` · Scriptorium</title><link rel="stylesheet" href="/assets/style.css"></head>` +
        `<body class="message-page"><h1>${escape(title)}</h1><p>${escape(detail)}</p>` +
        `<p><a href="/">Start a new document</a></p></body></html>`,
    );
}

function escape(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}
