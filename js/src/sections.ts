// Folded sections: everything past the first screen (time split, more charts, node,
// GPU, compute detail) sits in a <details> the user opens. Which ones are open is
// remembered per widget (its store_key) in localStorage, so a re-created view or a
// reload keeps them.

import { h } from "./dom";

const PREFIX = "trainmeter.open.";

function storage(): Storage | null {
  try {
    return typeof localStorage === "undefined" ? null : localStorage;
  } catch {
    return null; // sandboxed frames throw on access
  }
}

/** The ids of the open sections of widget `key`. */
export function openSections(key: string | undefined): Set<string> {
  const raw = key ? storage()?.getItem(PREFIX + key) : null;
  try {
    const ids: unknown = raw ? JSON.parse(raw) : [];
    return new Set(Array.isArray(ids) ? ids.filter((x): x is string => typeof x === "string") : []);
  } catch {
    return new Set();
  }
}

function remember(key: string | undefined, id: string, open: boolean): void {
  if (!key) return;
  const ids = openSections(key);
  if (open) ids.add(id);
  else ids.delete(id);
  try {
    storage()?.setItem(PREFIX + key, JSON.stringify([...ids]));
  } catch {
    // a full or blocked storage only loses the memory of folds
  }
}

export interface Section {
  el: HTMLDetailsElement;
  body: HTMLElement;
  setTitle(title: string): void;
}

export function createSection(id: string, title: string, key: string | undefined): Section {
  const el = h("details", "tm-section") as HTMLDetailsElement;
  el.dataset.tmSection = id;
  const summary = h("summary", "tm-section-title", title);
  const body = h("div", "tm-section-body");
  el.append(summary, body);
  el.open = openSections(key).has(id);
  el.addEventListener("toggle", () => remember(key, id, el.open));
  return {
    el,
    body,
    setTitle(next) {
      if (summary.textContent !== next) summary.textContent = next;
    },
  };
}
