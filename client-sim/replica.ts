import { Node, type Schema } from 'prosemirror-model';
import { EditorState } from 'prosemirror-state';
import { Step } from 'prosemirror-transform';
import type { StepJSON, SyncAnswer } from '../schema/protocol.js';

/// One copy of a document shared by every light editor of it in one thread: the confirmed
/// document and version, kept up to date from the broadcasts that any of those editors'
/// sockets deliver first. Parsing and applying each broadcast once per thread, instead of once
/// per editor, is what lets one machine simulate hundreds of editors next to the server.
export class Replica {
  readonly docId: string;
  /// Null until the first join answers.
  state: EditorState | null = null;
  version = -1;
  epoch: string | null = null;
  /// Set when a broadcast skipped versions and a pull is on its way.
  pulling = false;
  /// Why this replica stopped following the server, when it did.
  broken: string | null = null;
  private waiting: { version: number; callback: () => void }[] = [];

  private readonly schema: Schema;

  constructor(docId: string, schema: Schema) {
    this.docId = docId;
    this.schema = schema;
  }

  /// Calls `callback` once this replica has reached `version` (at once if it has).
  whenAt(version: number, callback: () => void): void {
    if (this.state && this.version >= version) callback();
    else this.waiting.push({ version, callback });
  }

  /// Takes a `join`/`pull` answer: the whole document (when this replica has none yet, or the
  /// server decided to send it) or the steps since a version.
  sync(answer: Extract<SyncAnswer, { ok: true }>): void {
    if ('doc' in answer) {
      if (answer.version <= this.version && answer.epoch === this.epoch) return;
      this.epoch = answer.epoch;
      this.state = EditorState.create({
        schema: this.schema,
        doc: Node.fromJSON(this.schema, answer.doc),
      });
      this.version = answer.version;
      this.advanced();
      return;
    }
    this.epoch = answer.epoch;
    this.receive(answer.version, answer.steps);
  }

  /// Applies the steps of a broadcast ending at `version` if they are new. Returns 'gap' when
  /// they start after this replica's version (a broadcast was missed and the caller should
  /// pull). A step that does not apply means the server and this replica disagree, a bug the
  /// simulator exists to find: the replica records it in `broken` and stops moving.
  receive(version: number, steps: readonly StepJSON[]): 'old' | 'applied' | 'gap' {
    if (!this.state || version <= this.version || this.broken !== null) return 'old';
    const base = version - steps.length;
    if (base > this.version) return 'gap';
    const tr = this.state.tr;
    for (let i = this.version - base; i < steps.length; i++) {
      let failed: string | null;
      try {
        failed = tr.maybeStep(Step.fromJSON(this.schema, steps[i])).failed;
      } catch (err) {
        failed = String(err);
      }
      if (failed !== null) {
        this.broken = `replica of ${this.docId}: step ${base + i + 1} does not apply (${failed})`;
        return 'old';
      }
    }
    this.state = this.state.apply(tr);
    this.version = version;
    this.advanced();
    return 'applied';
  }

  private advanced(): void {
    if (this.waiting.length === 0) return;
    const ready = this.waiting.filter((waiter) => waiter.version <= this.version);
    if (ready.length === 0) return;
    this.waiting = this.waiting.filter((waiter) => waiter.version > this.version);
    for (const waiter of ready) waiter.callback();
  }
}
