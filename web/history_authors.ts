import { presenceColorPattern } from '../schema/protocol.js';
import type { Span } from './history_api.js';

/// Colours for authors nobody present has chosen: the identity palette's.
const fallback = ['#d7263d', '#1b998b', '#2e86ab', '#f46036', '#7b2cbf', '#3a7d44', '#c2185b'];

/// Each author's colour in the History panel: the presence colour of the editor that wrote a
/// span when that editor is here now (or is this page), and the colour any of that user's
/// present editors showed, remembered for the user's other spans and for the timeline. A user
/// never seen present gets a colour of the palette picked by their name, the same every time.
export class AuthorColours {
  private readonly byUser = new Map<string, string>();

  /// `present` answers the presence colours of the editors here now, by client id (this
  /// page's own included); `self` this page's user (its token's subject, null without one) and
  /// colour.
  constructor(
    private readonly present: () => ReadonlyMap<string, string>,
    private readonly self: () => { user: string | null; colour: string },
  ) {}

  /// Learns the colours of the users whose spans were written by editors present now.
  learn(spans: readonly Span[]): void {
    const present = this.present();
    for (let i = 0; i < spans.length; i++) {
      const { user, clientID } = spans[i]!;
      const colour = present.get(clientID);
      if (user !== null && colour !== undefined) this.byUser.set(user, colour);
    }
  }

  /// The colour of `span`'s author: always a `#rrggbb` value, safe to put in a style.
  ofSpan(span: Span): string {
    const colour = this.present().get(span.clientID);
    if (colour !== undefined && presenceColorPattern.test(colour)) return colour;
    return this.ofUser(span.user ?? span.clientID);
  }

  /// The colour of `user` (a token's subject).
  ofUser(user: string): string {
    const self = this.self();
    if (user === self.user && presenceColorPattern.test(self.colour)) return self.colour;
    const known = this.byUser.get(user);
    if (known !== undefined && presenceColorPattern.test(known)) return known;
    let hash = 0;
    for (let i = 0; i < user.length; i++) hash = (hash * 31 + user.charCodeAt(i)) >>> 0;
    return fallback[hash % fallback.length]!;
  }
}

/// The subject (`sub`) of a JWT, read without checking it: only to know which of the
/// timeline's users this page is. Null for a token that is not a JWT (a host's opaque one).
export function tokenSubject(token: string): string | null {
  try {
    const payload = token.split('.')[1] ?? '';
    const json = atob(payload.replace(/-/g, '+').replace(/_/g, '/'));
    const sub: unknown = (JSON.parse(json) as Record<string, unknown>)['sub'];
    return typeof sub === 'string' ? sub : null;
  } catch {
    return null;
  }
}
