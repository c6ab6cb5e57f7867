import { parentPort, workerData } from 'node:worker_threads';
import { SwarmSlice, type SliceCommand, type SlicePlan } from './slice.js';

// The entry point of a swarm worker thread: one slice, driven by the coordinator's messages.
// Windows carry a RecordableHistogram, which Node clones across threads intact, so the
// coordinator merges real histograms rather than averaging percentiles.
if (!parentPort) throw new Error('client-sim/worker.js runs as a worker thread only');
const port = parentPort;
const slice = new SwarmSlice(workerData as SlicePlan, (message) => port.postMessage(message));
port.on('message', (command: SliceCommand) => slice.handle(command));
