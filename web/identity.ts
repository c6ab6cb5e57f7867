import { presenceColorPattern, presenceNameMaxLength } from '../schema/protocol.js';

/// Who this browser is to the others: a name and a caret colour.
export interface Identity {
  name: string;
  color: string;
}

const storageKey = 'scriptorium.identity';

/// Colours that stay readable as a caret, as a label background behind white text, and tinted
/// as a selection.
const palette = ['#d7263d', '#1b998b', '#2e86ab', '#f46036', '#7b2cbf', '#3a7d44', '#c2185b'];
const animals = ['Otter', 'Heron', 'Lynx', 'Badger', 'Falcon', 'Marten', 'Ibex', 'Wren', 'Orca'];

/// The identity remembered in this browser, or a new random one (remembered from then on).
/// Storage may be unavailable (private windows, file URLs): then a fresh one per page.
export function loadIdentity(): Identity {
  try {
    const stored = JSON.parse(localStorage.getItem(storageKey) ?? 'null') as Partial<Identity>;
    if (
      stored &&
      typeof stored.name === 'string' &&
      stored.name.length > 0 &&
      stored.name.length <= presenceNameMaxLength &&
      typeof stored.color === 'string' &&
      presenceColorPattern.test(stored.color)
    ) {
      return { name: stored.name, color: stored.color };
    }
  } catch {
    // Unreadable or unavailable storage: make a new identity.
  }
  const identity = {
    name: `${pick(animals)} ${Math.floor(Math.random() * 90 + 10)}`,
    color: pick(palette),
  };
  saveIdentity(identity);
  return identity;
}

/// Remembers `identity` for the next visit; silently does nothing without storage.
export function saveIdentity(identity: Identity): void {
  try {
    localStorage.setItem(storageKey, JSON.stringify(identity));
  } catch {
    // Nothing to remember it in; the name still works for this page.
  }
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}
