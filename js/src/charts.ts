// uPlot charts fed from the series store. Redraws are coalesced: however many
// frames arrive, each chart redraws at most once per animation frame. Colours, the
// tick rule and the dot threshold are the state's look (widget/look.py); a series the
// spec names a smoothed twin for is drawn faint under it (the kernel computes the twin:
// nothing is smoothed here).

import uPlot from "uplot";
import { h } from "./dom";
import {
  formatAxis,
  formatCompact,
  formatDuration,
  formatInteger,
  formatSeconds,
  formatValue,
  MISSING,
} from "./format";
import { type ChartSpec, FALLBACK_LOOK, type Look, type Marker, type XAxisState } from "./protocol";
import type { SeriesStore } from "./store";
import { linearTicks, logTicks } from "./ticks";
import { canConvert, convertX, remap, type XMapping, type XMode, xCaption } from "./xaxis";

/** What every chart of a view shares: the chosen x, the step mappings, the verdict markers. */
export interface ChartContext {
  mode: XMode;
  mapping: XMapping;
  axis?: XAxisState | null;
  markers: Marker[];
  /** Palette, tick rule, dot threshold (the state's look). */
  look?: Look;
}

export interface ChartView {
  logY: boolean;
  /** Whether the smoothed twins the spec names are drawn (the raw series then faint under them). */
  smoothed: boolean;
}

/** One drawn column: a plain series, a raw one under its twin, or the smoothed twin. */
export interface ChartLine {
  name: string;
  /** Index of its colour in the palette: the raw series' place among the drawn ones. */
  colour: number;
  role: "line" | "raw" | "smoothed";
}

export type RequestFrame = (cb: () => void) => number;
export type CancelFrame = (handle: number) => void;

const CHART_HEIGHT_PX = 180;
const FALLBACK_WIDTH_PX = 400;

/** Runs each keyed job at most once per animation frame (later calls replace earlier ones). */
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

export interface ChartData {
  /** Series drawn, in the spec's order (absent ones and other x kinds skipped); twins not included. */
  names: string[];
  /** One per data column after x: the drawn series and their smoothed twins. */
  lines: ChartLine[];
  data: uPlot.AlignedData;
  /** Total points across the drawn series (twins not counted). */
  points: number;
  /** The x the data is drawn against: the chosen mode, or the chart's own x without a mapping. */
  x?: XMode;
}

/** The x a chart is drawn against under `ctx` (its own x when it cannot be mapped). */
export function drawnX(spec: ChartSpec, ctx?: ChartContext): XMode {
  return ctx && canConvert(spec.x, ctx.mode, ctx.mapping) ? ctx.mode : spec.x;
}

/**
 * Build uPlot's aligned data for a chart; series with different xs are joined. With `smoothed`,
 * a series whose twin (spec.smoothed) is in the store is followed by the twin's column.
 */
export function buildChartData(
  spec: ChartSpec,
  store: SeriesStore,
  ctx?: ChartContext,
  smoothed = true,
): ChartData {
  const tables: uPlot.AlignedData[] = [];
  const names: string[] = [];
  const lines: ChartLine[] = [];
  const x = drawnX(spec, ctx);
  let points = 0;
  const column = (name: string): { xs: number[]; ys: (number | null)[] } | null => {
    const s = store.get(name);
    if (!s || s.x !== spec.x || s.xs.length === 0) return null;
    const mapped = ctx && x !== spec.x ? remap(s.xs, s.ys, spec.x, x, ctx.mapping) : s;
    return mapped.xs.length === 0 ? null : mapped;
  };
  for (const name of spec.series) {
    const raw = column(name);
    if (!raw) continue;
    const twinName = smoothed ? spec.smoothed?.[name] : undefined;
    const twin = twinName ? column(twinName) : null;
    const colour = names.length;
    names.push(name);
    tables.push([raw.xs, raw.ys]);
    lines.push({ name, colour, role: twin ? "raw" : "line" });
    points += raw.xs.length;
    if (twin && twinName) {
      tables.push([twin.xs, twin.ys]);
      lines.push({ name: twinName, colour, role: "smoothed" });
    }
  }
  if (tables.length === 0) return { names, lines, data: [[]], points, x };
  const data = tables.length === 1 ? (tables[0] as uPlot.AlignedData) : uPlot.join(tables);
  return { names, lines, data, points, x };
}

/** Plain lines for series names (one column each, no twins). */
export function plainLines(names: string[]): ChartLine[] {
  return names.map((name, colour) => ({ name, colour, role: "line" as const }));
}

