// uPlot options for one chart: its series' look, scales, axes and their tick labels.

import type uPlot from "uplot";
import { type ChartLine, finiteCount, seriesLabel } from "./chartdata";
import {
  formatAxis,
  formatCompact,
  formatDuration,
  formatInteger,
  formatSeconds,
  formatValue,
  MISSING,
} from "./format";
import { type ChartSpec, FALLBACK_LOOK, INK, type Look } from "./protocol";
import { linearTicks, logTicks } from "./ticks";
import type { XMode } from "./xaxis";

export interface ChartView {
  logY: boolean;
  /** Whether the smoothed twins the spec names are drawn (a light band over the raw series). */
  smoothed: boolean;
  /** The spec's `latest` values, read when the legend is drawn (the newest state's, not the first one's). */
  latest?: ChartSpec["latest"];
}

export const CHART_HEIGHT_PX = 190;

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

/**
 * uPlot's options for `lines`. Colours, the tick rule and the dot threshold are the state's look
 * (widget/look.py); a smoothed twin is a light band over its raw series (the kernel computes the
 * twin: nothing is smoothed here).
 */
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
    const colour = palette[line.colour % palette.length] ?? INK;
    const col = data?.[1 + i];
    const sparse = col != null && finiteCount(col) <= look.marker_max_points;
    // off the chart, the legend reads the newest value (the hovered one under the pointer)
    const value = (u: uPlot, v: number | null, sidx: number, idx: number | null) => {
      const latest = idx == null ? view.latest?.[line.name] : undefined;
      if (typeof latest === "string") return latest; // "nan" / "inf": what was read, as the tile says it
      const shown = idx == null ? (latest ?? lastFinite(u.data[sidx])) : v;
      return shown == null ? MISSING : formatValue(shown, spec.unit);
    };
    const label = seriesLabel(spec, line.name);
    if (line.role === "parent") {
      // a resumed run's earlier runs: faint and thin, under this run's line
      const faint = `${colour}${look.faint_alpha}`;
      series.push({
        label,
        stroke: faint,
        width: 1,
        spanGaps: true,
        value,
        points: { show: sparse, size: 5, fill: faint, stroke: faint },
      });
      return;
    }
    // the loss as read is the named line; its smoothed twin (the kernel's, optim/smoothing.py) a light band over it
    const smoothed = line.role === "smoothed";
    const stroke = smoothed ? `${colour}${look.faint_alpha}` : colour;
    series.push({
      label,
      stroke,
      width: smoothed ? 4 : 1.5,
      spanGaps: true, // aligned x: a sparse series (val_loss) is null between its points
      value,
      points: { show: sparse && !smoothed, size: 6, fill: colour },
    });
  });
  const rule = look.ticks;
  const logY = view.logY && !flat(data); // a constant (an lr never scheduled) on a log axis reads as nothing
  const fixed = spec.y_range;
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
        : spec.unit === "fraction"
          ? // shares and utilisations on their whole 0-100% scale: a 0.5% dip stays a dip, not a cliff
            { distr: 1, range: (_u, _min, max) => [0, Math.max(1, max)] }
          : fixed
            ? // from 0 (rates) or 0 to the device's total (memory): the scale, not the wiggle; a reading past it shows
              { distr: 1, range: (_u, _min, max) => [fixed[0], Math.max(fixed[1] ?? max * 1.05, max) || 1] }
            : { distr: 1 },
    },
    axes: [
      {
        ...axis((_u, splits) => xTicks(x, splits)),
        space: x === "time" ? 80 : 60,
        size: 28, // the tick labels' line: the plot keeps the rest (uPlot's 50 px would leave it less)
        splits: (_u, _i, min, max) => linearTicks(min, max, x === "time" ? 5 : rule.max_ticks, rule),
      },
      {
        ...axis((_u, splits) => yLabels(splits, spec)),
        size: yAxisSize,
        splits: (u, _i, min, max) =>
          logY
            ? spacedLogTicks(logTicks(min, max, undefined, rule), min, max, plotHeightPx(u))
            : linearTicks(min, max, undefined, rule),
        // uPlot's log axes blank every label but powers of ten: ours are all chosen to be read
        filter: (_u, splits) => splits,
      },
    ],
    series: [
      {
        label: x,
        value: (u, v, _sidx, idx) => {
          const shown = idx == null ? lastFinite(u.data[0]) : v;
          return shown == null ? MISSING : xLabel(x, shown);
        },
      },
      ...series,
    ],
    cursor: { drag: { x: true, y: false } },
    legend: { show: true },
  };
}

/** Whether every finite value of the data's y columns is the same one (none: not flat). */
export function flat(data?: uPlot.AlignedData): boolean {
  let first: number | null = null;
  for (const col of data?.slice(1) ?? []) {
    for (const v of Array.from(col as ArrayLike<number | null>)) {
      if (v == null || !Number.isFinite(v)) continue;
      if (first === null) first = v;
      else if (v !== first) return false;
    }
  }
  return first !== null;
}

/** Labels closer than this on a log axis would touch ("1" over "0.8"). */
export const MIN_LABEL_GAP_PX = 16;

function plotHeightPx(u: uPlot | null | undefined): number {
  const ratio = typeof devicePixelRatio === "number" && devicePixelRatio > 0 ? devicePixelRatio : 1;
  const h = u?.bbox?.height ? u.bbox.height / ratio : 0;
  return h > 0 ? h : CHART_HEIGHT_PX - 40;
}

/**
 * Log-axis ticks at least MIN_LABEL_GAP_PX apart on a plot `heightPx` tall: powers of ten first,
 * then the others in order where they leave room.
 */
export function spacedLogTicks(ticks: number[], min: number, max: number, heightPx: number): number[] {
  if (!(min > 0 && max > min) || ticks.length < 2) return ticks;
  const span = Math.log10(max) - Math.log10(min);
  const px = (v: number): number => ((Math.log10(v) - Math.log10(min)) / span) * heightPx;
  const isDecade = (v: number): boolean => Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
  const kept: number[] = ticks.filter(isDecade);
  for (const t of ticks) {
    if (isDecade(t)) continue;
    if (kept.every((k) => Math.abs(px(k) - px(t)) >= MIN_LABEL_GAP_PX)) kept.push(t);
  }
  return kept.sort((a, b) => a - b);
}

/** The last finite value of a column (what the legend shows while the pointer is off the chart). */
export function lastFinite(col: ArrayLike<number | null | undefined> | undefined): number | null {
  if (!col) return null;
  for (let i = col.length - 1; i >= 0; i--) {
    const v = col[i];
    if (typeof v === "number" && Number.isFinite(v)) return v;
  }
  return null;
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
