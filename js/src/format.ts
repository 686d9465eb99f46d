// Number formatting for the widget. Python owns every number; these only print them.

/** Shown for a missing value. */
export const MISSING = "—";

const SI_COUNT = ["", "k", "M", "B", "T"] as const;
const SI_PREFIX = ["", "k", "M", "G", "T", "P", "E"] as const;
const IEC = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"] as const;

function isNum(v: number | null | undefined): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** 3 significant figures at most, one decimal under 100 (12.3, 1.2, 125). */
function mantissa(v: number): string {
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  return v.toFixed(1);
}

/** Scale by `base` through `units`, so that the mantissa is below `base` after rounding. */
function scaled(value: number, base: number, units: readonly string[]): [string, string] {
  let v = value;
  let i = 0;
  while (i < units.length - 1 && Math.abs(v) >= base) {
    v /= base;
    i += 1;
  }
  let text = mantissa(v);
  // 999.96k rounds to "1000": move up one unit instead.
  if (Math.abs(Number(text)) >= base && i < units.length - 1) {
    v /= base;
    i += 1;
    text = mantissa(v);
  }
  return [text, units[i] ?? ""];
}

/** SI counts: 950, 12.3k, 125k, 1.2M, 2.0B. Integers below 1000 print exactly. */
export function formatCount(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (Math.abs(value) < 1000) {
    return Number.isInteger(value) ? String(value) : formatNumber(value);
  }
  const [text, unit] = scaled(value, 1000, SI_COUNT);
  return `${text}${unit}`;
}

/** Axis ticks: SI with up to 3 significant figures, no trailing zeros (1.25k, 2k, 12.5M). */
export function formatCompact(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (Math.abs(value) < 1000) return String(Number(value.toPrecision(3)));
  let v = value;
  let i = 0;
  while (i < SI_COUNT.length - 1 && Math.abs(Number(v.toPrecision(3))) >= 1000) {
    v /= 1000;
    i += 1;
  }
  return `${Number(v.toPrecision(3))}${SI_COUNT[i] ?? ""}`;
}

/** Integer with thousands separators: 12,345 (used for the step, read by scripts). */
export function formatInteger(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  return Math.round(value).toLocaleString("en-US");
}

/** Binary bytes: 512 B, 1.5 KiB, 23.4 GiB. */
export function formatBytes(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (Math.abs(value) < 1024) return `${Math.round(value)} B`;
  const [text, unit] = scaled(value, 1024, IEC);
  return `${text} ${unit}`;
}

/** A 0-1 fraction as a percentage: 0.423 -> 42.3%. */
export function formatPercent(fraction: number | null | undefined): string {
  if (!isNum(fraction)) return MISSING;
  const pct = fraction * 100;
  if (pct !== 0 && Math.abs(pct) < 0.1) return `${pct.toFixed(2)}%`;
  return `${pct.toFixed(1)}%`;
}

/** FLOP counts and rates: 1.2 PFLOP, 312 TFLOP/s. */
export function formatFlops(value: number | null | undefined, perSecond = true): string {
  if (!isNum(value)) return MISSING;
  const [text, prefix] = scaled(value, 1000, SI_PREFIX);
  return `${text} ${prefix}FLOP${perSecond ? "/s" : ""}`;
}

/** Tokens (or samples) per second: 850 tok/s, 12.3k tok/s, 1.2k samples/s. */
export function formatTokensPerSecond(value: number | null | undefined, label = "tok/s"): string {
  if (!isNum(value)) return MISSING;
  const a = Math.abs(value);
  const text = a < 1000 ? (a >= 100 ? value.toFixed(0) : value.toFixed(1)) : formatCount(value);
  return `${text} ${label}`;
}

/** Duration as h:mm:ss (0:02:05, 27:03:00); negative durations clamp to 0. */
export function formatDuration(seconds: number | null | undefined): string {
  if (!isNum(seconds)) return MISSING;
  const total = Math.max(0, Math.round(seconds));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  return `${h}:${String(m).padStart(2, "0")}:${String(s).padStart(2, "0")}`;
}

/** Seconds for short spans (0.35 s, 12.5 s), h:mm:ss from a minute up. */
export function formatSeconds(seconds: number | null | undefined): string {
  if (!isNum(seconds)) return MISSING;
  if (Math.abs(seconds) >= 60) return formatDuration(seconds);
  if (Math.abs(seconds) >= 10) return `${seconds.toFixed(1)} s`;
  return `${Number(seconds.toPrecision(2))} s`;
}

/** A plain number with 4 significant figures: 2.346, 0.0123, 1.23e-5, 12.3k. */
export function formatNumber(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  const a = Math.abs(value);
  if (a === 0) return "0";
  if (a >= 10_000) return formatCount(value);
  if (a < 1e-3) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
}

/** Format a value in one of the protocol's units (docs/protocol.md, `tiles.unit`). */
export function formatValue(value: number | null | undefined, unit: string): string {
  switch (unit) {
    case "count":
    case "tokens":
    case "1": // a derivation's dimensionless count (devices, params)
      return formatCount(value);
    case "bytes":
      return formatBytes(value);
    case "s":
      return formatSeconds(value);
    case "tokens/s":
      return formatTokensPerSecond(value);
    case "samples/s":
      return formatTokensPerSecond(value, "samples/s");
    case "fraction":
      return formatPercent(value);
    case "flop":
    case "FLOP":
      return formatFlops(value, false);
    case "flop/s":
    case "FLOP/s":
      return formatFlops(value, true);
    case "FLOP/token": // a derivation's unit: the same FLOPs formatter, never "728B FLOP/token"
      return isNum(value) ? `${formatFlops(value, false)}/token` : MISSING;
    case "":
      return formatNumber(value);
    default:
      return isNum(value) ? `${formatNumber(value)} ${unit}` : MISSING;
  }
}

/** Compact axis labels for a chart in `unit` (no unit suffix where the title says it). */
export function formatAxis(value: number, unit: string): string {
  switch (unit) {
    case "bytes":
      return formatBytes(value);
    case "fraction":
      return formatPercent(value);
    case "s":
      return formatSeconds(value);
    case "flop/s":
    case "flop": {
      const [text, prefix] = scaled(value, 1000, SI_PREFIX);
      return `${text}${prefix}`;
    }
    default:
      return Math.abs(value) >= 1000 ? formatCompact(value) : formatNumber(value);
  }
}
