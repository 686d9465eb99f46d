// What a chart draws: the store's series joined on the chosen x, their smoothed twins, its markers.

import uPlot from "uplot";
import type { ChartSpec, Look, Marker, XAxisState } from "./protocol";
import type { SeriesStore } from "./store";
import { canConvert, convertX, remap, type XMapping, type XMode } from "./xaxis";

/** What every chart of a view shares: the chosen x, the step mappings, the verdict markers. */
export interface ChartContext {
  mode: XMode;
  mapping: XMapping;
  axis?: XAxisState | null;
  markers: Marker[];
  /** Palette, tick rule, dot threshold (the state's look). */
  look?: Look;
}

/** One drawn column: a plain series, a raw one under its twin, or the smoothed twin. */
export interface ChartLine {
  name: string;
  /** Index of its colour in the palette: the raw series' place among the drawn ones. */
  colour: number;
  role: "line" | "raw" | "smoothed";
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

/** How many values of a column are finite (a sparse column is drawn with dots). */
export function finiteCount(col: ArrayLike<number | null | undefined>): number {
  let n = 0;
  for (let i = 0; i < col.length; i++) if (Number.isFinite(col[i] as number)) n++;
  return n;
}
