import type { HistoryApi, HistoryEntry, HistoryPage } from './history_api.js';
import type { AuthorColours } from './history_authors.js';
import type { VersionView } from './history_view.js';

/// How many sessions the timeline loads at a time.
const pageSize = 50;

/// Where the History panel draws itself, all in index.html.
export interface HistoryElements {
  /// The top bar's button that opens and closes the panel.
  toggle: HTMLButtonElement;
  /// The timeline's column (shown in place of the people list) and its list of sessions.
  panel: HTMLElement;
  entries: HTMLElement;
  /// Loads the page of sessions before the oldest shown.
  older: HTMLButtonElement;
  /// How long a pause splits two sessions, in milliseconds (the `gapMs` asked for).
  gap: HTMLSelectElement;
  /// The selected version's column (shown in place of the live editor), with its actions.
  view: HTMLElement;
  title: HTMLElement;
  nameInput: HTMLInputElement;
  name: HTMLButtonElement;
  restore: HTMLButtonElement;
  revertUser: HTMLSelectElement;
  revert: HTMLButtonElement;
  message: HTMLElement;
  /// What the panel hides while it is open: the live editor and the people list.
  hidden: HTMLElement[];
}

/// The History panel: the timeline of sessions (who, when, named versions marked), the
/// selected session's version shown read-only with its changes in each author's colour, and
/// the actions on it: name it, restore it, revert one author's changes in it.
export class HistoryPanel {
  private page: HistoryPage = { entries: [], named: [] };
  private selected: HistoryEntry | null = null;
  /// Counts selections, so that a slow answer for an earlier one is not drawn over a later.
  private selection = 0;

  constructor(
    private readonly api: HistoryApi,
    private readonly el: HistoryElements,
    private readonly version: VersionView,
    private readonly colours: AuthorColours,
  ) {
    el.toggle.addEventListener('click', () => this.setOpen(el.panel.hidden));
    el.gap.addEventListener('change', () => void this.refresh());
    el.older.addEventListener('click', () => void this.loadOlder());
    el.name.addEventListener('click', () => void this.act(() => this.nameSelected()));
    el.restore.addEventListener('click', () => void this.act(() => this.restoreSelected()));
    el.revert.addEventListener('click', () => void this.act(() => this.revertSelected()));
    this.showActions();
  }

  /// Opens the panel (loading the timeline) or closes it (back to the live editor).
  setOpen(open: boolean): void {
    this.el.toggle.setAttribute('aria-pressed', String(open));
    this.el.panel.hidden = !open;
    this.el.view.hidden = !open;
    for (const element of this.el.hidden) element.hidden = open;
    if (open) {
      void this.refresh();
    } else {
      this.selected = null;
      this.version.clear();
      this.showActions();
    }
  }

  /// Reloads the timeline, keeping the selected session selected when it is still there.
  async refresh(): Promise<void> {
    try {
      this.page = await this.api.history(Number(this.el.gap.value), pageSize);
    } catch (err) {
      return this.say(`The history could not be read: ${(err as Error).message}`);
    }
    const keep = this.selected?.toVersion;
    this.selected = this.page.entries.find((entry) => entry.toVersion === keep) ?? null;
    this.el.older.hidden = this.page.entries.length < pageSize;
    this.drawEntries();
    this.showActions();
  }

  /// Adds the page of sessions before the oldest shown.
  private async loadOlder(): Promise<void> {
    const oldest = this.page.entries[this.page.entries.length - 1];
    if (!oldest) return;
    let older: HistoryPage;
    try {
      older = await this.api.history(Number(this.el.gap.value), pageSize, oldest.fromVersion);
    } catch (err) {
      return this.say(`The history could not be read: ${(err as Error).message}`);
    }
    const known = new Set(this.page.named.map((named) => `${named.version} ${named.name}`));
    this.page = {
      entries: [...this.page.entries, ...older.entries],
      named: [
        ...this.page.named,
        ...older.named.filter((named) => !known.has(`${named.version} ${named.name}`)),
      ],
    };
    this.el.older.hidden = older.entries.length < pageSize;
    this.drawEntries();
  }

  private drawEntries(): void {
    const { entries, named } = this.page;
    if (entries.length === 0) {
      const empty = document.createElement('li');
      empty.className = 'history-empty';
      empty.textContent = 'No changes yet.';
      return this.el.entries.replaceChildren(empty);
    }
    this.el.entries.replaceChildren(
      ...entries.map((entry) => {
        const item = document.createElement('li');
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'history-entry';
        button.dataset['from'] = String(entry.fromVersion);
        button.dataset['to'] = String(entry.toVersion);
        button.setAttribute('aria-current', String(entry === this.selected));
        const when = document.createElement('span');
        when.className = 'history-when';
        when.textContent = formatTime(entry.endedAt);
        button.append(when, this.people(entry.users));
        // A named version marks the session that made it.
        for (const version of named) {
          if (version.version <= entry.fromVersion || version.version > entry.toVersion) continue;
          const mark = document.createElement('span');
          mark.className = 'history-named';
          mark.textContent = `★ ${version.name}`;
          mark.title = `Version ${version.version}, named by ${version.user ?? 'anonymous'}`;
          button.append(mark);
        }
        button.addEventListener('click', () => void this.select(entry));
        item.append(button);
        return item;
      }),
    );
  }

