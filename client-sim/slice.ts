import type { Schema } from 'prosemirror-model';
import type { DocJSON } from '../schema/protocol.js';
import { FullEditor } from './full_editor.js';
import { LightEditor } from './light_editor.js';
import { Observer } from './observer.js';
import { Random } from './random.js';
import { Replica } from './replica.js';
import { loadSchema } from './schema_module.js';
import { WindowRecorder, type SliceTotals, type SliceWindow } from './window_recorder.js';

/// One simulated socket of a slice.
export interface SliceEditorSpec {
  docId: string;
  clientID: string;
  kind: 'light' | 'full' | 'observer';
  ratePerSec: number;
  seed: number;
}

/// What one slice runs: its editors and the settings they share. Plain data, so it can be a
/// worker's `workerData`.
export interface SlicePlan {
  url: string;
  /// The schema module (see `SwarmOptions.schemaModule`), loaded in the slice's own thread.
  schemaModule: string | null;
  rttMs: number;
  windowMs: number;
  editors: SliceEditorSpec[];
}

/// What the coordinator tells a slice, in this order over a run.
export type SliceCommand =
  | { type: 'connect'; timeoutMs: number }
  | { type: 'start'; atMs: number }
  | { type: 'stop'; drainTimeoutMs: number }
  | { type: 'check'; docs: { docId: string; version: number; doc: DocJSON }[]; timeoutMs: number }
  | { type: 'close' };

/// The outcome of comparing one full editor's document, or one replica shared by light
/// editors, with the server's.
export interface EditorCheck {
  docId: string;
  /// The full editor's clientID, or `replica` for the light editors' shared copy.
  clientID: string;
  converged: boolean;
  /// Why not, when not.
  detail: string;
}

/// What a slice tells the coordinator: a window whenever one closes, and one answer per
/// command.
export type SliceMessage =
  | { type: 'window'; window: SliceWindow }
  | { type: 'connected'; joined: number; failures: string[] }
  | { type: 'stopped'; totals: SliceTotals; undrained: number }
  | { type: 'checked'; checks: EditorCheck[] }
  | { type: 'closed' }
  | { type: 'failed'; message: string };

// Sockets opened at once while connecting: a burst of hundreds of handshakes would measure the
// handshake, not the editing.
const connectBurst = 25;

/// The editors of one thread (the main thread, or one worker): light editors sharing one
/// replica per document, full editors, observers, and the recorder that counts what they do.
/// It is driven by `SliceCommand`s and answers through `post`.
export class SwarmSlice {
  private readonly plan: SlicePlan;
  private readonly post: (message: SliceMessage) => void;
  private readonly recorder: WindowRecorder;
  private readonly replicas = new Map<string, Replica>();
  private readonly light: LightEditor[] = [];
  private readonly full: FullEditor[] = [];
  private readonly observers: Observer[] = [];
  /// Loaded by `connect`, before any editor exists.
  private schema: Schema | null = null;

  constructor(plan: SlicePlan, post: (message: SliceMessage) => void) {
    this.plan = plan;
    this.post = post;
    this.recorder = new WindowRecorder(
      plan.windowMs,
      () => this.connectedEditors(),
      (window) => this.post({ type: 'window', window }),
    );
  }

  /// Carries out one command; failures are reported as a `failed` message, never thrown.
  handle(command: SliceCommand): void {
    this.run(command).catch((err: unknown) =>
      this.post({ type: 'failed', message: err instanceof Error ? err.message : String(err) }),
    );
  }

  private async run(command: SliceCommand): Promise<void> {
    switch (command.type) {
      case 'connect':
        return this.connect(command.timeoutMs);
      case 'start':
        return this.start(command.atMs);
      case 'stop':
        return this.stop(command.drainTimeoutMs);
      case 'check':
        return this.check(command.docs, command.timeoutMs);
      case 'close':
        return this.close();
    }
  }

  private async connect(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const { url, rttMs } = this.plan;
    const schema = (this.schema = await loadSchema(this.plan.schemaModule));
    const specs = this.plan.editors;
    for (let i = 0; i < specs.length && Date.now() < deadline; i += connectBurst) {
      const joins: Promise<void>[] = [];
      for (const spec of specs.slice(i, i + connectBurst)) {
        const random = new Random(spec.seed);
        if (spec.kind === 'light') {
          const editor = new LightEditor({
            url,
            clientID: spec.clientID,
            ratePerSec: spec.ratePerSec,
            rttMs,
            random,
            replica: this.replica(spec.docId),
            recorder: this.recorder,
          });
          this.light.push(editor);
          joins.push(editor.joinedOnce());
        } else if (spec.kind === 'full') {
          const editor = new FullEditor({
            url,
            schema,
            docId: spec.docId,
            clientID: spec.clientID,
            ratePerSec: spec.ratePerSec,
            rttMs,
            random,
            recorder: this.recorder,
          });
          this.full.push(editor);
          joins.push(editor.client.ready().catch(() => {}));
        } else {
          const observer = new Observer(
            url,
            spec.docId,
            spec.clientID,
            rttMs,
            random,
            this.recorder,
          );
          this.observers.push(observer);
          joins.push(observer.joinedOnce());
        }
      }
      await within(Promise.all(joins), deadline - Date.now());
    }
    const failures: string[] = [];
    for (const editor of this.light) {
      if (!editor.joined)
        failures.push(
          `${editor.clientID}: ${editor.failure ?? editor.refusal ?? 'no join answer'}`,
        );
    }
    for (const editor of this.full) {
      if (!editor.client.state) {
        failures.push(`${editor.client.clientID}: ${editor.client.error?.message ?? 'not loaded'}`);
      }
    }
    for (const observer of this.observers) {
      if (!observer.joined) failures.push(`observer ${observer.socket.id ?? ''}: no join answer`);
    }
    const joined = specs.length - failures.length;
    this.recorder.start();
    this.post({ type: 'connected', joined, failures });
  }

