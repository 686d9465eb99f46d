// Number formatting for the widget. Python owns every number; these print them with the
// same text as trainmeter.sizes (docs/spec.md, "Number formats"): the cases in
// tests/fixtures/format_cases.json are checked against both.

/** Shown for a missing value. */
export const MISSING = "—";

/** Whole counts below this print exactly (1,150); from it up, SI (12.3k). */
export const COUNT_EXACT_BELOW = 10_000;

const SI_COUNT = ["", "k", "M", "B", "T"] as const;
const SI_PREFIX = ["", "k", "M", "G", "T", "P", "E"] as const;
const IEC = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"] as const;

function isNum(v: number | null | undefined): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

// -- Python's rounding -------------------------------------------------------------------------
// toFixed/toExponential round an exact tie up; Python rounds it to even (f"{2.5:.0f}" is "2").
// Ties are found from 25 more digits, which every double's tie shows as "5000...".

function tie(rest: string): boolean {
  return /^50*$/.test(rest);
}

/** Python's `f"{v:.{d}f}"`. */
export function pyFixed(v: number, d: number): string {
  const sign = Object.is(v, -0) ? "-" : "";
  const s = v.toFixed(d);
  const long = v.toFixed(Math.min(100, d + 25));
  const dot = long.indexOf(".");
  const cut = d === 0 ? dot : dot + d + 1;
  if (dot >= 0 && tie(long.slice(d === 0 ? dot + 1 : cut))) {
    const kept = long.slice(0, cut);
    if (Number(kept[kept.length - 1]) % 2 === 0) return sign + kept;
  }
  return sign + s;
}

/** Python's `f"{v:.{d}e}"` as mantissa and exponent ("3.00", -4). */
function pyExp(v: number, d: number): [string, number] {
  const [sm = "", se = "0"] = v.toExponential(d).split("e");
  const [lm = "", le = "0"] = v.toExponential(Math.min(100, d + 25)).split("e");
  const dot = lm.indexOf(".");
  const cut = d === 0 ? dot : dot + d + 1;
  if (dot >= 0 && tie(lm.slice(d === 0 ? dot + 1 : cut))) {
    const kept = lm.slice(0, cut);
    if (Number(kept[kept.length - 1]) % 2 === 0) return [kept, Number(le)];
  }
  return [sm, Number(se)];
}

/** Python's `float(f"{v:.{sig}g}")`: `v` rounded to `sig` significant figures. */
function pyRound(v: number, sig: number): number {
  const [m, e] = pyExp(v, sig - 1);
  return Number(`${m}e${e}`);
}

