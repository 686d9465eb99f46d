// Tiny DOM helpers shared by the builders.

import type { WidgetState } from "./protocol";

export interface Component {
  el: HTMLElement;
  update(state: WidgetState): void;
}

export function h(tag: string, className = "", text?: string): HTMLElement {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}
