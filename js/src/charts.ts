// Chart panels: the DOM, controls and markers around each uPlot, redrawn at most once per frame.

import uPlot from "uplot";
import { buildChartData, type ChartContext, finiteCount, placeMarkers, seriesLabel } from "./chartdata";
import { CHART_HEIGHT_PX, type ChartView, chartOptions, flat } from "./chartoptions";
import { h } from "./dom";
import { type ChartSpec, FALLBACK_LOOK, type Marker } from "./protocol";
import type { SeriesStore } from "./store";
import { xCaption } from "./xaxis";

export type RequestFrame = (cb: () => void) => number;
export type CancelFrame = (handle: number) => void;

const FALLBACK_WIDTH_PX = 400;

/**
 * Runs each keyed job at most once per animation frame (later calls replace earlier ones), so
 * however many frames arrive, each chart redraws at most once per animation frame.
 */
export class FrameScheduler {
  private readonly pending = new Map<unknown, () => void>();
  private handle: number | null = null;

  constructor(
    private readonly requestFrame: RequestFrame = (cb) => requestAnimationFrame(cb),
    private readonly cancelFrame: CancelFrame = (id) => cancelAnimationFrame(id),
  ) {}

  schedule(key: unknown, job: () => void): void {
    this.pending.set(key, job);
    if (this.handle === null) this.handle = this.requestFrame(() => this.flush());
  }

  cancel(key: unknown): void {
    this.pending.delete(key);
  }

  /** Run every pending job now (called by the animation frame). */
  flush(): void {
    this.handle = null;
    const jobs = [...this.pending.values()];
    this.pending.clear();
    for (const job of jobs) {
      try {
        job();
      } catch (err) {
        console.warn("trainmeter: redraw failed", err);
      }
    }
  }

  dispose(): void {
    if (this.handle !== null) this.cancelFrame(this.handle);
    this.handle = null;
    this.pending.clear();
  }
}

let warnedChartFailure = false;

/** Whether this page can draw on a 2D canvas (uPlot needs one; some test DOMs lack it). */
export function canvasSupported(): boolean {
  try {
    return document.createElement("canvas").getContext("2d") != null;
  } catch {
    return false;
  }
}

export interface ChartPanel {
  el: HTMLElement;
  setSpec(spec: ChartSpec): void;
  /** Ask for a redraw on the next animation frame. */
  invalidate(): void;
  /** Drop the uPlot instance so the next redraw re-creates it (theme change). */
  rebuild(): void;
  destroy(): void;
}

