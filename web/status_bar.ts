import type { CollabStatus } from '../client/index.js';
import type { ErrorBody } from '../schema/protocol.js';

/// What the status bar needs to know to describe the connection.
export interface StatusInfo {
  status: CollabStatus;
  error: ErrorBody | null;
  /// Whether the document has been loaded at least once in this page.
  loaded: boolean;
  /// Local changes not yet confirmed by the server.
  unsent: number;
  /// The last connection attempt failed at the transport level (server down, network gone).
  unreachable: boolean;
  /// The server refused the page's access token (expired) and the client waits for a fresh
  /// one, keeping its unsent changes.
  tokenRefused: boolean;
}

/// The line under the menu that says where the document stands: saved, saving, offline with
/// N unsent changes, reconnecting, or failed with the server's reason. Its `data-state`
/// attribute carries a stable word for tests and CSS.
export class StatusBar {
  constructor(private readonly element: HTMLElement) {}

  /// Redraws the bar for `info`.
  show(info: StatusInfo): void {
    const [state, text] = describe(info);
    this.element.dataset['state'] = state;
    this.element.textContent = text;
  }
}

function describe(info: StatusInfo): [string, string] {
  const unsent = info.unsent === 1 ? '1 unsent change' : `${info.unsent} unsent changes`;
  if (info.tokenRefused && info.status !== 'failed') {
    return [
      'refused',
      `Access token refused${info.unsent ? ` · ${unsent} kept in this tab` : ''}` +
        ' · waiting for a fresh link',
    ];
  }
  switch (info.status) {
    case 'synced':
      return ['synced', 'Connected · all changes saved'];
    case 'sending':
      return ['sending', 'Connected · saving…'];
    case 'connecting':
      if (!info.loaded) {
        return info.unreachable
          ? ['unreachable', 'Cannot reach the server · retrying…']
          : ['connecting', 'Connecting…'];
      }
      return ['reconnecting', `Reconnected · catching up${info.unsent ? ` · ${unsent}` : ''}…`];
    case 'offline':
      if (!info.loaded) return ['unreachable', 'Cannot reach the server · retrying…'];
      return [
        'offline',
        `Offline · ${info.unsent ? unsent + ', kept here until' : 'reconnecting when'} the server can be reached again`,
      ];
    case 'failed':
      return [
        'failed',
        `Disconnected: ${info.error?.message ?? 'the server refused this editor'}` +
          (info.error ? ` (${info.error.code})` : ''),
      ];
  }
}
