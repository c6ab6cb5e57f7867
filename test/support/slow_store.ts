import { MemoryStore } from '../../server/index.js';
import type { AppendOutcome, AppendRequest } from '../../server/stores/store.js';
import { delay } from './wait.js';

/// A memory store that takes `delayMs` to append a batch holding `marker` (in its steps' JSON):
/// a batch that stays unconfirmed for a while, with a real server around it.
export class SlowStore extends MemoryStore {
  constructor(
    private readonly marker: string,
    private readonly delayMs: number,
  ) {
    super();
  }

  override async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (JSON.stringify(request.steps).includes(this.marker)) await delay(this.delayMs);
    return super.append(docId, request);
  }
}
