import { LatencyHistogram } from './histogram.js';
import { rate } from './rate.js';

/// One document's entry in a window's "busiest documents" list.
export interface TopDocument {
  documentId: string;
  /// Batches accepted per second over the window: the ranking key.
  acceptedPerSec: number;
  /// Batches received per second, accepted or not.
  receivedPerSec: number;
  /// Steps accepted per second.
  stepsPerSec: number;
  /// 99th percentile of this document's batch latency in ms, or null when the document got no
  /// histogram because `documentHistogramsMax` was reached.
  p99Ms: number | null;
}

/// Counters of one document in the current window. The recorder increments the fields directly
/// (every field is set in the constructor, so all entries share one hidden class).
export class DocumentActivity {
  received = 0;
  accepted = 0;
  steps = 0;

  constructor(
    readonly documentId: string,
    /// Null once `documentHistogramsMax` histograms are in use by other documents.
    readonly latency: LatencyHistogram | null,
  ) {}
}

/// The documents active in the current window, each with counters and, while memory allows, a
/// small latency histogram. A document with no batch in a whole window is dropped and its
/// histogram goes back to a pool, so only active documents cost memory and new documents do
/// not allocate native histograms again and again.
export class DocumentTable {
  private readonly byId = new Map<string, DocumentActivity>();
  private readonly pool: LatencyHistogram[] = [];
  private histogramsInUse = 0;

  constructor(
    private readonly highestLatencyMs: number,
    private readonly histogramsMax: number,
  ) {}

  /// Returns the entry of `documentId`, creating it on the document's first batch of a window.
  entry(documentId: string): DocumentActivity {
    const found = this.byId.get(documentId);
    if (found !== undefined) return found;
    const created = new DocumentActivity(documentId, this.takeHistogram());
    this.byId.set(documentId, created);
    return created;
  }

  /// The number of documents with at least one batch in the current window.
  get size(): number {
    return this.byId.size;
  }

  /// Ends the window: returns up to `limit` documents with the most accepted batches (ties
  /// broken by batches received), computes rates over `seconds`, then clears every counter and
  /// drops the documents that had no batch. Selection keeps a small sorted array instead of
  /// sorting all documents, so a window close is O(documents × limit).
  close(seconds: number, limit: number): TopDocument[] {
    const top: DocumentActivity[] = [];
    for (const entry of this.byId.values()) {
      if (entry.received === 0 || limit === 0) continue;
      if (top.length === limit && !busier(entry, top[top.length - 1])) continue;
      let at = top.length < limit ? top.length : limit - 1;
      while (at > 0 && busier(entry, top[at - 1])) {
        top[at] = top[at - 1];
        at--;
      }
      top[at] = entry;
    }
    const result = top.map((entry): TopDocument => ({
      documentId: entry.documentId,
      acceptedPerSec: rate(entry.accepted, seconds),
      receivedPerSec: rate(entry.received, seconds),
      stepsPerSec: rate(entry.steps, seconds),
      p99Ms: entry.latency === null ? null : entry.latency.percentileMs(99),
    }));
    for (const [documentId, entry] of this.byId) {
      if (entry.received === 0) {
        this.byId.delete(documentId);
        if (entry.latency !== null) this.returnHistogram(entry.latency);
        continue;
      }
      entry.received = 0;
      entry.accepted = 0;
      entry.steps = 0;
      if (entry.latency !== null) entry.latency.reset();
    }
    return result;
  }

  private takeHistogram(): LatencyHistogram | null {
    const pooled = this.pool.pop();
    if (pooled !== undefined) return pooled;
    if (this.histogramsInUse >= this.histogramsMax) return null;
    this.histogramsInUse++;
    // Two significant figures (1%) is plenty for a per-document p99, and a histogram then takes
    // several times less resident memory than at three.
    return new LatencyHistogram(this.highestLatencyMs, 2);
  }

  private returnHistogram(histogram: LatencyHistogram): void {
    // Histograms were reset at the previous close and saw no value since.
    this.pool.push(histogram);
  }
}

function busier(a: DocumentActivity, b: DocumentActivity): boolean {
  return a.accepted > b.accepted || (a.accepted === b.accepted && a.received > b.received);
}