/** The markers of `spec` placed on its drawn x (those the mapping cannot place are left out). */
export function placeMarkers(spec: ChartSpec, ctx?: ChartContext): { x: number; marker: Marker }[] {
  if (!ctx) return [];
  const x = drawnX(spec, ctx);
  const out: { x: number; marker: Marker }[] = [];
  for (const marker of ctx.markers) {
    if (marker.chart !== spec.id || !Number.isFinite(marker.step)) continue;
    const at = convertX(marker.step, "step", x, ctx.mapping);
    if (at != null && Number.isFinite(at)) out.push({ x: at, marker });
  }
  return out;
}

/** The series' legend label: Python's human label, else the raw name. */
export function seriesLabel(spec: ChartSpec, name: string): string {
  return spec.labels?.[name] ?? name;
}

function finiteCount(col: ArrayLike<number | null | undefined>): number {
  let n = 0;
  for (let i = 0; i < col.length; i++) if (Number.isFinite(col[i] as number)) n++;
  return n;
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

function cssVar(el: HTMLElement, name: string, fallback: string): string {
  const value = getComputedStyle(el).getPropertyValue(name).trim();
  return value || fallback;
}

/** X tick labels; a time axis spanning a minute or more uses h:mm:ss for every tick. */
function xTicks(x: XMode, splits: number[]): string[] {
  if (x !== "time") return splits.map((v) => formatCompact(v));
  const long = splits.some((v) => Math.abs(v) >= 60);
  return splits.map((v) => (long ? formatDuration(v) : formatSeconds(v)));
}

function xLabel(x: XMode, v: number): string {
  if (x === "time") return formatSeconds(v);
  return x === "tokens" ? formatCompact(v) : formatInteger(Math.round(v));
}

export function chartOptions(
  spec: ChartSpec,
  lines: ChartLine[],
  el: HTMLElement,
  width: number,
  view: ChartView = { logY: Boolean(spec.log_y), smoothed: true },
  data?: uPlot.AlignedData,
  x: XMode = spec.x,
  look: Look = FALLBACK_LOOK,
): uPlot.Options {
  const fg = cssVar(el, "--tm-fg-muted", "#6e7781");
  const grid = cssVar(el, "--tm-grid", "rgba(128,128,128,0.2)");
  const axis = (values: (u: uPlot, splits: number[]) => string[]): uPlot.Axis => ({
    stroke: fg,
    grid: { stroke: grid, width: 1 },
    ticks: { stroke: grid, width: 1 },
    values,
  });
  const palette = look.palette.length > 0 ? look.palette : FALLBACK_LOOK.palette;
  const series: uPlot.Series[] = [];
  lines.forEach((line, i) => {
    const colour = palette[line.colour % palette.length] ?? "#4e79a7";
    const col = data?.[1 + i];
    const sparse = col != null && finiteCount(col) <= look.marker_max_points;
    const value = (_u: uPlot, v: number | null) => (v == null ? MISSING : formatValue(v, spec.unit));
    const label = seriesLabel(spec, line.name);
    if (line.role === "raw") {
      const faint = `${colour}${look.faint_alpha}`;
      series.push({
        label: `${label} (raw)`,
        stroke: faint,
        width: 1,
        spanGaps: true, // aligned x: a sparse series (val_loss) is null between its points
        value,
        points: { show: sparse, size: 5, fill: faint, stroke: faint },
      });
      return;
    }
    series.push({
      label,
      stroke: colour,
      width: 1.5,
      spanGaps: true, // aligned x: a sparse series (val_loss) is null between its points
      value,
      points: { show: sparse, size: 6, fill: colour },
    });
  });
  const rule = look.ticks;
  const logY = view.logY;
  return {
    width,
    height: CHART_HEIGHT_PX,
    scales: {
      x: { time: false },
      y: logY
        ? {
            distr: 3,
            // the data's own range (uPlot snaps a log range out to whole decades)
            range: (_u, min, max) => (min > 0 && max > 0 ? [min / 1.08, max * 1.08] : [0.1, 1]),
          }
        : { distr: 1 },
    },
    axes: [
      {
        ...axis((_u, splits) => xTicks(x, splits)),
        space: x === "time" ? 80 : 60,
        splits: (_u, _i, min, max) => linearTicks(min, max, x === "time" ? 5 : rule.max_ticks, rule),
      },
      {
        ...axis((_u, splits) => yLabels(splits, spec)),
        size: yAxisSize,
        splits: (_u, _i, min, max) =>
          logY ? logTicks(min, max, undefined, rule) : linearTicks(min, max, undefined, rule),
        // uPlot's log axes blank every label but powers of ten: ours are all chosen to be read
        filter: (_u, splits) => splits,
      },
    ],
    series: [{ label: x, value: (_u, v) => (v == null ? MISSING : xLabel(x, v)) }, ...series],
    cursor: { drag: { x: true, y: false } },
    legend: { show: true },
  };
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
  const title = h("h3", "tm-panel-title");
  const titleText = h("span", "", spec.title);
  title.append(titleText);
  const view: ChartView = { logY: Boolean(spec.log_y), smoothed: true };
  const tools = h("div", "tm-chart-tools");
  const logLabel = h("label", "tm-tool");
  const logBox = document.createElement("input");
  logBox.type = "checkbox";
  logBox.checked = view.logY;
  logBox.dataset.tm = "log-y";
  logLabel.append(logBox, document.createTextNode(" log y"));
  logBox.addEventListener("change", () => {
    view.logY = logBox.checked;
    invalidate();
  });
  tools.append(logLabel);
  // shows or hides the kernel's smoothed twins (nothing is computed here); only where the spec has some
  const smoothLabel = h("label", "tm-tool");
  const smoothBox = document.createElement("input");
  smoothBox.type = "checkbox";
  smoothBox.checked = view.smoothed;
  smoothBox.dataset.tm = "smoothing";
  smoothLabel.append(smoothBox, document.createTextNode(" smoothed"));
  smoothBox.addEventListener("change", () => {
    view.smoothed = smoothBox.checked;
    invalidate();
  });
  const hasTwins = (s: ChartSpec): boolean => Object.keys(s.smoothed ?? {}).length > 0;
  smoothLabel.hidden = !hasTwins(spec);
  tools.append(smoothLabel);
  title.prepend(tools);
  const plot = h("div", "tm-chart-plot");
  const empty = h("div", "tm-chart-empty", "waiting for data");
  const caption = h("div", "tm-x-label");
  caption.dataset.tm = "x-label";
  el.append(title, plot, caption, empty);
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
    const { names, lines, data, points } = built;
    const x = built.x ?? current.x;
    placed = placeMarkers(current, ctx);
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
    const key = JSON.stringify([x, current.unit, view.logY, lines, labels, sparse, look]);
    if (names.length === 0 || key !== chartKey) {
      chart?.destroy();
      chart = null;
      chartKey = key;
    }
    if (names.length === 0 || failed) return;
    if (chart) {
      chart.setData(data);
      positionMarkers(chart);
      return;
    }
    try {
      if (!canvasSupported()) throw new Error("no 2D canvas");
      const options = chartOptions(current, lines, el, width(), view, data, x, look);
      options.hooks = { ...options.hooks, draw: [(u: uPlot) => positionMarkers(u)] };
      options.scales = { ...options.scales, x: { ...options.scales?.x, range: xRange } };
      chart = new uPlot(options, data, plot);
      hideRawLegend(chart);
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

function setCaption(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** The faint raw lines under an EMA keep their colour but leave the legend to the smoothed ones. */
export function hideRawLegend(chart: uPlot): void {
  const rows = chart.root.querySelectorAll<HTMLElement>(".u-legend .u-series");
  chart.series.forEach((series, i) => {
    const row = rows[i];
    if (row && typeof series.label === "string" && series.label.endsWith(" (raw)")) row.hidden = true;
  });
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

/** Y-axis width from its longest tick label (7 px per character plus the tick), never clipped. */
export function yAxisSize(_u: unknown, values: string[] | null): number {
  if (!values || values.length === 0) return 50;
  const longest = Math.max(...values.map((v) => String(v).length));
  return Math.max(40, 18 + 8 * longest);
}

/** Y tick labels (every split is a labelled tick: see ticks.ts); close ticks gain digits. */
export function yLabels(splits: number[], spec: Pick<ChartSpec, "unit" | "log_y">): string[] {
  const labels = splits.map((v) => formatAxis(v, spec.unit));
  if (new Set(labels).size === labels.length) return labels;
  if (spec.unit !== "bytes") {
    const top = Math.max(...splits.map(Math.abs));
    const [div, suffix] =
      top >= 1e12
        ? [1e12, "T"]
        : top >= 1e9
          ? [1e9, "B"]
          : top >= 1e6
            ? [1e6, "M"]
            : top >= 1e3
              ? [1e3, "k"]
              : [1, ""];
    for (let d = 1; d < 8; d++) {
      const more = splits.map((v) => `${(v / div).toFixed(d)}${suffix}`);
      if (new Set(more).size === more.length) return more;
    }
    return labels;
  }
  // close ticks rounded to the same text (1.3 GiB three times): one more digit, in the largest tick's unit
  const top = Math.max(...splits.map(Math.abs));
  const [div, unit] =
    top >= 2 ** 30 ? [2 ** 30, "GiB"] : top >= 2 ** 20 ? [2 ** 20, "MiB"] : [2 ** 10, "KiB"];
  return splits.map((v, i) => (labels[i] === "" ? "" : `${(v / div).toFixed(2)} ${unit}`));
}
