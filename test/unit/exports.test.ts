import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';

// Each name a package entry exports is a decision: a new one must be added here too, on
// purpose. Values are checked in the built modules, types in the entries' sources (an entry
// file holds only `export { … } from …` lines).

const root = fileURLToPath(new URL('../../../', import.meta.url));

/// Every entry of package.json's `exports` (but `./package.json`), its values and its types.
const entries: Record<string, { values: string[]; types: string[] }> = {
  '.': {
    values: [
      'CodedError',
      'ConfigError',
      'FileStore',
      'MemoryStore',
      'MetricsRecorder',
      'RedisStore',
      'createCollab',
      'createMetricsRegistry',
      'defaultLimits',
    ],
    types: [
      'AcceptedEvent',
      'ArchiveRewrite',
      'AttachOptions',
      'AttributedChange',
      'Authenticate',
      'AuthenticateContext',
      'ChangesResult',
      'CoarseWindow',
      'Collab',
      'CollabHealth',
      'CollabLimits',
      'CollabOptions',
      'CollabStats',
      'DocumentEvent',
      'HistoryArchive',
      'HistoryEntry',
      'HistoryPage',
      'HistorySegment',
      'HistoryStep',
      'Identity',
      'JournalEntry',
      'MetricsWindow',
      'NamedVersion',
      'RevertResult',
      'Snapshot',
      'Span',
      'Store',
      'StoredDocument',
      'StoredName',
    ],
  },
  './client': {
    values: [
      'CollabClient',
      'Presence',
      'bindView',
      'readPendingInput',
      'refusedLocalSteps',
      'remoteCursors',
    ],
    types: [
      'BindViewOptions',
      'CollabClientOptions',
      'CollabStatus',
      'PresenceOptions',
      'RemoteCursor',
    ],
  },
  './schema': {
    values: ['emptyDoc', 'isSafeImageUrl', 'isSafeLinkUrl', 'schema', 'schemaVersion'],
    types: [],
  },
  './protocol': {
    values: [
      'clientIdPattern',
      'docIdPattern',
      'errorBody',
      'errors',
      'isErrorCode',
      'presenceColorPattern',
      'presenceNameMaxLength',
    ],
    types: [
      'BatchLimits',
      'ClientToServerEvents',
      'ClosingNotice',
      'DocAnswer',
      'DocJSON',
      'DocRoom',
      'ErrorAnswer',
      'ErrorBody',
      'ErrorCode',
      'HandshakeAuth',
      'HandshakeQuery',
      'PresenceBroadcast',
      'PresenceLeave',
      'PresenceUpdate',
      'ServerToClientEvents',
      'StepJSON',
      'StepsAnswer',
      'StepsBroadcast',
      'StepsRequest',
      'StepsSinceAnswer',
      'SyncAnswer',
      'SyncRequest',
    ],
  },
};

const exportsMap = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).exports as Record<
  string,
  { default: string } | string
>;

/// The source file of a built entry (`./dist/schema/index.js` → `schema/index.ts`).
const sourceOf = (built: string): string =>
  built.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts');

/// The names `file`'s `export { … }` lines export, as `[values, types]`.
function declared(file: string): [string[], string[]] {
  const text = readFileSync(join(root, file), 'utf8');
  assert.doesNotMatch(text, /export \*/, `${file} exports by name only`);
  const values: string[] = [];
  const types: string[] = [];
  for (const [, typeOnly, list] of text.matchAll(/export (type )?\{([^}]*)\}/g)) {
    for (const raw of list!.split(',')) {
      const item = raw.trim();
      if (item === '') continue;
      const isType = typeOnly !== undefined || item.startsWith('type ');
      const name = item
        .replace(/^type /, '')
        .split(/\s+as\s+/)
        .pop()!;
      (isType ? types : values).push(name);
    }
  }
  return [values.sort(), types.sort()];
}

describe('the package entries', () => {
  it('are exactly the ones listed here', () => {
    assert.deepEqual(
      Object.keys(exportsMap)
        .filter((key) => key !== './package.json')
        .sort(),
      Object.keys(entries).sort(),
    );
  });

  for (const [entry, expected] of Object.entries(entries)) {
    it(`${entry} exports exactly its listed names`, async () => {
      const target = exportsMap[entry]!;
      const built = typeof target === 'string' ? target : target.default;
      const [values, types] = declared(sourceOf(built));
      assert.deepEqual(values, [...expected.values].sort(), 'values in the source');
      assert.deepEqual(types, [...expected.types].sort(), 'types in the source');
      const module = (await import(pathToFileURL(join(root, built)).href)) as object;
      assert.deepEqual(Object.keys(module).sort(), [...expected.values].sort(), 'built values');
    });
  }
});
