import { randomUUID } from 'node:crypto';
import { Node } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import type { Logger } from 'pino';
import { emptyDoc, schema, schemaVersion, type StepJSON } from '../schema/index.js';
import { Authority, type AuthorityLimits } from './authority.js';
import { Room, type BatchObserver, type RoomOptions, type RoomTransport } from './room.js';
import type { Store, StoredDocument } from './store.js';

/// Settings of the registry and the rooms it makes.
export interface RoomsOptions extends RoomOptions, AuthorityLimits {
  idleUnloadMs: number;
}

/// Thrown when a stored document cannot be turned back into a document: a snapshot written by
/// a newer schema, or a journal that does not apply. The document is refused, never rewritten.
export class CorruptDocumentError extends Error {
  constructor(docId: string, reason: string) {
    super(`Document ${docId} cannot be loaded: ${reason}`);
    this.name = 'CorruptDocumentError';
  }
}

/// The rooms this process holds, by document id. Loads a document on first use (concurrent
/// callers share one load), and unloads it once no socket has been joined for `idleUnloadMs`
/// and its snapshot is written. A failed snapshot keeps the room loaded and is retried.
export class Rooms {
  private readonly rooms = new Map<string, Room>();
  private readonly loading = new Map<string, Promise<Room | null>>();
  private readonly unloadTimers = new Map<string, NodeJS.Timeout>();
  private readonly store: Store;
  private readonly transport: RoomTransport;
  private readonly observer: BatchObserver | null;
  private readonly log: Logger;
  private readonly options: RoomsOptions;
  private closing = false;

  constructor(deps: {
    store: Store;
    transport: RoomTransport;
    observer: BatchObserver | null;
    log: Logger;
    options: RoomsOptions;
  }) {
    this.store = deps.store;
    this.transport = deps.transport;
    this.observer = deps.observer;
    this.log = deps.log;
    this.options = deps.options;
  }

  /// Rooms held in memory now.
  get size(): number {
    return this.rooms.size;
  }

  /// The loaded room of `docId`, if any, without loading.
  peek(docId: string): Room | undefined {
    return this.rooms.get(docId);
  }

  /// The room of `docId`, loading it from the store if needed. With `create` a document the
  /// store does not know starts empty (a fresh epoch, version 0); without it, resolves null.
  /// Rejects with the store's error when it cannot load (the caller answers `unavailable`).
  get(docId: string, create: boolean): Promise<Room | null> {
    const room = this.rooms.get(docId);
    if (room) return Promise.resolve(room);
    const inFlight = this.loading.get(docId);
    if (inFlight) {
      return inFlight.then((loaded) => (loaded || !create ? loaded : this.get(docId, create)));
    }
    const load = this.load(docId, create).finally(() => this.loading.delete(docId));
    this.loading.set(docId, load);
    return load;
  }

  /// Counts a socket joined to `room`; cancels a pending unload.
  attach(room: Room): void {
    room.sockets++;
    const timer = this.unloadTimers.get(room.docId);
    if (timer) {
      clearTimeout(timer);
      this.unloadTimers.delete(room.docId);
    }
  }

  /// Counts a socket gone. The last one out triggers a snapshot and schedules the unload.
  detach(room: Room): void {
    room.sockets--;
    if (room.sockets > 0 || room.state !== 'open') return;
    void room.whenIdle().then(() => room.snapshot());
    this.scheduleUnload(room);
  }

  /// Waits for in-flight batches of every room and writes their snapshots. Used by graceful
  /// shutdown; resolves with the number of rooms whose snapshot failed.
  async flushAll(): Promise<number> {
    this.closing = true;
    let failed = 0;
    await Promise.all(
      [...this.rooms.values()].map(async (room) => {
        await room.whenIdle();
        if (!(await room.snapshot())) failed++;
      }),
    );
    return failed;
  }

  /// Closes every room and forgets it; pending timers are cleared.
  closeAll(): void {
    for (const timer of this.unloadTimers.values()) clearTimeout(timer);
    this.unloadTimers.clear();
    for (const room of this.rooms.values()) room.close();
    this.rooms.clear();
  }

