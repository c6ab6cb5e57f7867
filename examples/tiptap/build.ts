import { copyFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '../../web/build.js';

/// Bundles the example's page (Tiptap, the Scriptorium client, socket.io-client) into
/// `dist/examples/tiptap/public/`, next to its `index.html`.
export async function buildExample(root: string): Promise<string> {
  const out = `${root}/dist/examples/tiptap/public`;
  await bundleForBrowser(root, { page: 'examples/tiptap/page.ts' }, out);
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
