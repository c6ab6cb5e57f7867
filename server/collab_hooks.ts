import type { Logger } from 'pino';
import { errorBody, isErrorCode, type ErrorCode } from '../schema/errors.js';
import type { CollabOptions, HookResult } from './collab_options.js';
import { CodedError } from './rooms/coded_error.js';
import type { AcceptedBatch, RoomHooks } from './rooms/room_hooks.js';

/// The rooms' hooks: the host's, each behind a wrapper, so that what a host's hook throws or
/// rejects is logged (and, for `onLoad`, answered with a code) and never reaches a room.
export function roomHooks(options: CollabOptions, log: Logger): RoomHooks {
  const hooks: RoomHooks = {};
  const { onLoad, onAccepted, onUnload } = options;
  const report = (hook: string, docId: string) => (err: unknown) =>
    log.error({ err, doc: docId, hook }, `the host's ${hook} hook failed`);
  /// Calls a hook whose outcome nobody waits for.
  const notify = <E extends { docId: string }>(
    hook: string,
    fn: (event: E) => HookResult,
    event: E,
  ): void => {
    try {
      const result = fn(event);
      if (result && typeof result.then === 'function')
        result.then(undefined, report(hook, event.docId));
    } catch (err) {
      report(hook, event.docId)(err);
    }
  };
  if (onLoad) {
    hooks.loaded = async (room) => {
      try {
        await onLoad({ docId: room.docId, version: room.publishedVersion, doc: room.publishedDoc });
      } catch (err) {
        report('onLoad', room.docId)(err);
        const code = (err as { code?: unknown } | null)?.code;
        const known: ErrorCode = isErrorCode(code) ? code : 'internal';
        throw new CodedError(known, errorBody(known, (err as Error)?.message).message, {
          cause: err,
        });
      }
    };
  }
  if (onAccepted) {
    hooks.accepted = (batch: AcceptedBatch) => notify('onAccepted', onAccepted, batch);
  }
  if (onUnload) {
    hooks.unloaded = (room) =>
      notify('onUnload', onUnload, {
        docId: room.docId,
        version: room.publishedVersion,
        doc: room.publishedDoc,
      });
  }
  return hooks;
}
