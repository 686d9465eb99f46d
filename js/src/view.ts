// The dashboard layout of one view: header, tiles, chart grid, phase bar,
// generic panels and warnings, all inside a root element of class `trainmeter`.

import type { ChartContext } from "./chartdata";
import { type ChartPanel, createChartPanel, FrameScheduler, watchTheme } from "./charts";
import { buildControls } from "./controls";
import { type Component, h, setText } from "./dom";
import { buildHeader, buildPanels, buildPhaseBar, buildTiles, buildWarnings } from "./panels";
import {
  type ChartSpec,
  type ControlMessage,
  lookOf,
  setFallbackColours,
  type WidgetState,
} from "./protocol";
import { buildRunLinks } from "./runlinks";
import { createSection } from "./sections";
import type { SeriesStore } from "./store";
import { rememberedMode, rememberMode, unavailable, X_MODES, type XMode } from "./xaxis";

export interface View {
  root: HTMLElement;
  update(state: WidgetState | null | undefined): void;
  /** Redraw every chart on the next animation frame (the store changed). */
  invalidateCharts(): void;
  destroy(): void;
}

export interface ViewOptions {
  scheduler?: FrameScheduler;
  /** The widget's store_key: which sections are open is remembered under it. */
  key?: string;
  /** The widget's comm, for the header's Stop / Checkpoint (controls.ts). */
  send?: (msg: ControlMessage) => void;
}

export function createView(store: SeriesStore, options: ViewOptions = {}): View {
  const scheduler = options.scheduler ?? new FrameScheduler();
  const root = h("div", "trainmeter");
  setFallbackColours(root);
  const header = buildHeader();
  const tiles = buildTiles();
  const chartGrid = h("div", "tm-charts");
  let state: WidgetState = { name: "", status: "starting" };
  let mode: XMode = rememberedMode(options.key);
  const context = (): ChartContext => {
    return {
      mode: unavailable(mode, state.x_axis) && mode === "tokens" ? "step" : mode,
      axis: state.x_axis,
      markers: state.markers ?? [],
      look: lookOf(state),
    };
  };
  const xControl = h("div", "tm-xaxis");
  xControl.dataset.tm = "x-axis";
  xControl.append(h("span", "tm-xaxis-title", "x axis"));
  const xButtons = new Map<XMode, HTMLButtonElement>();
  for (const m of X_MODES) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "tm-xaxis-choice";
    b.textContent = m;
    b.dataset.tmX = m;
    b.addEventListener("click", () => {
      if (b.disabled || mode === m) return;
      mode = m;
      rememberMode(options.key, m);
      syncXControl();
      for (const { panel } of charts.values()) panel.invalidate();
    });
    xButtons.set(m, b);
    xControl.append(b);
  }
  const syncXControl = (): void => {
    const shown = context().mode;
    for (const [choice, b] of xButtons) {
      const why = unavailable(choice, state.x_axis);
      // tokens is off with the reason while no token is counted; time waits for the first steps too
      b.disabled = choice === "tokens" && why != null;
      b.title =
        why ??
        (choice === "step"
          ? "optimizer steps"
          : choice === "tokens"
            ? (state.x_axis?.tokens_label ?? "tokens")
            : (state.x_axis?.time_label ?? "time"));
      b.setAttribute("aria-pressed", String(choice === shown));
      if (choice === "tokens") setText(b, (state.x_axis?.tokens_label ?? "tokens").split(" ")[0] ?? "tokens");
    }
  };
  const more = createSection("charts", "More charts", options.key);
  const moreGrid = h("div", "tm-charts");
  more.body.append(moreGrid);
  const phases = buildPhaseBar(options.key);
  const panels = buildPanels(options.key);
  const warnings = buildWarnings();
  const links = buildRunLinks(); // the run folder and passport.md, under the header
  const controls = buildControls({ send: options.send }); // Stop / Checkpoint in the header, the alerts' banner
  header.el.append(controls.el);
  const components: Component[] = [header, controls, links, tiles, phases, panels, warnings];
  root.append(header.el, links.el, tiles.el, warnings.el, xControl, chartGrid, more.el, phases.el, panels.el);
  header.el.after(controls.banner);

  const charts = new Map<string, { spec: string; panel: ChartPanel }>();

  const updateCharts = (specs: ChartSpec[]): void => {
    const seen = new Set<string>();
    const main = lookOf(state).main_charts; // the first screen; the others fold into "More charts"
    for (const spec of specs) {
      const key = JSON.stringify(spec);
      let entry = charts.get(spec.id);
      if (!entry) {
        entry = { spec: key, panel: createChartPanel(spec, store, scheduler, context) };
        charts.set(spec.id, entry);
      } else if (entry.spec !== key) {
        entry.spec = key;
        entry.panel.setSpec(spec);
      }
      // re-append keeps the state's order
      (main.includes(spec.id) ? chartGrid : moreGrid).append(entry.panel.el);
      seen.add(spec.id);
    }
    for (const [id, entry] of charts) {
      if (!seen.has(id)) {
        entry.panel.destroy();
        entry.panel.el.remove();
        charts.delete(id);
      }
    }
    chartGrid.hidden = chartGrid.childElementCount === 0;
    xControl.hidden = charts.size === 0;
    const extra = moreGrid.childElementCount;
    more.el.hidden = extra === 0;
    more.setTitle(`More charts (${extra})`);
  };

  const stopTheme = watchTheme(() => {
    for (const { panel } of charts.values()) panel.rebuild();
  });

  return {
    root,
    update(next) {
      const s: WidgetState = next ?? { name: "", status: "starting" };
      const marks = JSON.stringify([s.markers ?? [], s.x_axis ?? null]);
      const changed = marks !== JSON.stringify([state.markers ?? [], state.x_axis ?? null]);
      state = s;
      root.dataset.status = s.status ?? "";
      for (const c of components) {
        try {
          c.update(s);
        } catch (err) {
          console.warn("trainmeter: panel update failed", err);
        }
      }
      updateCharts(s.charts ?? []);
      syncXControl();
      if (changed) for (const { panel } of charts.values()) panel.invalidate();
    },
    invalidateCharts() {
      syncXControl();
      for (const { panel } of charts.values()) panel.invalidate();
    },
    destroy() {
      stopTheme();
      for (const { panel } of charts.values()) panel.destroy();
      charts.clear();
      scheduler.dispose();
      root.remove();
    },
  };
}
