import { sendableSteps } from 'prosemirror-collab';
import { refusedLocalSteps, type CollabClient } from '../client/index.js';
import { StatusBar } from './status_bar.js';

/// What an editor page says about its connection: the status bar, and the notice shown when
/// the document cannot be opened, local changes were dropped, the token was refused, or the
/// editor was disconnected for good. It tracks what the client's status alone does not tell:
/// whether the document has loaded in this page, whether the last attempt failed at the
/// transport level, and whether the server refused the token.
export class EditorStatus {
  /// The document has loaded at least once in this page.
  loaded = false;
  private unreachable = false;
  // The server refused the token and `token` is a function, so the client asks it again at
  // every retry: the person can bring a fresh one (see `tokenNotice`).
  private tokenRefused = false;
  private refusal = '';
  private readonly statusBar: StatusBar;

  constructor(
    status: HTMLElement,
    private readonly noticeElement: HTMLElement,
    private readonly client: CollabClient,
  ) {
    this.statusBar = new StatusBar(status);
  }

  /// Redraws the status bar, and the token notice while the token stays refused.
  refresh(): void {
    const unsent = this.unsentCount();
    this.statusBar.show({
      status: this.client.status,
      error: this.client.error,
      loaded: this.loaded,
      unsent,
      unreachable: this.unreachable,
      tokenRefused: this.tokenRefused,
    });
    // Redrawn with every change, so that the count it gives stays true while the person types.
    if (this.tokenRefused) this.tokenNotice(unsent);
  }

  /// The socket connected: the server is reachable and took the token.
  connected(): void {
    this.unreachable = false;
    if (this.tokenRefused) this.noticeElement.hidden = true;
    this.tokenRefused = false;
    this.refresh();
  }

  /// A connection attempt failed; a refused token counts only when the page can bring a fresh
  /// one (`canRenewToken`).
  connectFailed(
    err: Error & { data?: { code?: unknown; message?: unknown } },
    canRenewToken: boolean,
  ): void {
    this.unreachable = true;
    this.tokenRefused = err.data?.code === 'unauthorized' && canRenewToken;
    if (this.tokenRefused) this.refusal = String(err.data?.message ?? '');
    this.refresh();
  }

  /// Local changes were dropped by a reload for `reason`; says how many, and why when the
  /// client's error is the refusal that made it drop them.
  dropped(dropped: number, reason: string): void {
    if (dropped === 0) return;
    // The client's error is the refusal only for a drop it made for one: a reload for
    // another reason later would otherwise be blamed on an old refusal.
    const error = this.client.error;
    const why =
      reason === refusedLocalSteps && error ? `: ${refusalText(error.message, dropped)}` : '';
    this.notice(
      `${dropped === 1 ? '1 change' : `${dropped} changes`} could not be kept (${reason})${why}.`,
    );
  }

  /// The client failed for good: says why, and what a reload would discard.
  failed(): void {
    const error = this.client.error;
    const reason = error ? `${error.message} (${error.code})` : 'the server refused this editor';
    if (!this.loaded) {
      this.notice(`This document cannot be opened: ${reason}.`);
      return;
    }
    // The state and its unsent steps stay in this page; a reload starts from the server's.
    const unsent = this.unsentCount();
    const lost =
      unsent === 0
        ? ''
        : ` ${unsent === 1 ? '1 change was' : `${unsent} changes were`} not sent, and ` +
          'reloading discards them: copy what you need to keep first.';
    this.notice(
      `This editor was disconnected for good: ${reason}.${lost} Reload the page to continue.`,
    );
  }

  private unsentCount(): number {
    const state = this.client.state;
    return state ? (sendableSteps(state)?.steps.length ?? 0) : 0;
  }

  /// The token of the page expired (typically during an offline stretch). Reloading would
  /// discard the unsent changes, and the expired link cannot open the document again; a fresh
  /// link opened in this tab changes only the fragment, which the `token` function reads.
  private tokenNotice(unsent: number): void {
    if (!this.loaded) {
      this.notice(
        `This document cannot be opened: ${this.refusal || 'the access token was refused'}. ` +
          'Open a fresh link to it in this tab (paste it into the address bar).',
      );
      return;
    }
    const kept = unsent === 1 ? '1 unsent change is' : `${unsent} unsent changes are`;
    this.notice(
      `The access token in this address was refused: ${this.refusal || 'it may have expired'}. ` +
        (unsent > 0
          ? `${kept} kept in this tab only: reloading the page would discard them. `
          : '') +
        'Open a fresh link to this document in this tab (paste it into the address bar) to ' +
        (unsent > 0 ? 'send them.' : 'go on.'),
    );
  }

  private notice(text: string): void {
    this.noticeElement.textContent = text;
    this.noticeElement.hidden = false;
  }
}

/// A refusal as a notice tells it. The server's "Step 0 would make the document larger than …"
/// names a step of a batch the reader never saw, and a full document refuses a whole backlog in
/// one notice: the notice speaks of the changes it counts instead.
function refusalText(message: string, dropped: number): string {
  const size = /^Step \d+ (would make the document larger than .*)$/.exec(message);
  return size ? `${dropped === 1 ? 'it' : 'they'} ${size[1]}` : message;
}
