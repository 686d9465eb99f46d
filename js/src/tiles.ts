// Tiles (step, tokens, tok/s, loss, memory, ...) and the popover that shows a
// tile's derivation: formula and inputs with their provenance.

import { type Component, h, setText } from "./dom";
import { formatInteger, formatValue, MISSING } from "./format";
import type { Derivation, Tile } from "./protocol";

interface TileView {
  root: HTMLElement;
  labelText: HTMLElement;
  value: HTMLElement;
  sub: HTMLElement;
  badge: HTMLElement;
  tile: Tile;
}

export function tileText(tile: Tile): string {
  if (tile.text) return tile.text;
  if (tile.value == null) return MISSING;
  return tile.id === "step" ? formatInteger(tile.value) : formatValue(tile.value, tile.unit);
}

function makeTile(id: string, onToggle: (id: string) => void): TileView {
  const root = h("div", "tm-tile");
  root.dataset.tmTile = id;
  const label = h("div", "tm-tile-label");
  const labelText = h("span", "tm-tile-label-text");
  const badge = h("span", "tm-badge");
  label.append(labelText, badge);
  const value = h("div", "tm-tile-value");
  if (id === "step") value.dataset.tm = "step";
  const sub = h("div", "tm-tile-sub");
  root.append(label, value, sub);
  const toggle = (): void => {
    if (root.classList.contains("tm-tile--derivable")) onToggle(id);
  };
  root.addEventListener("click", toggle);
  root.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      toggle();
    }
  });
  return { root, labelText, value, sub, badge, tile: { id, label: "", value: null, unit: "" } };
}

function updateTile(view: TileView, tile: Tile): void {
  view.tile = tile;
  setText(view.labelText, tile.label);
  view.labelText.title = tile.label; // two lines at most: the whole label on hover
  setText(view.badge, tile.provenance ?? "");
  // a badge qualifies a value: none on a missing one
  view.badge.hidden = !tile.provenance || (tile.value == null && !tile.text);
  view.badge.dataset.provenance = tile.provenance ?? "";
  const text = tileText(tile);
  setText(view.value, text);
  if (tile.value != null) view.value.dataset.value = String(tile.value);
  else delete view.value.dataset.value;
  const missing = tile.value == null && !tile.text;
  view.root.classList.toggle("tm-tile--missing", missing);
  view.root.classList.toggle("tm-tile--alert", !!tile.alert);
  const subText = missing ? (tile.missing ?? "") : (tile.sub ?? "");
  setText(view.sub, subText);
  view.sub.title = subText; // clamped to one line: the whole text on hover
  const derivable = tileDerivations(tile).length > 0;
  view.root.classList.toggle("tm-tile--derivable", derivable);
  if (derivable) {
    view.root.setAttribute("role", "button");
    view.root.tabIndex = 0;
    view.root.title = "Show how this is computed";
  } else {
    view.root.removeAttribute("role");
    view.root.removeAttribute("tabindex");
    view.root.removeAttribute("title");
  }
}

/** What a tile's popover works out: its `derivations`, else its one `derivation`. */
export function tileDerivations(tile: Tile): Derivation[] {
  if (tile.derivations && tile.derivations.length > 0) return tile.derivations;
  return tile.derivation ? [tile.derivation] : [];
}

