// Pure DOM builders for everything but the charts. Each returns a Component whose
// update(state) rewrites its text in place, so elements scripts read (data-tm="step",
// data-tm="status") persist across updates.

import { type Component, h, setText } from "./dom";
import { formatDuration, formatInteger, formatPercent, formatSeconds, formatValue, MISSING } from "./format";
import { INK, lookOf, type PanelSpec, type WidgetState } from "./protocol";
import { createSection } from "./sections";

export type { Component } from "./dom";
export { buildTiles, renderDerivation, tileText } from "./tiles";

// ---- header ----

/** How a finished run ended ("finished in 0:01:02", "failed at step 300: ValueError: ..."); "" while live. */
export function endText(state: WidgetState): string {
  const took = formatDuration(state.elapsed_s ?? 0);
  const step = state.step == null ? MISSING : formatInteger(state.step);
  if (state.status === "completed") return `finished in ${took}`;
  if (state.status === "failed") return `failed at step ${step}${state.error ? `: ${state.error}` : ""}`;
  if (state.status === "interrupted") return `interrupted at step ${step} after ${took}`;
  if (state.status === "stopped") {
    // by a control or an alert (docs/spec.md section 21), in the static view's words (widget/snapshot.py)
    const by = state.controls?.stopped?.by;
    return `stopped${by ? ` by ${by}` : ""} at step ${step} after ${took}`;
  }
  return "";
}

export function buildHeader(): Component {
  const el = h("div", "tm-header");
  const name = h("span", "tm-name");
  const status = h("span", "tm-status");
  status.dataset.tm = "status";
  const elapsed = h("span", "tm-elapsed");
  elapsed.dataset.tm = "elapsed";
  const progress = h("div", "tm-progress");
  const track = h("div", "tm-progress-track");
  const fill = h("div", "tm-progress-fill");
  track.append(fill);
  const progressText = h("span", "tm-progress-text");
  progressText.dataset.tm = "progress";
  progress.append(track, progressText);
  const outcome = h("span", "tm-outcome");
  el.append(name, status, elapsed, outcome, progress);
  return {
    el,
    update(state) {
      setText(name, state.name ?? "");
      const read = state.tiles?.find((t) => t.id === "loss")?.text ?? "nan/inf"; // the loss tile's "nan", "inf"
      const loss = state.loss_state ? ` · loss ${state.loss_state === "diverged" ? "diverged" : read}` : "";
      setText(status, (state.status ?? "") + loss);
      status.dataset.status = state.status ?? "";
      if (state.loss_state) status.dataset.loss = state.loss_state;
      else delete status.dataset.loss;
      setText(elapsed, state.elapsed_s == null ? "" : formatDuration(state.elapsed_s));
      const p = state.progress;
      setText(outcome, p ? "" : endText(state));
      outcome.hidden = !!p || !endText(state);
      progress.hidden = !p;
      if (!p) return;
      const fraction = Math.min(1, Math.max(0, Number(p.fraction) || 0));
      fill.style.width = `${(fraction * 100).toFixed(2)}%`;
      track.setAttribute("aria-valuenow", String(Math.round(fraction * 100)));
      const parts = [formatPercent(fraction)];
      if (p.label) parts.push(p.label);
      const end = endText(state);
      if (end) parts.push(end);
      else if (p.eta_s != null) parts.push(`ETA ${formatDuration(p.eta_s)} (${p.pace} pace)`);
      progressText.dataset.etaS = p.eta_s == null || end ? "" : String(p.eta_s);
      setText(progressText, parts.join(" · "));
    },
  };
}

// ---- phase bar ----

