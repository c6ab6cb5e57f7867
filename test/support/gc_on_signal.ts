import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

// Preloaded into a server child process (NODE_OPTIONS=--import=…) by tests that measure its
// memory: SIGUSR2 runs a full garbage collection and then writes `gc-done` and the heap's
// figures to stderr, so the test reads RSS after one. Nothing in the server knows of it.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
process.on('SIGUSR2', () => {
  gc();
  const { heapUsed, external, arrayBuffers } = process.memoryUsage();
  process.stderr.write(`gc-done ${JSON.stringify({ heapUsed, external, arrayBuffers })}\n`);
});
