import { copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/// Bundles the browser editor into `dist/web-bundle/`: `main.js` (the editor, with
/// socket.io-client and ProseMirror), `style.css` (ProseMirror's and the menu's CSS with ours)
/// and `index.html`, which the server's web router serves. Bundles straight from the
/// TypeScript sources (esbuild resolves our `.js` import specifiers to the `.ts` files), so the
/// source maps point at them. Rejects when esbuild reports an error.
export async function buildWeb(root: string): Promise<string> {
  const out = `${root}/dist/web-bundle`;
  await bundleForBrowser(root, { main: 'web/main.ts', style: 'web/style.css' }, out);
  await copyFile(`${root}/web/index.html`, `${out}/index.html`);
  return out;
}

/// Bundles `entryPoints` (relative to `root`) for the browser into `out`: ES modules for
/// current browsers, minified, with source maps, `process.env.NODE_ENV` set to production (some
/// dependencies read it). Shared by the web editor and the examples.
export async function bundleForBrowser(
  root: string,
  entryPoints: Record<string, string>,
  out: string,
): Promise<void> {
  await mkdir(out, { recursive: true });
  await build({
    absWorkingDir: root,
    entryPoints,
    outdir: out,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2022'],
    minify: true,
    sourcemap: true,
    legalComments: 'linked',
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
}

// Run as a script (`node dist/web/build.js`), from anywhere: the repository is two folders up.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = fileURLToPath(new URL('../../', import.meta.url)).replace(/\/$/, '');
  buildWeb(root).then(
    (out) => console.log(`web bundle written to ${out}`),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
