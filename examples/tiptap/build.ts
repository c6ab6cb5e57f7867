import { copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/// Bundles the example's page (Tiptap, the Scriptorium client, socket.io-client) into
/// `dist/examples/tiptap/public/`, next to its `index.html`.
export async function buildExample(root: string): Promise<string> {
  const out = `${root}/dist/examples/tiptap/public`;
  await mkdir(out, { recursive: true });
  await build({
    absWorkingDir: root,
    entryPoints: { page: 'examples/tiptap/page.ts' },
    outdir: out,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2022'],
    minify: true,
    sourcemap: true,
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
  await copyFile(`${root}/examples/tiptap/index.html`, `${out}/index.html`);
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');
  buildExample(root).then(
    (out) => console.log(`example bundle written to ${out}`),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