  private start(atMs: number): void {
    const delayMs = Math.max(0, atMs - Date.now());
    for (const editor of this.light) editor.start(delayMs);
    for (const editor of this.full) editor.start(delayMs);
  }

  /// Stops the people, lets what they made get confirmed, closes the last window and reports
  /// the totals. Editors that could not drain in time are closed first, so that what they
  /// give up is counted in that last window.
  private async stop(drainTimeoutMs: number): Promise<void> {
    for (const editor of this.light) editor.stop();
    for (const editor of this.full) editor.stop();
    const deadline = Date.now() + drainTimeoutMs;
    while (Date.now() < deadline && !this.drained()) await sleep(20);
    let undrained = 0;
    for (const editor of this.light) {
      if (!editor.drained) {
        undrained++;
        editor.close();
      }
    }
    for (const editor of this.full) {
      if (!editor.drained) {
        undrained++;
        editor.close();
      }
    }
    this.recorder.stop();
    this.post({ type: 'stopped', totals: { ...this.recorder.totals }, undrained });
  }

  /// Waits for every full editor and every light editors' replica to reach the server's
  /// version, then compares their documents with the server's. The replicas are checked as
  /// the full editors are: without them a run of light editors only (`fullPerDoc: 0`, as the
  /// cluster bench runs) compared nothing and could not fail. A broken replica (a broadcast
  /// that did not apply) is a divergence too.
  private async check(
    docs: { docId: string; version: number; doc: DocJSON }[],
    timeoutMs: number,
  ): Promise<void> {
    const served = new Map(docs.map((entry) => [entry.docId, entry]));
    // A replica whose editors here were all closed undrained (an overloaded run) hears no more
    // broadcasts, though their last batches may still land: it cannot reach the server's
    // version, and is not checked (rather than waited for and taken for a divergence).
    const followed = new Set(this.light.filter((editor) => editor.open).map((e) => e.docId));
    const replicas = [...this.replicas.values()].filter((replica) => followed.has(replica.docId));
    // Likewise a full editor closed undrained: its unconfirmed steps are no divergence.
    const full = this.full.filter((editor) => editor.open);
    const deadline = Date.now() + timeoutMs;
    const reached = () =>
      full.every(
        (editor) =>
          editor.client.status === 'failed' ||
          editor.client.version >= (served.get(editor.client.docId)?.version ?? 0),
      ) &&
      replicas.every(
        (replica) =>
          replica.broken !== null || replica.version >= (served.get(replica.docId)?.version ?? 0),
      );
    while (Date.now() < deadline && !reached()) await sleep(20);
    const checks: EditorCheck[] = [];
    for (const editor of full) {
      const client = editor.client;
      const server = served.get(client.docId);
      const check = {
        docId: client.docId,
        clientID: client.clientID,
        converged: false,
        detail: '',
      };
      if (!server) check.detail = 'the server has no such document';
      else if (!client.state) check.detail = `never loaded (${client.status})`;
      else if (client.hasUnconfirmed) check.detail = 'still has unconfirmed steps';
      else if (client.version !== server.version) {
        check.detail = `at version ${client.version}, server at ${server.version}`;
      } else if (!this.schema!.nodeFromJSON(server.doc).eq(client.state.doc)) {
        check.detail = `document differs from the server's at version ${server.version}`;
      } else check.converged = true;
      checks.push(check);
    }
    for (const replica of replicas) {
      const server = served.get(replica.docId);
      const check = { docId: replica.docId, clientID: 'replica', converged: false, detail: '' };
      if (replica.broken) check.detail = replica.broken;
      else if (!server) check.detail = 'the server has no such document';
      else if (!replica.state) check.detail = 'never loaded';
      else if (replica.version !== server.version) {
        check.detail = `at version ${replica.version}, server at ${server.version}`;
      } else if (!this.schema!.nodeFromJSON(server.doc).eq(replica.state.doc)) {
        check.detail = `document differs from the server's at version ${server.version}`;
      } else check.converged = true;
      checks.push(check);
    }
    this.post({ type: 'checked', checks });
  }

  private close(): void {
    this.recorder.dispose();
    for (const editor of this.light) editor.close();
    for (const editor of this.full) editor.close();
    for (const observer of this.observers) observer.close();
    this.post({ type: 'closed' });
  }

  private replica(docId: string): Replica {
    let replica = this.replicas.get(docId);
    if (!replica) {
      replica = new Replica(docId, this.schema!);
      this.replicas.set(docId, replica);
    }
    return replica;
  }

  private drained(): boolean {
    return (
      this.light.every((editor) => editor.drained) && this.full.every((editor) => editor.drained)
    );
  }

  private connectedEditors(): number {
    let connected = 0;
    for (const editor of this.light) if (editor.joined) connected++;
    for (const editor of this.full)
      if (editor.client.status === 'synced' || editor.client.status === 'sending') connected++;
    return connected;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/// Resolves when `promise` does or after `ms`, whichever comes first.
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise.then(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, ms));
    }),
  ]).finally(() => clearTimeout(timer));
}
