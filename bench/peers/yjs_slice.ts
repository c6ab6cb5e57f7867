import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider';
import WebSocket from 'ws';
import * as Y from 'yjs';
import { Pace } from '../../client-sim/pace.js';
import { Random } from '../../client-sim/random.js';

/// One share of the Yjs swarm of `npm run bench:peers`, in the coordinating thread or in a
/// worker thread (`yjs_worker.ts`): the simulator against Scriptorium spreads its editors over
/// worker threads above 50 (`workersFor`), and so does this swarm, so that at 60 editors neither
/// server is judged through a load generator that the other one has more threads for.
export interface YjsSliceOptions {
  /// The Hocuspocus server's websocket URL, `ws://127.0.0.1:PORT`.
  url: string;
  docName: string;
  ratePerSec: number;
  /// One seed per editor of this slice.
  seeds: number[];
}

/// What a slice counted while counting was on, and its editors' documents at the end.
export interface YjsSliceReport {
  editsMade: number;
  acknowledged: number;
  /// Edit to its arrival at the slice's watching editor, in µs (see `YjsSlice`).
  latencyUs: number[];
  /// Edit to the server's acknowledgement to its author, in µs.
  ackUs: number[];
  texts: string[];
}

// The structure y-prosemirror and Tiptap keep a ProseMirror document in: a fragment named
// 'default' of elements named after node types, text in XmlText with marks as attributes.
const fragmentName = 'default';
/// Deletions are keyed by a deleted item's id, apart from the items edits make.
const deletionKey = 'd:';
const words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'lorem', 'ipsum'];

/// One simulated person on Hocuspocus: their own Y.Doc and provider (one websocket), as a
/// Tiptap page has. Each edit is one Yjs transaction, which the provider sends at once (its
/// default, no client-side batching); it is acknowledged by the server's SyncStatus message,
/// which Hocuspocus sends per update once the update is applied.
interface SwarmCounter {
  /// An edit was made, due at `atMs`: `key` is the id (`client:clock`) of its first item, or
  /// of the first item it deleted (prefixed `deletionKey`); null when it changed nothing.
  edit(key: string | null, atMs: number): void;
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
    options: YjsSliceOptions,
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
    this.pace.start(0, (dueMs) => this.edit(dueMs));
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

  /// An edit due at `dueMs`: its latencies count from then, as the simulator's do against
  /// Scriptorium, so a thread too busy to fire its timers on time shows in both servers' figures.
  private edit(dueMs: number): void {
    const fragment = this.doc.getXmlFragment(fragmentName);
    const random = this.random;
    this.moments.push(dueMs);
    const clock = Y.getState(this.doc.store, this.doc.clientID);
    let deleted: string | null = null;
    const onTransaction = (transaction: Y.Transaction) => {
      for (const [client, items] of transaction.deleteSet.clients) {
        if (items[0]) deleted = `${deletionKey}${client}:${items[0].clock}`;
        return;
      }
    };
    this.doc.on('afterTransaction', onTransaction);
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
    this.doc.off('afterTransaction', onTransaction);
    // An edit that made items is known by its first item's id (the author's clock before it);
    // a deletion, which makes none, by the first item it deleted.
    const made = Y.getState(this.doc.store, this.doc.clientID) > clock;
    this.counter.edit(made ? `${this.doc.clientID}:${clock}` : deleted, dueMs);
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

/// Some of the swarm's editors, driven by the coordinator's calls. The slice's first editor
/// watches the edits of the others in the slice arrive: the items each update it receives
/// makes or deletes (Hocuspocus merges the updates of a turn, and Yjs merges adjacent items of
/// one author, so every clock an item or a deleted range covers is looked up). Both ends of a
/// measured edit are then on one thread's `performance.now()` clock, as an edit and its
/// confirmation are in the simulator.
export class YjsSlice {
  private readonly editors: YjsEditor[] = [];
  /// Edits by their key (see `SwarmCounter.edit`), until the watching editor has seen them
  /// arrive.
  private readonly made = new Map<string, number>();
  private readonly latencyUs: number[] = [];
  private readonly ackUs: number[] = [];
  private editsMade = 0;
  private acknowledged = 0;
  private counting = false;

  constructor(options: YjsSliceOptions) {
    const counter: SwarmCounter = {
      edit: (key, atMs) => {
        if (!this.counting) return;
        this.editsMade++;
        if (key !== null) this.made.set(key, atMs);
      },
      acknowledged: (latencyMs) => {
        if (!this.counting) return;
        this.acknowledged++;
        this.ackUs.push(Math.max(1, Math.round(latencyMs * 1000)));
      },
    };
    for (const seed of options.seeds) {
      this.editors.push(new YjsEditor(options, new Random(seed), counter));
    }
    const watcher = this.editors[0];
    watcher?.doc.on('update', (update: Uint8Array, origin: unknown) => {
      if (origin === watcher.provider) this.watch(update);
    });
  }

  async synced(): Promise<void> {
    await Promise.all(this.editors.map((editor) => editor.synced()));
  }

  /// Seeds the document with `paragraphs` paragraphs through the slice's first editor.
  seed(paragraphs: number): void {
    this.editors[0]?.seed(paragraphs);
  }

  start(): void {
    for (const editor of this.editors) editor.start();
  }

  count(on: boolean): void {
    this.counting = on;
  }

  stop(): void {
    for (const editor of this.editors) editor.stop();
  }

  /// Waits until every edit is acknowledged, or `timeoutMs`, then half a second more for the
  /// last broadcasts.
  async drain(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.editors.some((editor) => editor.pending > 0) && Date.now() < deadline) {
      await sleep(100);
    }
    await sleep(500);
  }

  report(): YjsSliceReport {
    return {
      editsMade: this.editsMade,
      acknowledged: this.acknowledged,
      latencyUs: this.latencyUs,
      ackUs: this.ackUs,
      texts: this.editors.map((editor) => editor.doc.getXmlFragment(fragmentName).toString()),
    };
  }

  close(): void {
    for (const editor of this.editors) editor.close();
  }

  private watch(update: Uint8Array): void {
    const now = performance.now();
    const arrived = (key: string) => {
      const atMs = this.made.get(key);
      if (atMs === undefined) return;
      this.made.delete(key);
      this.latencyUs.push(Math.max(1, Math.round((now - atMs) * 1000)));
    };
    const { structs, ds } = Y.decodeUpdate(update);
    for (const struct of structs) {
      for (let clock = struct.id.clock; clock < struct.id.clock + struct.length; clock++) {
        arrived(`${struct.id.client}:${clock}`);
      }
    }
    for (const [client, items] of ds.clients) {
      for (const item of items) {
        for (let clock = item.clock; clock < item.clock + item.len; clock++) {
          arrived(`${deletionKey}${client}:${clock}`);
        }
      }
    }
  }
}

/// A call on a slice, by name, as a worker receives it.
export interface SliceCall {
  id: number;
  method: 'synced' | 'seed' | 'start' | 'count' | 'stop' | 'drain' | 'report' | 'close';
  arg?: unknown;
}

/// Runs `method` on `slice`, the same way in the coordinating thread and in a worker.
export function callSlice(slice: YjsSlice, method: SliceCall['method'], arg?: unknown): unknown {
  switch (method) {
    case 'synced':
      return slice.synced();
    case 'seed':
      return slice.seed(arg as number);
    case 'start':
      return slice.start();
    case 'count':
      return slice.count(arg as boolean);
    case 'stop':
      return slice.stop();
    case 'drain':
      return slice.drain(arg as number);
    case 'report':
      return slice.report();
    case 'close':
      return slice.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