  /// Who wrote in a session, each in their colour.
  private people(users: readonly string[]): HTMLElement {
    const who = document.createElement('span');
    who.className = 'history-who';
    if (users.length === 0) who.textContent = 'anonymous';
    for (const user of users) {
      const person = document.createElement('span');
      person.className = 'history-user';
      const dot = document.createElement('span');
      dot.className = 'person-colour';
      dot.style.backgroundColor = this.colours.ofUser(user);
      person.append(dot, user);
      who.append(person);
    }
    return who;
  }

  /// Shows `entry`'s version with the changes since the session before it.
  private async select(entry: HistoryEntry): Promise<void> {
    const selection = ++this.selection;
    this.selected = entry;
    this.drawEntries();
    this.showActions();
    this.say('');
    const { fromVersion, toVersion } = entry;
    try {
      // The older version is only for the words of deleted text, and the changes may be gone
      // where old history was coarsened: the version is shown without them then.
      const [shown, before, diff] = await Promise.all([
        this.api.version(toVersion),
        this.api.version(fromVersion).catch(() => null),
        this.api.changes(fromVersion, toVersion).catch((err: Error) => err),
      ]);
      if (selection !== this.selection) return;
      this.version.show({
        doc: this.version.parse(shown.doc),
        before: before ? this.version.parse(before.doc) : null,
        changes: diff instanceof Error ? [] : diff.changes,
      });
      if (diff instanceof Error) this.say(`Its changes cannot be shown: ${diff.message}`);
      // The colours learnt from the changes, on the timeline's dots too.
      this.drawEntries();
    } catch (err) {
      if (selection === this.selection) this.say((err as Error).message);
    }
  }

  /// Enables the actions that apply to the selection, and titles it.
  private showActions(): void {
    const entry = this.selected;
    this.el.title.textContent = entry
      ? `Version ${entry.toVersion} · ${formatTime(entry.endedAt)}`
      : 'Select a session to see its version.';
    this.el.name.disabled = entry === null;
    this.el.nameInput.disabled = entry === null;
    this.el.restore.disabled = entry === null;
    const users = entry?.users ?? [];
    this.el.revertUser.replaceChildren(
      ...users.map((user) => {
        const option = document.createElement('option');
        option.value = user;
        option.textContent = user;
        return option;
      }),
    );
    this.el.revertUser.disabled = users.length === 0;
    this.el.revert.disabled = users.length === 0;
  }

  private async nameSelected(): Promise<string> {
    const entry = this.selected!;
    const name = this.el.nameInput.value.trim();
    if (!name) return 'Type a name for this version first.';
    await this.api.name(entry.toVersion, name);
    this.el.nameInput.value = '';
    return `Named version ${entry.toVersion} “${name}”.`;
  }

  private async restoreSelected(): Promise<string> {
    const entry = this.selected!;
    const { version } = await this.api.restore(entry.toVersion);
    return `Restored version ${entry.toVersion}: the document is at version ${version} now.`;
  }

  private async revertSelected(): Promise<string> {
    const entry = this.selected!;
    const user = this.el.revertUser.value;
    const result = await this.api.revert(user, entry.fromVersion, entry.toVersion);
    const skipped = result.skipped > 0 ? `; ${result.skipped} no longer applied` : '';
    return `Reverted ${result.reverted} of ${user}’s changes in this session${skipped}.`;
  }

  /// Runs one action at a time, says how it went, and reloads the timeline.
  private async act(action: () => Promise<string>): Promise<void> {
    if (this.selected === null || this.el.view.dataset['busy'] === 'true') return;
    this.el.view.dataset['busy'] = 'true';
    try {
      this.say(await action());
      await this.refresh();
    } catch (err) {
      this.say((err as Error).message);
    } finally {
      delete this.el.view.dataset['busy'];
    }
  }

  private say(message: string): void {
    this.el.message.textContent = message;
  }
}

/// A time of today with its seconds (sessions of one day are often minutes apart); of another
/// day with its date.
function formatTime(ms: number): string {
  const date = new Date(ms);
  if (date.toDateString() === new Date().toDateString()) {
    return date.toLocaleTimeString([], { timeStyle: 'medium' });
  }
  return date.toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
}