export function renderDerivation(into: HTMLElement, d: Derivation): void {
  into.replaceChildren();
  const head = h("div", "tm-deriv-head");
  head.append(h("strong", "", d.name), document.createTextNode(` = ${formatValue(d.value, d.unit)}`));
  const formula = h("code", "tm-deriv-formula", d.formula);
  formula.dataset.tm = "formula";
  into.append(head, formula);
  if (d.inputs.length > 0) {
    const table = h("table", "tm-deriv-inputs");
    const headRow = h("tr");
    for (const col of ["input", "value", "provenance", "source"]) headRow.append(h("th", "", col));
    table.append(headRow);
    for (const inp of d.inputs) {
      const row = h("tr");
      row.dataset.input = inp.name;
      const value = typeof inp.value === "number" ? formatValue(inp.value, inp.unit) : (inp.value ?? MISSING);
      const provCell = h("td");
      if (inp.value != null) {
        // a badge qualifies a value: none on a missing input
        const prov = h("span", "tm-badge", inp.provenance);
        prov.dataset.provenance = inp.provenance;
        provCell.append(prov);
      }
      row.append(h("td", "tm-mono", inp.name), h("td", "", value), provCell, h("td", "", inp.source ?? ""));
      table.append(row);
    }
    into.append(table);
  }
  if (d.missing) into.append(h("div", "tm-deriv-missing", `Missing: ${d.missing}`));
  else if (d.provenance_note) {
    const note = h("div", "tm-deriv-provenance", `Provenance ${d.provenance_note}`);
    note.dataset.tm = "provenance";
    into.append(note);
  }
}

/** The line that replaces the tiles that do not apply here: "Not on this machine: MFU, Energy (why)". */
export function notHereText(tiles: Tile[]): string {
  if (tiles.length === 0) return "";
  return `Not on this machine: ${tiles.map((t) => t.label).join(", ")} (why)`;
}

export function buildTiles(): Component {
  const el = h("div", "tm-tiles-wrap");
  const grid = h("div", "tm-tiles");
  const popover = h("div", "tm-popover");
  popover.dataset.tm = "derivation";
  popover.hidden = true;
  // one line (its reasons, whole, one click away): the dashboard keeps its height whatever they say
  const notHere = document.createElement("details");
  notHere.className = "tm-not-here";
  notHere.dataset.tm = "not-here";
  notHere.hidden = true;
  const notHereSummary = document.createElement("summary");
  const notHereWhy = h("div", "tm-not-here-why");
  notHere.append(notHereSummary, notHereWhy);
  el.append(grid, notHere, popover);
  const views = new Map<string, TileView>();
  let openId: string | null = null;

  const showPopover = (): void => {
    const view = openId === null ? undefined : views.get(openId);
    const ds = view ? tileDerivations(view.tile) : [];
    for (const v of views.values()) v.root.setAttribute("aria-expanded", String(v === view && ds.length > 0));
    if (!view || ds.length === 0) {
      openId = null;
      popover.hidden = true;
      return;
    }
    popover.replaceChildren();
    for (const d of ds) {
      const block = h("div", "tm-deriv");
      renderDerivation(block, d);
      popover.append(block);
    }
    popover.dataset.tile = view.tile.id;
    popover.hidden = false;
  };
  const onToggle = (id: string): void => {
    openId = openId === id ? null : id;
    showPopover();
  };

  return {
    el,
    update(state) {
      const all = state.tiles ?? [];
      // tiles that do not apply on this machine fold into one line that says why (no dead tiles)
      const folded = all.filter((t) => t.not_here && t.value == null && !t.text);
      const tiles = all.filter((t) => !folded.includes(t));
      setText(notHereSummary, notHereText(folded));
      const why = folded.map((t) => `${t.label}: ${t.missing ?? "not available"}`);
      if (notHereWhy.dataset.key !== why.join("\n")) {
        notHereWhy.dataset.key = why.join("\n");
        notHereWhy.replaceChildren(...why.map((line) => h("div", "", line)));
      }
      notHere.hidden = folded.length === 0;
      const seen = new Set<string>();
      for (const tile of tiles) {
        let view = views.get(tile.id);
        if (!view) {
          view = makeTile(tile.id, onToggle);
          views.set(tile.id, view);
        }
        updateTile(view, tile);
        grid.append(view.root); // re-append keeps the state's order
        seen.add(tile.id);
      }
      for (const [id, view] of views) {
        if (!seen.has(id)) {
          view.root.remove();
          views.delete(id);
        }
      }
      el.hidden = tiles.length === 0;
      showPopover();
    },
  };
}