export function buildPhaseBar(key?: string): Component {
  const section = createSection("phases", "Where the time went", key);
  const el = section.el;
  el.classList.add("tm-phases");
  el.dataset.tmPanel = "phases";
  const bar = h("div", "tm-phasebar");
  const legend = h("ul", "tm-phase-legend");
  const detail = h("div", "tm-phase-detail");
  section.body.append(bar, legend, detail);
  let lastDetail = "";
  return {
    el,
    update(state) {
      // the shares and the largest are Python's (widget/view_model.py phase_bar); the seconds are phases_s
      const shares = Object.entries(state.phase_bar?.shares ?? {});
      const top = state.phase_bar?.top;
      el.hidden = shares.length === 0;
      // the time-split extension's table joins the bar: one "where the time goes" section, not two
      const look = lookOf(state);
      const merged = (state.panels ?? []).find((p) => look.merged_panels.includes(p.id));
      const key = JSON.stringify(merged ?? null);
      if (key !== lastDetail) {
        lastDetail = key;
        detail.replaceChildren(...(merged ? panelBody(merged) : []));
      }
      const title = merged ? merged.title : "Where the time went";
      const topShare = top == null ? undefined : state.phase_bar?.shares[top];
      section.setTitle(
        top != null && topShare != null ? `${title} — ${top} ${formatPercent(topShare)}` : title,
      );
      bar.replaceChildren();
      legend.replaceChildren();
      shares.forEach(([name, share], i) => {
        const colour = look.phase_colours[name] ?? look.palette[i % look.palette.length] ?? INK;
        const seg = h("span", "tm-phase");
        seg.dataset.phase = name;
        seg.style.flexGrow = String(share);
        seg.style.background = colour;
        const text = `${name}: ${formatSeconds(state.phases_s?.[name] ?? 0)} (${formatPercent(share)})`;
        seg.title = text;
        bar.append(seg);
        const item = h("li", "tm-phase-item");
        const swatch = h("span", "tm-swatch");
        swatch.style.background = colour;
        item.append(swatch, document.createTextNode(text));
        legend.append(item);
      });
    },
  };
}

// ---- generic key/value panels ----

/** A panel with no value at all (hardware absent here) is one line, not a box. */
export function isAbsent(panel: PanelSpec): boolean {
  if (panel.pending) return false;
  return panel.rows.length === 0 || panel.rows.every((r) => r.value == null);
}

function absentLine(panel: PanelSpec): HTMLElement {
  const el = h("div", "tm-panel-line");
  el.dataset.tmPanel = panel.id;
  const why = panel.note ?? panel.rows.find((r) => r.note)?.note ?? "nothing to show on this machine";
  el.append(h("strong", "", panel.title), document.createTextNode(` — ${why}`));
  return el;
}

function panelBody(panel: PanelSpec): HTMLElement[] {
  const table = h("table", "tm-kv-table");
  for (const row of panel.rows) {
    const tr = h("tr");
    const value =
      typeof row.value === "number"
        ? formatValue(row.value, row.unit)
        : row.value == null
          ? MISSING
          : row.unit
            ? `${row.value} ${row.unit}`
            : row.value;
    const valueCell = h("td", "tm-kv-value", value);
    const meta = h("td", "tm-kv-meta");
    if (row.provenance && row.value != null) {
      const badge = h("span", "tm-badge", row.provenance);
      badge.dataset.provenance = row.provenance;
      meta.append(badge);
    }
    if (row.note) meta.append(h("span", "tm-note", row.note));
    tr.append(h("th", "", row.label), valueCell, meta);
    table.append(tr);
  }
  return panel.note ? [table, h("div", "tm-note", panel.note)] : [table];
}

function renderPanel(panel: PanelSpec, key: string | undefined): HTMLElement {
  if (isAbsent(panel)) return absentLine(panel);
  const section = createSection(`panel:${panel.id}`, panel.title, key);
  const el = section.el;
  el.classList.add("tm-kv");
  el.dataset.tmPanel = panel.id;
  section.body.append(...panelBody(panel));
  return el;
}

export function buildPanels(key?: string): Component {
  const el = h("div", "tm-panels");
  let last = "";
  return {
    el,
    update(state) {
      // the panels shown inside another section (state.look.merged_panels) are not shown on their own
      const merged = lookOf(state).merged_panels;
      const panels = (state.panels ?? []).filter((p) => !merged.includes(p.id));
      const spec = JSON.stringify(panels);
      if (spec === last) return;
      last = spec;
      // the folds are kept in localStorage, so rebuilding keeps which ones are open
      el.replaceChildren(...panels.map((p) => renderPanel(p, key)));
      el.hidden = panels.length === 0;
    },
  };
}

// ---- warnings ----

export function buildWarnings(): Component {
  const el = h("ul", "tm-warnings");
  el.dataset.tm = "warnings";
  return {
    el,
    update(state) {
      const warnings = state.warnings ?? [];
      el.replaceChildren(...warnings.map((w) => h("li", "tm-warning", w)));
      el.hidden = warnings.length === 0;
    },
  };
}