function grouped(n: number): string {
  const text = String(Math.abs(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return n < 0 ? `-${text}` : text;
}

// -- the formatter -----------------------------------------------------------------------------

/** One decimal under 100, none from 100 (12.3, 1.2, 125; 99.96 is 100). */
function mantissa(v: number): string {
  const text = pyFixed(v, 1);
  return Math.abs(Number(text)) >= 100 ? pyFixed(v, 0) : text;
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

/** A scalar (loss, grad norm): 4 significant figures (2.346, 0.0123, 1.23e-5, 12.3k). */
export function formatNumber(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (value === 0) return "0";
  const [m, e] = pyExp(value, 2);
  const a = Math.abs(Number(`${m}e${e}`));
  if (!(a >= 1e-3 && a < 1e15)) return `${m}e${e}`;
  const rounded = pyRound(value, 4);
  if (Math.abs(rounded) >= 10_000) {
    const [text, unit] = scaled(value, 1000, SI_COUNT);
    return `${text}${unit}`;
  }
  return String(rounded);
}

/** A learning rate: 3 significant figures in exponent form (3.00e-04). */
export function formatScientific(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  const [m, e] = pyExp(value, 2);
  return `${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

/** Counts: whole ones below 10,000 exactly (950, 1,150), SI above (12.3k, 125k, 1.2M, 2.0B). */
export function formatCount(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (Math.abs(value) < COUNT_EXACT_BELOW && Number.isInteger(value)) return grouped(value + 0);
  if (Math.abs(value) < 1000) return formatNumber(value);
  const [text, unit] = scaled(value, 1000, SI_COUNT);
  return `${text}${unit}`;
}

/** Two counts on one scale (12.30k, 12.35k), with digits added where they would read the same. */
export function formatCountPair(
  done: number | null | undefined,
  total: number | null | undefined,
): [string, string] {
  let a = formatCount(done);
  let b = formatCount(total);
  if (a !== b || !isNum(done) || !isNum(total) || done === total) return [a, b];
  const unit = b.replace(/^[-0-9.,]+/, "");
  const div = 1000 ** SI_COUNT.indexOf(unit as (typeof SI_COUNT)[number]);
  for (const d of [1, 2, 3]) {
    a = `${pyFixed(done / div, d)}${unit}`;
    b = `${pyFixed(total / div, d)}${unit}`;
    if (a !== b) break;
  }
  return [a, b];
}

/** Axis ticks: SI with up to 3 significant figures, no trailing zeros (1.25k, 2k, 12.5M). */
export function formatCompact(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  if (Math.abs(value) < 1000) return String(pyRound(value, 3));
  let v = value;
  let i = 0;
  while (i < SI_COUNT.length - 1 && Math.abs(pyRound(v, 3)) >= 1000) {
    v /= 1000;
    i += 1;
  }
  return `${pyRound(v, 3)}${SI_COUNT[i] ?? ""}`;
}

/** Integer with thousands separators: 12,345 (used for the step, read by scripts). */
export function formatInteger(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  return grouped(Number(pyFixed(value, 0)) + 0);
}

/** Binary bytes: 512 B, 1.5 KiB, 23.4 GiB. */
export function formatBytes(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  const whole = Number(pyFixed(value, 0)) + 0;
  if (Math.abs(whole) < 1024) return `${whole} B`;
  const [text, unit] = scaled(value, 1024, IEC);
  return `${text} ${unit}`;
}

/** Bytes as a bare GiB number for the text line (71.2; whole from 10 GiB with `whole`: 80). */
export function formatGib(value: number | null | undefined, whole = false): string {
  if (!isNum(value)) return MISSING;
  const gib = value / 2 ** 30;
  return pyFixed(gib, whole && gib >= 10 ? 0 : 1);
}

/** A 0-1 fraction as a percentage: 0.423 -> 42.3%; two decimals below 0.1%. */
export function formatPercent(fraction: number | null | undefined): string {
  if (!isNum(fraction)) return MISSING;
  const pct = fraction * 100;
  return `${pyFixed(pct, pct !== 0 && Math.abs(pct) < 0.1 ? 2 : 1)}%`;
}

/** FLOP counts and rates: 1.2 PFLOP, 312 TFLOP/s. */
export function formatFlops(value: number | null | undefined, perSecond = true): string {
  if (!isNum(value)) return MISSING;
  const [text, prefix] = scaled(value, 1000, SI_PREFIX);
  return `${text} ${prefix}FLOP${perSecond ? "/s" : ""}`;
}

/** Energy with SI prefixes: 512 J, 59.1 kJ, 1.2 MJ. */
export function formatJoules(value: number | null | undefined): string {
  if (!isNum(value)) return MISSING;
  const [text, prefix] = scaled(value, 1000, SI_PREFIX);
  return `${text} ${prefix}J`;
}

/** Power in whole watts: 312 W. */
export function formatWatts(value: number | null | undefined): string {
  return isNum(value) ? `${pyFixed(value, 0)} W` : MISSING;
}

/** Per-second rates: 850 tok/s, 42.2 tok/s, 12.3k tok/s; the bare number when `label` is "". */
export function formatRate(value: number | null | undefined, label = "tok/s"): string {
  if (!isNum(value)) return MISSING;
  let text = mantissa(value);
  if (Math.abs(Number(text)) >= 1000) text = scaled(value, 1000, SI_COUNT).join("");
  return label ? `${text} ${label}` : text;
}

/** Tokens (or samples) per second: {@link formatRate}. */
export const formatTokensPerSecond = formatRate;

/** A clock, h:mm:ss (0:01:15, 27:03:00): elapsed time and ETAs; negative clamps to 0. */
export function formatDuration(seconds: number | null | undefined): string {
  if (!isNum(seconds)) return MISSING;
  const total = Math.max(0, Number(pyFixed(seconds, 0)));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  return `${h}:${String(m).padStart(2, "0")}:${String(s).padStart(2, "0")}`;
}

/** A span: seconds below a minute (0.35 s, 12.5 s), the clock from a minute up. */
export function formatSeconds(seconds: number | null | undefined): string {
  if (!isNum(seconds)) return MISSING;
  const v = Math.max(0, seconds);
  if (Number(pyFixed(v, 1)) >= 60) return formatDuration(v);
  const short = pyRound(v, 2);
  if (short >= 10) return `${pyFixed(v, 1)} s`;
  if (short > 0 && short < 1e-3) return `${Number((v * 1e6).toPrecision(3))} µs`; // 204 µs, never 2.04e-4 s
  if (short > 0 && short < 0.01) return `${Number((v * 1e3).toPrecision(3))} ms`;
  return `${short} s`;
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
      return formatRate(value);
    case "samples/s":
      return formatRate(value, "samples/s");
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
    case "FLOP/sample": // a run counted in samples (images, tabular, audio)
      return isNum(value) ? `${formatFlops(value, false)}/sample` : MISSING;
    case "J":
      return formatJoules(value);
    case "W":
      return formatWatts(value);
    case "lr": // a learning rate: the text line's formatter (3.00e-04), wherever it is shown
      return formatScientific(value);
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
