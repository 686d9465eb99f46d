// What a chart draws: the store's series joined on the chosen x, their smoothed twins, its markers.

import uPlot from "uplot";
import type { ChartSpec, Look, Marker, XAxisState, XMode } from "./protocol";
import type { SeriesStore, StoredSeries } from "./store";

/** What every chart of a view shares: the chosen x, the axes' labels, the verdict markers. */
export interface ChartContext {
  mode: XMode;
  axis?: XAxisState | null;
  markers: Marker[];
  /** Palette, tick rule, dot threshold (the state's look). */
  look?: Look;
}

/** One drawn column: a series as read, or the smoothed twin drawn light over it. */
export interface ChartLine {
  name: string;
  /** Index of its colour in the palette: the raw series' place among the drawn ones. */
  colour: number;
  role: "line" | "smoothed" | "parent";
}

export interface ChartData {
  /** Series drawn, in the spec's order (absent ones and other x kinds skipped); twins not included. */
  names: string[];
  /** One per data column after x: the drawn series and their smoothed twins. */
  lines: ChartLine[];
  data: uPlot.AlignedData;
  /** Total points across the drawn series (twins not counted). */
  points: number;
  /** The x the data is drawn against: the chosen mode, or the chart's own x when its series lack it. */
  x?: XMode;
}

/** The x a chart is drawn against under `ctx`: the chosen one when its series came with it, else its own. */
export function drawnX(spec: ChartSpec, store: SeriesStore, ctx?: ChartContext): XMode {
  if (!ctx || ctx.mode === spec.x) return spec.x;
  const mode = ctx.mode;
  return spec.series.some((name) => store.get(name)?.mapped[mode]?.some(Number.isFinite)) ? mode : spec.x;
}

/**
 * A series' points against `x` as Python placed them: the points not placed there are left out,
 * and so is one that would step back (uPlot draws x in order).
 */
export function pointsOn(s: StoredSeries, x: XMode): { xs: number[]; ys: (number | null)[] } {
  if (x === s.x) return s;
  const column = s.mapped[x] ?? [];
  const xs: number[] = [];
  const ys: (number | null)[] = [];
  let last = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < column.length; i++) {
    const at = column[i] as number;
    if (!Number.isFinite(at) || at < last) continue;
    last = at;
    xs.push(at);
    ys.push(s.ys[i] ?? null);
  }
  return { xs, ys };
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
  const x = drawnX(spec, store, ctx);
  let points = 0;
  const column = (name: string): { xs: number[]; ys: (number | null)[] } | null => {
    const s = store.get(name);
    if (!s || s.x !== spec.x || s.xs.length === 0) return null;
    const drawn = pointsOn(s, x);
    return drawn.xs.length === 0 ? null : drawn;
  };
  for (const name of spec.series) {
    const raw = column(name);
    if (!raw) continue;
    const twinName = smoothed ? spec.smoothed?.[name] : undefined;
    const twin = twinName ? column(twinName) : null;
    // a resumed run's earlier runs (`<series>.parent`): faint, in the colour of the series it continues
    const parent = name.endsWith(".parent");
    const colour = parent ? 0 : names.length;
    names.push(name);
    tables.push([raw.xs, raw.ys]);
    lines.push({ name, colour, role: parent ? "parent" : "line" });
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

/** The markers of `spec` on its drawn x `x`, where Python placed them (those it could not are left out). */
export function placeMarkers(spec: ChartSpec, x: XMode, ctx?: ChartContext): { x: number; marker: Marker }[] {
  if (!ctx) return [];
  const out: { x: number; marker: Marker }[] = [];
  for (const marker of ctx.markers) {
    if (marker.chart !== spec.id) continue;
    const at = x === "step" ? marker.step : marker.at?.[x];
    if (at != null && Number.isFinite(at)) out.push({ x: at, marker });
  }
  return out;
}

/** The series' legend label: Python's human label, else the raw name. */
export function seriesLabel(spec: ChartSpec, name: string): string {
  return spec.labels?.[name] ?? name;
}

/** How many values of a column are finite (a sparse column is drawn with dots). */
export function finiteCount(col: ArrayLike<number | null | undefined>): number {
  let n = 0;
  for (let i = 0; i < col.length; i++) if (Number.isFinite(col[i] as number)) n++;
  return n;
}
