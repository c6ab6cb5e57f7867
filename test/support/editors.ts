import { CollabClient, type CollabClientOptions } from '../../client/index.js';
import { Random } from '../../client-sim/random.js';
import { randomEdit } from '../../client-sim/workload.js';
import { delay, waitFor } from './wait.js';

/// A headless editor on the real client library, connected to `url`.
export function openEditor(
  url: string,
  docId: string,
  options: Partial<CollabClientOptions> = {},
): CollabClient {
  return new CollabClient({
    url,
    docId,
    reconnectDelayMs: 50,
    reconnectDelayMaxMs: 500,
    staleWaitMs: 1000,
    ...options,
  });
}

/// Makes `count` random edits with random pauses of up to `maxPauseMs` between them.
/// Returns how many edits were made.
export async function editRandomly(
  editor: CollabClient,
  random: Random,
  count: number,
  maxPauseMs: number,
): Promise<number> {
  let made = 0;
  for (let i = 0; i < count; i++) {
    await delay(random.int(0, maxPauseMs));
    if (!editor.state) continue;
    const tr = randomEdit(editor.state, random);
    if (tr) {
      editor.dispatch(tr);
      made++;
    }
  }
  return made;
}

/// Waits until every editor is connected, has nothing unconfirmed and has reached `version`.
export async function waitConverged(
  editors: readonly CollabClient[],
  version: () => number,
  timeoutMs = 20_000,
): Promise<void> {
  await waitFor(
    () =>
      editors.every(
        (editor) =>
          editor.status === 'synced' && !editor.hasUnconfirmed && editor.version === version(),
      ),
    'editors to converge',
    timeoutMs,
  );
}

export { Random };
