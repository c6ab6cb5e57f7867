import { Server } from '@hocuspocus/server';

// The peer in `npm run bench:peers`: Hocuspocus as its README starts it, with its defaults and
// no extension (no persistence, no auth), on the loopback port the parent gives in PORT. It is
// started as `node --import <client-sim/cpu_probe.js> <this file>` with an IPC channel, like
// Scriptorium's server in the same benchmark, and says `{ready: true}` once it listens.

const port = Number(process.env['PORT']);
if (!Number.isInteger(port) || port <= 0) {
  console.error('hocuspocus_server: PORT must be a port number');
  process.exit(2);
}

const server = new Server({ port, address: '127.0.0.1', quiet: true, stopOnSignals: true });
await server.listen();
process.send?.({ ready: true });