export function createChartPanel(
  spec: ChartSpec,
  store: SeriesStore,
  scheduler: FrameScheduler,
  context?: () => ChartContext,
): ChartPanel {
  let current = spec;
  const el = h("div", "tm-panel tm-chart");
  el.dataset.tmChart = spec.id;
  el.dataset.tmPoints = "0";
  // a div, not an h3: inside the host's rendered HTML (the live view mounted in the static copy) an h3 takes the
  // host's heading margins and line height, and the panel would change height when the run ends
  const title = h("div", "tm-panel-title");
  title.setAttribute("role", "heading");
  title.setAttribute("aria-level", "3");
  const titleText = h("span", "", spec.title);
  title.append(titleText);
  const view: ChartView = { logY: Boolean(spec.log_y), smoothed: true };
  const tools = h("div", "tm-chart-tools");
  const [logLabel, logBox] = toggle("log-y", " log y", view.logY, (on) => {
    view.logY = on;
    invalidate();
  });
  tools.append(logLabel);
  // shows or hides the kernel's smoothed twins (nothing is computed here); only where the spec has some
  const [smoothLabel] = toggle("smoothing", " smoothed", view.smoothed, (on) => {
    view.smoothed = on;
    invalidate();
  });
  const hasTwins = (s: ChartSpec): boolean => Object.keys(s.smoothed ?? {}).length > 0;
  smoothLabel.hidden = !hasTwins(spec);
  tools.append(smoothLabel);
  title.prepend(tools);
  const plot = h("div", "tm-chart-plot");
  const empty = h("div", "tm-chart-empty", "waiting for data");
  // the x axis' name in the title row (not a line of its own under the plot: the plot keeps that height)
  const caption = h("span", "tm-x-label");
  caption.dataset.tm = "x-label";
  title.append(caption);
  plot.append(empty); // over the plot's reserved height: the panel has its final size from the first frame
  el.append(title, plot);
  let placed: { x: number; marker: Marker }[] = [];
  const markerLayer = h("div", "tm-markers");
  let chart: uPlot | null = null;
  let chartKey = "";
  let failed = false;
  const redrawKey = {};
  const resizeKey = {};

  const width = (): number => plot.clientWidth || el.clientWidth || FALLBACK_WIDTH_PX;

  const positionMarkers = (u: uPlot): void => {
    if (markerLayer.parentElement !== u.over) u.over.append(markerLayer);
    const want = placed.map((p) => `${p.marker.kind}@${p.x}`).join("|");
    if (markerLayer.dataset.key !== want) {
      markerLayer.dataset.key = want;
      markerLayer.replaceChildren(
        ...placed.map(({ marker }) => {
          const m = h("div", "tm-marker");
          m.dataset.tmMarker = marker.kind;
          m.dataset.step = String(marker.step);
          m.title = marker.sentence;
          const flag = h("span", "tm-marker-flag", marker.label);
          flag.title = marker.sentence;
          m.append(flag);
          return m;
        }),
      );
    }
    const width = u.over.clientWidth || u.bbox.width;
    placed.forEach(({ x }, i) => {
      const m = markerLayer.children[i] as HTMLElement | undefined;
      if (!m) return;
      const left = u.valToPos(x, "x");
      const inside = Number.isFinite(left) && left >= -0.5 && left <= width + 0.5;
      m.hidden = !inside;
      m.style.left = `${left.toFixed(1)}px`;
      m.classList.toggle("tm-marker-end", left > width * 0.7);
    });
  };

  const redraw = (): void => {
    const ctx = context?.();
    const look = ctx?.look ?? FALLBACK_LOOK;
    const built = buildChartData(current, store, ctx, view.smoothed);
    view.latest = current.latest;
    const { names, lines, data, points } = built;
    const x = built.x ?? current.x;
    placed = placeMarkers(current, x, ctx);
    el.dataset.tmPoints = String(points);
    el.dataset.tmX = x;
    el.dataset.tmMarkers = String(placed.length);
    setCaption(
      caption,
      xCaption(x, ctx?.axis) + (ctx && x !== ctx.mode ? ` (no ${ctx.mode} mapping yet)` : ""),
    );
    empty.hidden = names.length > 0;
    const sparse = data
      .slice(1)
      .map((col) => finiteCount(col as (number | null)[]) <= look.marker_max_points);
    const labels = lines.map((l) => seriesLabel(current, l.name));
    drawn(el).tmDrawn = { labels, data }; // what is drawn, read by the browser tests (drawn = recorded)
    const key = JSON.stringify([
      x,
      current.unit,
      view.logY,
      lines,
      labels,
      sparse,
      look,
      current.y_range,
      flat(data),
    ]);
    if (names.length === 0 || key !== chartKey) {
      chart?.destroy();
      chart = null;
      chartKey = key;
    }
    if (names.length === 0 || failed) return;
    if (chart) {
      chart.setData(data);
      showNewest(chart);
      positionMarkers(chart);
      return;
    }
    try {
      if (!canvasSupported()) throw new Error("no 2D canvas");
      const options = chartOptions(current, lines, el, width(), view, data, x, look);
      options.hooks = { ...options.hooks, draw: [(u: uPlot) => positionMarkers(u)] };
      options.scales = { ...options.scales, x: { ...options.scales?.x, range: xRange } };
      chart = new uPlot(options, data, plot);
      showNewest(chart);
      positionMarkers(chart);
    } catch (err) {
      failed = true;
      empty.hidden = false;
      empty.textContent = `chart unavailable: ${String(err)}`;
      if (!warnedChartFailure) console.warn("trainmeter: chart failed", err);
      warnedChartFailure = true;
    }
  };

  // the x range reaches a marker past the data (a NaN loss is a gap at the very end)
  const xRange: uPlot.Range.Function = (_u, min, max) => {
    let lo = min;
    let hi = max;
    for (const p of placed) {
      lo = Math.min(lo, p.x);
      hi = Math.max(hi, p.x);
    }
    return lo === hi ? [lo - 1, hi + 1] : [lo, hi];
  };

  const invalidate = (): void => scheduler.schedule(redrawKey, redraw);
  const observer =
    typeof ResizeObserver === "undefined"
      ? null
      : new ResizeObserver(() => {
          scheduler.schedule(resizeKey, () => chart?.setSize({ width: width(), height: CHART_HEIGHT_PX }));
        });
  observer?.observe(plot);
  invalidate();

  return {
    el,
    setSpec(next) {
      if (Boolean(next.log_y) !== Boolean(current.log_y)) {
        view.logY = Boolean(next.log_y);
        logBox.checked = view.logY;
      }
      current = next;
      titleText.textContent = next.title;
      smoothLabel.hidden = !hasTwins(next);
      invalidate();
    },
    invalidate,
    rebuild() {
      chartKey = "";
      invalidate();
    },
    destroy() {
      scheduler.cancel(redrawKey);
      scheduler.cancel(resizeKey);
      observer?.disconnect();
      chart?.destroy();
      chart = null;
    },
  };
}

/** The panel element with the columns its chart draws (x, then one per label). */
function drawn(el: HTMLElement): HTMLElement & { tmDrawn?: { labels: string[]; data: uPlot.AlignedData } } {
  return el;
}

function setCaption(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** Off the chart, the legend shows each series' newest value (under the pointer, the hovered one). */
export function showNewest(chart: uPlot): void {
  if (chart.cursor.idx == null) chart.setLegend({ idx: null as unknown as number });
}

/** Call `onChange` when the host switches light/dark (JupyterLab, Notebook 7, VS Code). */
export function watchTheme(onChange: () => void): () => void {
  if (typeof MutationObserver === "undefined" || !document.body) return () => {};
  const observer = new MutationObserver(onChange);
  observer.observe(document.body, {
    attributes: true,
    attributeFilter: ["class", "data-jp-theme-light", "data-jp-theme-name", "data-vscode-theme-kind"],
  });
  return () => observer.disconnect();
}

/** A chart tool: a labelled checkbox (`data-tm` = `id`) that reports its state on change. */
function toggle(
  id: string,
  text: string,
  checked: boolean,
  onChange: (on: boolean) => void,
): [HTMLLabelElement, HTMLInputElement] {
  const label = h("label", "tm-tool") as HTMLLabelElement;
  const box = document.createElement("input");
  box.type = "checkbox";
  box.checked = checked;
  box.dataset.tm = id;
  label.append(box, document.createTextNode(text));
  box.addEventListener("change", () => onChange(box.checked));
  return [label, box];
}