  private async load(docId: string, create: boolean): Promise<Room | null> {
    if (this.closing) throw new Error('shutting down');
    const stored = await this.store.load(docId);
    const existing = this.rooms.get(docId);
    if (existing) return existing;
    let room: Room;
    if (stored) {
      room = this.restore(docId, stored);
    } else if (create) {
      const authority = new Authority(emptyDoc(), 0, this.options);
      room = this.makeRoom(docId, randomUUID(), authority, 0);
    } else {
      return null;
    }
    this.rooms.set(docId, room);
    this.log.debug({ doc: docId, version: room.publishedVersion }, 'document loaded');
    // A room loaded for a read or a join that never came must not stay forever.
    this.scheduleUnload(room);
    return room;
  }

  private restore(docId: string, stored: StoredDocument): Room {
    const snapshot = stored.snapshot;
    let doc: Node;
    let version = 0;
    if (snapshot) {
      if (snapshot.schemaVersion > schemaVersion) {
        throw new CorruptDocumentError(
          docId,
          `snapshot written with schema version ${snapshot.schemaVersion}, this server has ${schemaVersion}`,
        );
      }
      try {
        doc = Node.fromJSON(schema, snapshot.doc);
        doc.check();
      } catch (err) {
        throw new CorruptDocumentError(docId, `snapshot: ${(err as Error).message}`);
      }
      version = snapshot.version;
    } else {
      doc = emptyDoc();
    }
    const authority = new Authority(doc, version, this.options);
    for (const entry of stored.journal) {
      const end = entry.baseVersion + entry.steps.length;
      if (end <= authority.version) continue;
      if (entry.baseVersion > authority.version) {
        throw new CorruptDocumentError(
          docId,
          `journal gap: entry at ${entry.baseVersion}, document at ${authority.version}`,
        );
      }
      const skip = authority.version - entry.baseVersion;
      const stepsJSON: StepJSON[] = entry.steps.slice(skip);
      const steps: Step[] = new Array(stepsJSON.length);
      let current = authority.doc;
      for (let i = 0; i < stepsJSON.length; i++) {
        let result;
        try {
          steps[i] = Step.fromJSON(schema, stepsJSON[i]);
          result = steps[i]!.apply(current);
        } catch (err) {
          throw new CorruptDocumentError(
            docId,
            `journal step ${authority.version + i}: ${(err as Error).message}`,
          );
        }
        if (!result.doc) {
          throw new CorruptDocumentError(
            docId,
            `journal step ${authority.version + i}: ${result.failed}`,
          );
        }
        current = result.doc;
      }
      authority.remember(steps, entry.clientIDs.slice(skip), current);
    }
    if (authority.version !== stored.version) {
      throw new CorruptDocumentError(
        docId,
        `journal ends at ${authority.version}, the store says ${stored.version}`,
      );
    }
    return this.makeRoom(docId, stored.epoch, authority, version);
  }

  private makeRoom(
    docId: string,
    epoch: string,
    authority: Authority,
    snapshotVersion: number,
  ): Room {
    const room = new Room(docId, epoch, authority, snapshotVersion, {
      store: this.store,
      transport: this.transport,
      observer: this.observer,
      log: this.log,
      options: this.options,
    });
    room.onClose = (closed) => {
      if (this.rooms.get(docId) === closed) this.rooms.delete(docId);
      const timer = this.unloadTimers.get(docId);
      if (timer) clearTimeout(timer);
      this.unloadTimers.delete(docId);
    };
    return room;
  }

  private scheduleUnload(room: Room): void {
    if (this.unloadTimers.has(room.docId)) return;
    const timer = setTimeout(() => {
      this.unloadTimers.delete(room.docId);
      void this.unload(room);
    }, this.options.idleUnloadMs);
    timer.unref();
    this.unloadTimers.set(room.docId, timer);
  }

  private async unload(room: Room): Promise<void> {
    if (room.sockets > 0 || room.state !== 'open' || this.rooms.get(room.docId) !== room) return;
    await room.whenIdle();
    const saved = await room.snapshot();
    // Someone may have joined while the snapshot was written.
    if (room.sockets > 0 || this.rooms.get(room.docId) !== room) return;
    if (!saved) {
      this.scheduleUnload(room);
      return;
    }
    this.rooms.delete(room.docId);
    room.close();
    this.log.debug({ doc: room.docId, version: room.publishedVersion }, 'document unloaded');
  }
}
