// The dashboard layout of one view: header, tiles, chart grid, phase bar,
// generic panels and warnings, all inside a root element of class `trainmeter`.

import { type ChartPanel, createChartPanel, FrameScheduler, watchTheme } from "./charts";
import { type Component, h } from "./dom";
import { buildHeader, buildPanels, buildPhaseBar, buildTiles, buildWarnings } from "./panels";
import type { ChartSpec, WidgetState } from "./protocol";
import { buildRunLinks } from "./runlinks";
import { createSection } from "./sections";
import type { SeriesStore } from "./store";

/** Charts on the first screen; the others fold into "More charts". */
export const MAIN_CHARTS = new Set(["loss", "throughput"]);

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
}

export function createView(store: SeriesStore, options: ViewOptions = {}): View {
  const scheduler = options.scheduler ?? new FrameScheduler();
  const root = h("div", "trainmeter");
  const header = buildHeader();
  const tiles = buildTiles();
  const chartGrid = h("div", "tm-charts");
  const more = createSection("charts", "More charts", options.key);
  const moreGrid = h("div", "tm-charts");
  more.body.append(moreGrid);
  const phases = buildPhaseBar(options.key);
  const panels = buildPanels(options.key);
  const warnings = buildWarnings();
  const links = buildRunLinks(); // the run folder and passport.md, under the header
  const components: Component[] = [header, links, tiles, phases, panels, warnings];
  root.append(header.el, links.el, tiles.el, warnings.el, chartGrid, more.el, phases.el, panels.el);

  const charts = new Map<string, { spec: string; panel: ChartPanel }>();

  const updateCharts = (specs: ChartSpec[]): void => {
    const seen = new Set<string>();
    for (const spec of specs) {
      const key = JSON.stringify(spec);
      let entry = charts.get(spec.id);
      if (!entry) {
        entry = { spec: key, panel: createChartPanel(spec, store, scheduler) };
        charts.set(spec.id, entry);
      } else if (entry.spec !== key) {
        entry.spec = key;
        entry.panel.setSpec(spec);
      }
      // re-append keeps the state's order
      (MAIN_CHARTS.has(spec.id) ? chartGrid : moreGrid).append(entry.panel.el);
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
    const extra = moreGrid.childElementCount;
    more.el.hidden = extra === 0;
    more.setTitle(`More charts (${extra})`);
  };

  const stopTheme = watchTheme(() => {
    for (const { panel } of charts.values()) panel.rebuild();
  });

  return {
    root,
    update(state) {
      const s: WidgetState = state ?? { name: "", status: "starting" };
      root.dataset.status = s.status ?? "";
      for (const c of components) {
        try {
          c.update(s);
        } catch (err) {
          console.warn("trainmeter: panel update failed", err);
        }
      }
      updateCharts(s.charts ?? []);
    },
    invalidateCharts() {
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
