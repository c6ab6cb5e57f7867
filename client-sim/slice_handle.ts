import { Worker } from 'node:worker_threads';
import { SwarmSlice, type SliceCommand, type SliceMessage, type SlicePlan } from './slice.js';
import type { SliceWindow } from './window_recorder.js';

type Reply = Exclude<SliceMessage, { type: 'window' } | { type: 'failed' }>;

/// The coordinator's end of one slice, in this thread or in a worker thread: commands go in,
/// windows come out through `onWindow`, and `reply(type)` waits for a command's answer. A
/// slice that fails (a `failed` message, a worker that dies) rejects every waiting reply.
export class SliceHandle {
  readonly editors: number;
  private readonly sendCommand: (command: SliceCommand) => void;
  private readonly stop: () => Promise<void>;
  private readonly waiters: {
    type: Reply['type'];
    resolve: (message: Reply) => void;
    reject: (err: Error) => void;
  }[] = [];
  private readonly early: Reply[] = [];
  private failure: Error | null = null;
  private windowListener: (window: SliceWindow) => void = () => {};

  private constructor(
    editors: number,
    send: (command: SliceCommand) => void,
    stop: () => Promise<void>,
  ) {
    this.editors = editors;
    this.sendCommand = send;
    this.stop = stop;
  }

  /// A slice in this thread. Its messages are delivered on a later microtask, as a worker's
  /// would be, so the coordinator behaves the same either way.
  static local(plan: SlicePlan): SliceHandle {
    let handle!: SliceHandle;
    const slice = new SwarmSlice(plan, (message) => queueMicrotask(() => handle.receive(message)));
    handle = new SliceHandle(
      plan.editors.length,
      (command) => slice.handle(command),
      async () => {},
    );
    return handle;
  }

  /// A slice in a new worker thread running `client-sim/worker.js`.
  static worker(plan: SlicePlan): SliceHandle {
    const worker = new Worker(new URL('./worker.js', import.meta.url), { workerData: plan });
    const handle = new SliceHandle(
      plan.editors.length,
      (command) => worker.postMessage(command),
      async () => {
        await worker.terminate();
      },
    );
    worker.on('message', (message: SliceMessage) => handle.receive(message));
    worker.on('error', (err) => handle.fail(err));
    worker.on('exit', (code) => {
      if (code !== 0) handle.fail(new Error(`a swarm worker exited with code ${code}`));
    });
    return handle;
  }

  onWindow(listener: (window: SliceWindow) => void): void {
    this.windowListener = listener;
  }

  send(command: SliceCommand): void {
    this.sendCommand(command);
  }

  /// Resolves with the next answer of `type`; rejects if the slice fails first.
  reply<T extends Reply['type']>(type: T): Promise<Extract<Reply, { type: T }>> {
    if (this.failure) return Promise.reject(this.failure);
    const index = this.early.findIndex((message) => message.type === type);
    if (index >= 0) {
      return Promise.resolve(this.early.splice(index, 1)[0] as Extract<Reply, { type: T }>);
    }
    return new Promise((resolve, reject) =>
      this.waiters.push({ type, resolve: resolve as (message: Reply) => void, reject }),
    );
  }

  /// Ends the worker thread, if any.
  terminate(): Promise<void> {
    return this.stop();
  }

  private receive(message: SliceMessage): void {
    if (message.type === 'window') return this.windowListener(message.window);
    if (message.type === 'failed') return this.fail(new Error(message.message));
    const index = this.waiters.findIndex((waiter) => waiter.type === message.type);
    if (index < 0) {
      this.early.push(message);
      return;
    }
    this.waiters.splice(index, 1)[0]!.resolve(message);
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const waiter of this.waiters.splice(0)) waiter.reject(err);
  }
}
