import { parentPort, workerData } from 'node:worker_threads';
import { callSlice, YjsSlice, type SliceCall, type YjsSliceOptions } from './yjs_slice.js';

// A worker thread of `npm run bench:peers`' Yjs swarm: one `YjsSlice`, whose methods the
// coordinator calls by message (`{ id, method, arg }`, answered `{ id, value }` or
// `{ id, error }`).

const slice = new YjsSlice(workerData as YjsSliceOptions);
const port = parentPort!;
port.on('message', (call: SliceCall) => {
  Promise.resolve()
    .then(() => callSlice(slice, call.method, call.arg))
    .then(
      (value) => port.postMessage({ id: call.id, value }),
      (err: unknown) =>
        port.postMessage({ id: call.id, error: err instanceof Error ? err.message : String(err) }),
    );
});
