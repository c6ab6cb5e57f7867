import type { RemoteCursor } from '../client/index.js';
import type { Identity } from './identity.js';

/// The list of who is in the document: you first, then everyone whose presence arrived, each
/// with their caret colour.
export class PeopleList {
  private shown = '';

  constructor(private readonly element: HTMLElement) {}

  /// Redraws the list when it changed.
  show(self: Identity, others: readonly RemoteCursor[]): void {
    const people = [
      { id: 'self', name: `${self.name} (you)`, color: self.color },
      ...others
        .map((cursor) => ({ id: cursor.clientID, name: cursor.name, color: cursor.color }))
        .sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id)),
    ];
    const key = JSON.stringify(people);
    if (key === this.shown) return;
    this.shown = key;
    this.element.replaceChildren(
      ...people.map((person) => {
        const item = document.createElement('li');
        item.dataset['clientId'] = person.id;
        const dot = document.createElement('span');
        dot.className = 'person-colour';
        dot.style.backgroundColor = person.color;
        item.append(dot, person.name);
        return item;
      }),
    );
  }
}
