import { MemoryStore } from '../../server/index.js';
import type {
  AppendOutcome,
  AppendRequest,
  Snapshot,
  SnapshotOutcome,
} from '../../server/stores/store.js';
import { delay } from './wait.js';

/// How much slower than memory a `SlowStore` is.
export interface Slowness {
  /// Each append waits this long before it is made (default 0).
  appendMs?: number;
  /// Only appends whose steps' JSON holds this string wait (default: every append).
  marker?: string;
  /// Each snapshot waits this long before it is made (default 0).
  snapshotMs?: number;
}

/// A memory store that takes its time: a batch that stays unconfirmed, or a snapshot in flight
/// for a while, with a real server around it.
export class SlowStore extends MemoryStore {
  constructor(private readonly slowness: Slowness) {
    super();
  }

  override async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    const { appendMs = 0, marker } = this.slowness;
    if (appendMs > 0 && (marker === undefined || JSON.stringify(request.steps).includes(marker)))
      await delay(appendMs);
    return super.append(docId, request);
  }

  override async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    const { snapshotMs = 0 } = this.slowness;
    if (snapshotMs > 0) await delay(snapshotMs);
    return super.snapshot(docId, snapshot);
  }
}
