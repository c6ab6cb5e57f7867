import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { EditorState } from 'prosemirror-state';
import { io, type Socket } from 'socket.io-client';
import { schema } from '../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../schema/events.js';
import { startServerProcess } from '../client-sim/server_process.js';
import { ask } from './socket_ask.js';

// `npm run bench:memory`: what idle editors and loaded documents cost the server in memory.
// A server child (memory store, connection caps off) is measured three times, its resident set
// read from /proc after the load has settled:
//   1. started, nothing connected;
//   2. one editor per document joined, each document given `--doc-kb` of text by that editor
//      (so every document is loaded and holds a realistic body);
//   3. the other editors joined too, all idle.
// Per document = (2 − 1) / documents (with its first socket); per idle editor = (3 − 2) / the
// editors added in 3. The clients are plain Socket.io sockets in this process.

const usage = `Usage: npm run bench:memory -- [options]

  --editors N   idle editors in all (default 10000)
  --docs D      documents they are spread over (default 1000)
  --doc-kb K    text written into each document (default 2)
`;

async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const match = /VmRSS:\s+(\d+) kB/.exec(status);
  if (!match) throw new Error('no VmRSS in /proc/<pid>/status (Linux only)');
  return Number(match[1]) / 1024;
}

async function settle(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 5000));
}

/// The run's settings from the command line; null when `--help` was asked (usage printed).
/// Throws for a value out of range.
function parseOptions(): { editors: number; docs: number; docKb: number } | null {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      editors: { type: 'string', default: '10000' },
      docs: { type: 'string', default: '1000' },
      'doc-kb': { type: 'string', default: '2' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return null;
  }
  const editors = Number(values.editors);
  const docs = Number(values.docs);
  const docKb = Number(values['doc-kb']);
  if (!Number.isInteger(docs) || docs < 1) throw new Error('--docs: a count');
  if (!Number.isInteger(editors) || editors <= docs) throw new Error('--editors: more than --docs');
  if (!(docKb >= 0)) throw new Error('--doc-kb: a size');
  return { editors, docs, docKb };
}

/// Opens `docs` documents in groups of 100, one editor each, which pastes `body` into its
/// document. Throws when one cannot join or its paste is refused.
async function openDocuments(
  connect: (index: number) => Promise<Socket>,
  docs: number,
  body: string,
): Promise<void> {
  for (let i = 0; i < docs; i += 100) {
    await Promise.all(
      Array.from({ length: Math.min(100, docs - i) }, async (_, k) => {
        const socket = await connect(i + k);
        if (body.length === 0) return;
        const tr = EditorState.create({ schema }).tr.insertText(body, 1);
        const answer = await ask<StepsAnswer>(socket, 'steps', {
          version: 0,
          steps: tr.steps.map((step) => step.toJSON()),
        });
        if (!answer.ok) throw new Error(`document ${i + k} refused its text: ${answer.code}`);
      }),
    );
  }
}

async function main(): Promise<number> {
  const options = parseOptions();
  if (!options) return 0;
  const { editors, docs, docKb } = options;
  const server = await startServerProcess({
    MAX_CONNECTIONS_PER_IP: '0',
    NEW_DOCUMENTS_PER_MINUTE: '0',
    MAX_DOCUMENTS_PER_USER: '0',
    MAX_LOADED_DOCUMENTS: String(Math.max(2000, docs * 2)),
    // Idle means idle: nobody leaves, so nothing is unloaded during the run.
    IDLE_UNLOAD_MS: '600000',
  });
  const sockets: Socket[] = [];
  const connect = async (index: number): Promise<Socket> => {
    const socket = io(server.url, {
      transports: ['websocket'],
      forceNew: true,
      reconnection: false,
      query: { doc: `idle-${index % docs}` },
      auth: { clientID: `editor-${index}` },
    });
    sockets.push(socket);
    const answer = await ask<SyncAnswer>(socket, 'join', {});
    if (!answer.ok) throw new Error(`editor ${index} could not join: ${answer.code}`);
    return socket;
  };
  const text = 'lorem ipsum dolor sit amet '.repeat(Math.ceil((docKb * 1024) / 27));
  const body = text.slice(0, docKb * 1024);
  try {
    await settle();
    const empty = await rssMiB(server.pid);

    await openDocuments(connect, docs, body);
    await settle();
    const withDocs = await rssMiB(server.pid);

    for (let i = docs; i < editors; i += 200) {
      await Promise.all(
        Array.from({ length: Math.min(200, editors - i) }, (_, k) => connect(i + k)),
      );
    }
    await settle();
    const withEditors = await rssMiB(server.pid);

    const perDocKiB = ((withDocs - empty) * 1024) / docs;
    const perEditorKiB = ((withEditors - withDocs) * 1024) / (editors - docs);
    console.log(
      `server RSS: ${empty.toFixed(0)} MiB empty, ${withDocs.toFixed(0)} MiB with ${docs} documents of ${docKb} KiB (one editor each), ${withEditors.toFixed(0)} MiB with ${editors} idle editors`,
    );
    console.log(
      `per loaded document (with its first socket): ${perDocKiB.toFixed(1)} KiB; per further idle editor: ${perEditorKiB.toFixed(1)} KiB`,
    );
    console.log(
      `${editors} idle editors over ${docs} documents: ${withEditors.toFixed(0)} MiB (goal < 1024 MiB): ${
        withEditors < 1024 ? 'met' : 'NOT met'
      }`,
    );
    return withEditors < 1024 ? 0 : 1;
  } finally {
    for (const socket of sockets) socket.close();
    await server.stop();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  },
);
