import { createHistogram } from 'node:perf_hooks';
import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider';
import WebSocket from 'ws';
import * as Y from 'yjs';
import { Pace } from '../../client-sim/pace.js';
import { Random } from '../../client-sim/random.js';

/// How the Yjs swarm of `npm run bench:peers` runs: the same shape of load as the simulator's
/// against Scriptorium (one document, each editor typing at its own pace around `ratePerSec`).
export interface YjsSwarmOptions {
  /// The Hocuspocus server's websocket URL, `ws://127.0.0.1:PORT`.
  url: string;
  editors: number;
  docName: string;
  ratePerSec: number;
  /// Editing time, warm-up included.
  durationSec: number;
  /// Editing time at the start left out of the figures.
  warmupSec: number;
  seed: number;
}

/// The figures of one run over its steady span (after the warm-up, to the end of editing).
export interface YjsSwarmResult {
  /// The steady span, wall clock (ms since the epoch), for reading the server's CPU over it.
  steadyFromMs: number;
  steadyToMs: number;
  editsMade: number;
  /// Edits the server acknowledged (its SyncStatus message) within the span.
  acknowledged: number;
  /// Edit to its arrival at another editor (one editor watches every other's edits), over
  /// the span: the same moment as Scriptorium's edit-to-confirm, when the broadcast lands.
  p50Ms: number | null;
  p99Ms: number | null;
  /// Edit to the server's acknowledgement (its SyncStatus message) to the author.
  ackP50Ms: number | null;
  ackP99Ms: number | null;
  /// Every editor's document reads the same once all acknowledgements are in.
  converged: boolean;
}

// The structure y-prosemirror and Tiptap keep a ProseMirror document in: a fragment named
// 'default' of elements named after node types, text in XmlText with marks as attributes.
const fragmentName = 'default';
const words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'lorem', 'ipsum'];

/// One simulated person on Hocuspocus: their own Y.Doc and provider (one websocket), as a
/// Tiptap page has. Each edit is one Yjs transaction, which the provider sends at once (its
/// default, no client-side batching); it is acknowledged by the server's SyncStatus message,
/// which Hocuspocus sends per update once the update is applied.
interface SwarmCounter {
  /// An edit was made; its first item will have the id `key` (`client:clock`).
  edit(key: string, atMs: number): void;
  acknowledged(latencyMs: number): void;
}

class YjsEditor {
  readonly doc = new Y.Doc();
  readonly provider: HocuspocusProvider;
  private readonly socket: HocuspocusProviderWebsocket;
  private readonly pace: Pace;
  private readonly moments: number[] = [];
  private unsynced = 0;

  constructor(
    options: YjsSwarmOptions,
    private readonly random: Random,
    private readonly counter: SwarmCounter,
  ) {
    this.pace = new Pace(options.ratePerSec, random);
    this.socket = new HocuspocusProviderWebsocket({
      url: options.url,
      WebSocketPolyfill: WebSocket,
    });
    this.provider = new HocuspocusProvider({
      websocketProvider: this.socket,
      name: options.docName,
      document: this.doc,
      onUnsyncedChanges: ({ number }) => this.onUnsynced(number),
    });
    this.provider.attach();
  }

  synced(): Promise<void> {
    if (this.provider.isSynced) return Promise.resolve();
    return new Promise((resolve) => {
      const onSynced = () => {
        this.provider.off('synced', onSynced);
        resolve();
      };
      this.provider.on('synced', onSynced);
    });
  }

  start(): void {
    this.pace.start(0, () => this.edit());
  }

  stop(): void {
    this.pace.stop();
  }

  get pending(): number {
    return this.moments.length;
  }

  close(): void {
    this.pace.stop();
    this.provider.destroy();
    this.socket.destroy();
  }

  /// The provider counts updates sent and not yet acknowledged; each decrease is one
  /// acknowledgement, in the order the updates were sent.
  private onUnsynced(count: number): void {
    for (let n = this.unsynced - count; n > 0; n--) {
      const moment = this.moments.shift();
      if (moment !== undefined) this.counter.acknowledged(performance.now() - moment);
    }
    this.unsynced = count;
  }

  /// Seeds the document with `paragraphs` paragraphs of a sentence each.
  seed(paragraphs: number): void {
    const fragment = this.doc.getXmlFragment(fragmentName);
    this.doc.transact(() => {
      for (let i = 0; i < paragraphs; i++) {
        fragment.insert(fragment.length, [paragraph(sentence(this.random))]);
      }
    });
  }

