import type { MetricsWindow } from './window.js';

/// The last `capacity` closed windows in a ring buffer: adding is O(1) and never shifts an array.
export class WindowHistory {
  private readonly ring: (MetricsWindow | undefined)[];
  private next = 0;
  private stored = 0;

  /// `capacity` must be a positive integer (the recorder's config guarantees it).
  constructor(readonly capacity: number) {
    this.ring = new Array<MetricsWindow | undefined>(capacity).fill(undefined);
  }

  /// Stores `window`, evicting the oldest one when full.
  add(window: MetricsWindow): void {
    this.ring[this.next] = window;
    this.next = (this.next + 1) % this.capacity;
    if (this.stored < this.capacity) this.stored++;
  }

  /// The number of windows stored.
  get size(): number {
    return this.stored;
  }

  /// The last `count` windows, oldest first; fewer when fewer are stored, none for count <= 0.
  last(count: number): MetricsWindow[] {
    const n = Math.max(0, Math.min(Math.floor(count), this.stored));
    const result: MetricsWindow[] = new Array<MetricsWindow>(n);
    for (let i = 0; i < n; i++) {
      const at = (this.next - n + i + this.capacity) % this.capacity;
      result[i] = this.ring[at] as MetricsWindow;
    }
    return result;
  }
}
