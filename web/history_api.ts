import type {
  AttributedChange,
  HistoryEntry,
  HistoryPage,
  NamedVersion,
  RevertResult,
  Span,
} from '../schema/history.js';
import { isErrorCode, type ErrorCode } from '../schema/protocol.js';

export type { AttributedChange, HistoryEntry, HistoryPage, NamedVersion, RevertResult, Span };

// The web editor's client of the history routes (docs/history.md), answering the shapes of
// schema/history.ts.

export class HistoryError extends Error {
  constructor(
    readonly code: ErrorCode | 'network',
    message: string,
  ) {
    super(message);
  }
}

/// Calls the history routes of document `docId` on the page's own server, with the bearer
/// token `token` gives (read again at every call, as the collab client does), if any. Each
/// method rejects with a `HistoryError`.
export class HistoryApi {
  constructor(
    private readonly docId: string,
    private readonly token: (() => string) | null,
  ) {}

  /// Up to `limit` sessions, newest first, those before version `before` when given.
  history(gapMs: number, limit: number, before?: number): Promise<HistoryPage> {
    const page = before === undefined ? '' : `&before=${before}`;
    return this.call('GET', `history?gapMs=${gapMs}&limit=${limit}${page}`);
  }

  /// The document at `version`, as JSON (`Node.toJSON`).
  version(version: number): Promise<{ version: number; doc: unknown }> {
    return this.call('GET', `versions/${version}`);
  }

  changes(from: number, to: number): Promise<{ changes: AttributedChange[] }> {
    return this.call('GET', `changes?from=${from}&to=${to}`);
  }

  name(version: number, name: string): Promise<unknown> {
    return this.call('POST', `versions/${version}/name`, { name });
  }

  /// Resolves with the new head version.
  restore(version: number): Promise<{ version: number }> {
    return this.call('POST', 'restore', { version });
  }

  revert(user: string, fromVersion: number, toVersion: number): Promise<RevertResult> {
    return this.call('POST', 'revert', { user, fromVersion, toVersion });
  }

  private async call<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (this.token) headers['authorization'] = `Bearer ${this.token()}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(`/docs/${encodeURIComponent(this.docId)}/${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch {
      throw new HistoryError('network', 'The server could not be reached');
    }
    const answer = (await response.json().catch(() => null)) as Record<string, unknown> | null;
    if (response.ok && answer) return answer as T;
    const code = answer?.['code'];
    const message = answer?.['message'];
    throw new HistoryError(
      isErrorCode(code) ? code : 'internal',
      typeof message === 'string' ? message : `The server answered ${response.status}`,
    );
  }
}
