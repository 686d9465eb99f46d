// The charts' switchable x axis: step, tokens or time. Python sends two monotone
// mappings as ordinary series (widget/x_axis.py): `axis:tokens` (cumulative tokens at
// each step) and `axis:time_s` (seconds since the run began at each step), plus the
// newest live point in state.x_axis.head. A chart drawn against another x than its own
// maps each point through them (linear interpolation; the origin step 0 = 0 tokens =
// 0 s is implied); a point outside the mapped span is left out, and a chart with no
// mapping keeps its own x (its x label says which).

import type { XAxisState, XKind } from "./protocol";
import type { SeriesStore } from "./store";

export type XMode = "step" | "tokens" | "time";
export const X_MODES: XMode[] = ["step", "tokens", "time"];
export const AXIS_TOKENS = "axis:tokens";
export const AXIS_TIME = "axis:time_s";

export interface XMapping {
  steps: number[];
  tokens: number[];
  times: number[];
}

/** The step -> tokens/time mapping from the store (and the live head), origin first. */
export function buildMapping(store: SeriesStore, head?: XAxisState["head"]): XMapping {
  const out: XMapping = { steps: [0], tokens: [0], times: [0] };
  const time = store.get(AXIS_TIME);
  const tok = store.get(AXIS_TOKENS);
  if (time) {
    for (let i = 0; i < time.xs.length; i++) {
      const step = time.xs[i] as number;
      const t = time.ys[i];
      if (t == null || !(step > (out.steps[out.steps.length - 1] as number))) continue;
      out.steps.push(step);
      out.times.push(t);
      out.tokens.push(tok ? (interpolate(tok.xs, tok.ys, step, true) ?? Number.NaN) : Number.NaN);
    }
  }
  if (head && head.step > (out.steps[out.steps.length - 1] as number)) {
    out.steps.push(head.step);
    out.times.push(head.t_s);
    out.tokens.push(head.tokens);
  }
  return out;
}

/** Whether the mapping has any step past the origin. */
export function hasMapping(m: XMapping): boolean {
  return m.steps.length > 1;
}

/**
 * Linear interpolation of a non-decreasing mapping at `x`; null outside [xs[0], xs[n-1]]
 * (`origin` adds the implied point (0, 0) in front).
 */
export function interpolate(
  xs: ArrayLike<number>,
  ys: ArrayLike<number | null>,
  x: number,
  origin = false,
): number | null {
  const n = xs.length + (origin ? 1 : 0);
  const X = (i: number): number => (origin ? (i === 0 ? 0 : (xs[i - 1] as number)) : (xs[i] as number));
  const Y = (i: number): number | null => (origin ? (i === 0 ? 0 : (ys[i - 1] ?? null)) : (ys[i] ?? null));
  if (n === 0 || !Number.isFinite(x) || x < X(0) || x > X(n - 1)) return null;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (X(mid) < x) lo = mid + 1;
    else hi = mid;
  }
  const y1 = Y(lo);
  if (X(lo) === x || lo === 0) return y1;
  const y0 = Y(lo - 1);
  if (y0 == null || y1 == null || !Number.isFinite(y0) || !Number.isFinite(y1)) return null;
  const x0 = X(lo - 1);
  const x1 = X(lo);
  return y0 + ((y1 - y0) * (x - x0)) / (x1 - x0);
}

/** `x` of native kind `from` on the `to` axis, or null when the mapping does not cover it. */
export function convertX(x: number, from: XKind, to: XMode, m: XMapping): number | null {
  if (from === to) return x;
  if (from === "step") {
    return interpolate(m.steps, to === "tokens" ? m.tokens : m.times, x);
  }
  // from time: time -> step or tokens (times are non-decreasing)
  return interpolate(m.times, to === "tokens" ? m.tokens : m.steps, x);
}

/** Whether a chart whose own x is `from` can be drawn against `to` with this mapping. */
export function canConvert(from: XKind, to: XMode, m: XMapping): boolean {
  if (from === to) return true;
  if (!hasMapping(m)) return false;
  if (to === "tokens" || from === "time") {
    const ys = to === "tokens" ? m.tokens : m.steps;
    return ys.slice(1).some((v) => Number.isFinite(v)) && (to !== "tokens" || (m.tokens.at(-1) ?? 0) > 0);
  }
  return true;
}

/** Map a series' xs onto `to`; points the mapping does not cover are left out. */
export function remap(
  xs: number[],
  ys: (number | null)[],
  from: XKind,
  to: XMode,
  m: XMapping,
): { xs: number[]; ys: (number | null)[] } {
  if (from === to) return { xs, ys };
  const outX: number[] = [];
  const outY: (number | null)[] = [];
  let last = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < xs.length; i++) {
    const x = convertX(xs[i] as number, from, to, m);
    if (x == null || !Number.isFinite(x) || x < last) continue;
    last = x;
    outX.push(x);
    outY.push(ys[i] ?? null);
  }
  return { xs: outX, ys: outY };
}

/** The x axis caption of a chart drawn against `mode`. */
export function xCaption(mode: XMode, axis: XAxisState | null | undefined): string {
  if (mode === "tokens") return axis?.tokens_label ?? "tokens (cumulative)";
  if (mode === "time") return axis?.time_label ?? "time since start (s, wall clock)";
  return "step";
}

/** Why `mode` is not available (null when it is). */
export function unavailable(mode: XMode, axis: XAxisState | null | undefined, m: XMapping): string | null {
  if (mode === "step") return null;
  if (mode === "tokens" && axis?.tokens_missing) return axis.tokens_missing;
  if (!hasMapping(m)) return "waiting for the first steps (the step to tokens/time mapping)";
  if (mode === "tokens" && !((m.tokens.at(-1) ?? 0) > 0)) return "no tokens counted yet";
  return null;
}

const PREFIX = "trainmeter.x.";

function storage(): Storage | null {
  try {
    return typeof localStorage === "undefined" ? null : localStorage;
  } catch {
    return null;
  }
}

/** The x mode remembered for widget `key` (default step). */
export function rememberedMode(key: string | undefined): XMode {
  const raw = key ? storage()?.getItem(PREFIX + key) : null;
  return raw === "tokens" || raw === "time" ? raw : "step";
}

export function rememberMode(key: string | undefined, mode: XMode): void {
  if (!key) return;
  try {
    storage()?.setItem(PREFIX + key, mode);
  } catch {
    // a blocked storage only forgets the choice
  }
}
