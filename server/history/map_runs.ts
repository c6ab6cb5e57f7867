import { ReplaceStep, StepMap, type Step } from 'prosemirror-transform';
import type { HistoryStep } from './types.js';

// The step maps `attributedChanges` hands to prosemirror-changeset, collected from a history
// with runs of typing merged: a step that inserts right where the same author's previous
// insertion ended widens that map instead of adding one. The change set would merge the two
// into the same change and span (its `at` the later) anyway, at the cost of its
// divide-and-conquer merge over every step; a history is mostly typing.

/// Who made a step, as each span of a change carries it.
export interface Author {
  user: string | null;
  clientID: string;
  at: number;
}

/// Collects maps and their authors for two change sets: `maps`/`authors` for text, and, once
/// a formatting step is added, `formatMaps`/`formatters`: the same maps with no author, and
/// each formatting step as a map replacing the range it touched by as much, with its author.
export class MapRuns {
  readonly maps: StepMap[] = [];
  readonly authors: Author[] = [];
  formatMaps: StepMap[] | null = null;
  formatters: (Author | null)[] | null = null;
  // The run being collected: `runNew` positions replaced `runOld` at `runStart`, by one author.
  private runStart = -1;
  private runOld = 0;
  private runNew = 0;
  private runEntry: HistoryStep | null = null;

  /// Adds the map of `entry`'s step. Returns false when the step moves nothing (a formatting
  /// step: the caller says what it touched with `format`).
  add(entry: HistoryStep): boolean {
    const step = entry.step;
    if (step instanceof ReplaceStep) {
      // Read the range off the step: getMap would allocate a map per keystroke.
      const oldSize = step.to - step.from;
      const newSize = step.slice.size;
      if (oldSize === 0 && newSize === 0) return false;
      this.replace(step.from, oldSize, newSize, entry);
      return true;
    }
    return this.addMap(step, entry);
  }

  /// Adds a formatting step by `entry` that changed [from, to) (in the document after it).
  format(from: number, to: number, entry: HistoryStep): void {
    this.flush();
    if (!this.formatMaps) {
      this.formatMaps = this.maps.slice();
      this.formatters = this.maps.map(() => null);
    }
    this.formatMaps.push(new StepMap([from, to - from, to - from]));
    this.formatters!.push(authorOf(entry));
  }

  /// Ends the run being collected; call before reading the maps.
  flush(): void {
    if (!this.runEntry) return;
    this.push(new StepMap([this.runStart, this.runOld, this.runNew]), authorOf(this.runEntry));
    this.runEntry = null;
  }

  private addMap(step: Step, entry: HistoryStep): boolean {
    const map = step.getMap();
    let count = 0;
    let start = 0;
    let oldSize = 0;
    let newSize = 0;
    map.forEach((oldStart, oldEnd, newStart, newEnd) => {
      if (count++ > 0) return;
      start = oldStart;
      oldSize = oldEnd - oldStart;
      newSize = newEnd - newStart;
    });
    if (count === 0) return false;
    if (count === 1) {
      this.replace(start, oldSize, newSize, entry);
    } else {
      this.flush();
      this.push(map, authorOf(entry));
    }
    return true;
  }

  private replace(start: number, oldSize: number, newSize: number, entry: HistoryStep): void {
    const run = this.runEntry;
    if (
      run &&
      oldSize === 0 &&
      start === this.runStart + this.runNew &&
      run.user === entry.user &&
      run.clientID === entry.clientID
    ) {
      this.runNew += newSize;
      // The run's span keeps the latest time, as the change set's combine does.
      if (entry.at >= run.at) this.runEntry = entry;
      return;
    }
    this.flush();
    this.runStart = start;
    this.runOld = oldSize;
    this.runNew = newSize;
    this.runEntry = entry;
  }

  private push(map: StepMap, author: Author): void {
    this.maps.push(map);
    this.authors.push(author);
    if (this.formatMaps) {
      this.formatMaps.push(map);
      this.formatters!.push(null);
    }
  }
}

function authorOf(entry: HistoryStep): Author {
  return { user: entry.user, clientID: entry.clientID, at: entry.at };
}