  private edit(): void {
    const fragment = this.doc.getXmlFragment(fragmentName);
    const random = this.random;
    const now = performance.now();
    this.moments.push(now);
    this.counter.edit(`${this.doc.clientID}:${Y.getState(this.doc.store, this.doc.clientID)}`, now);
    this.doc.transact(() => {
      if (fragment.length === 0) {
        fragment.insert(0, [paragraph(sentence(random))]);
        return;
      }
      const index = random.int(0, fragment.length - 1);
      const text = (fragment.get(index) as Y.XmlElement).get(0) as Y.XmlText;
      const roll = random.next();
      // The simulator's mix against Scriptorium, in the kinds a Yjs text has: mostly typing,
      // then deleting, new paragraphs and marks.
      if (roll < 0.65 || text.length < 6) {
        text.insert(random.int(0, text.length), `${random.pick(words)} `);
      } else if (roll < 0.8) {
        const at = random.int(0, text.length - 5);
        text.delete(at, random.int(1, 5));
      } else if (roll < 0.9) {
        fragment.insert(index + 1, [paragraph(`${random.pick(words)} `)]);
      } else {
        const at = random.int(0, text.length - 5);
        text.format(at, random.int(1, 5), { bold: {} });
      }
    });
  }
}

function paragraph(content: string): Y.XmlElement {
  const element = new Y.XmlElement('paragraph');
  const text = new Y.XmlText();
  text.insert(0, content);
  element.insert(0, [text]);
  return element;
}

function sentence(random: Random): string {
  const list: string[] = [];
  for (let i = 0; i < 8; i++) list.push(random.pick(words));
  return `${list.join(' ')}. `;
}

/// Connects `editors` Yjs editors to one Hocuspocus document, seeds it, lets every editor type
/// for `durationSec`, waits up to 15 s for the acknowledgements still due and compares the
/// editors' documents. Throws when the editors cannot connect and sync within 30 s.
export async function runYjsSwarm(options: YjsSwarmOptions): Promise<YjsSwarmResult> {
  const seedRandom = new Random(options.seed);
  const latencyUs = createHistogram();
  const ackUs = createHistogram();
  let acknowledged = 0;
  let editsMade = 0;
  let counting = false;
  const editors: YjsEditor[] = [];
  // Edits by their first item's id, until the watching editor has seen them arrive.
  const made = new Map<string, number>();
  const counter: SwarmCounter = {
    edit(key, atMs) {
      if (!counting) return;
      editsMade++;
      made.set(key, atMs);
    },
    acknowledged(latencyMs) {
      if (!counting) return;
      acknowledged++;
      ackUs.record(Math.max(1, Math.round(latencyMs * 1000)));
    },
  };
  // The first editor watches the others' edits arrive: the items of each update it receives
  // (Hocuspocus merges the updates of a turn, and Yjs merges adjacent items of one author, so
  // every clock an item covers is looked up).
  const watch = (update: Uint8Array) => {
    const now = performance.now();
    for (const struct of Y.decodeUpdate(update).structs) {
      for (let clock = struct.id.clock; clock < struct.id.clock + struct.length; clock++) {
        const key = `${struct.id.client}:${clock}`;
        const atMs = made.get(key);
        if (atMs === undefined) continue;
        made.delete(key);
        latencyUs.record(Math.max(1, Math.round((now - atMs) * 1000)));
      }
    }
  };
  try {
    for (let i = 0; i < options.editors; i++) {
      editors.push(new YjsEditor(options, new Random(seedRandom.int(1, 2 ** 31)), counter));
    }
    await withTimeout(
      Promise.all(editors.map((editor) => editor.synced())),
      30_000,
      'editors synced',
    );
    editors[0]!.seed(20);
    await new Promise((resolve) => setTimeout(resolve, 1000));

    const watcher = editors[0]!;
    watcher.doc.on('update', (update: Uint8Array, origin: unknown) => {
      if (origin === watcher.provider) watch(update);
    });
    for (const editor of editors) editor.start();
    await sleep(options.warmupSec * 1000);
    const steadyFromMs = Date.now();
    counting = true;
    await sleep((options.durationSec - options.warmupSec) * 1000);
    counting = false;
    const steadyToMs = Date.now();
    for (const editor of editors) editor.stop();

    const deadline = Date.now() + 15_000;
    while (editors.some((editor) => editor.pending > 0) && Date.now() < deadline) await sleep(100);
    await sleep(500);
    const texts = editors.map((editor) => editor.doc.getXmlFragment(fragmentName).toString());
    const converged = texts.every((text) => text === texts[0]);
    return {
      steadyFromMs,
      steadyToMs,
      editsMade,
      acknowledged,
      p50Ms: latencyUs.count === 0 ? null : latencyUs.percentile(50) / 1000,
      p99Ms: latencyUs.count === 0 ? null : latencyUs.percentile(99) / 1000,
      ackP50Ms: ackUs.count === 0 ? null : ackUs.percentile(50) / 1000,
      ackP99Ms: ackUs.count === 0 ? null : ackUs.percentile(99) / 1000,
      converged,
    };
  } finally {
    for (const editor of editors) editor.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
