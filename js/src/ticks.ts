// Axis ticks people can read: 4 to 6 labelled values inside the data, linear or log.
// The same rules as src/trainmeter/widget/ticks.py (the static snapshot's charts).

export const MAX_TICKS = 6;
export const MIN_TICKS = 4;
const LOG_MULTS = [[1, 2, 3, 4, 5, 6, 8], [1, 2, 4, 6, 8], [1, 2, 5], [1, 3], [1]] as const;

const round12 = (v: number): number => Number(v.toPrecision(12));

function withStep(lo: number, hi: number, step: number): number[] {
  const out: number[] = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(round12(k * step));
  return out;
}

export function linearTicks(lo: number, hi: number, maxTicks = MAX_TICKS): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) return [lo];
  const top = Math.floor(Math.log10(hi - lo));
  let best: { score: number; ticks: number[] } | null = null;
  for (let power = top - 2; power < top + 2; power++) {
    [1, 2, 5, 2.5].forEach((mult, rank) => {
      const ticks = withStep(lo, hi, mult * 10 ** power);
      if (ticks.length < 2 || ticks.length > maxTicks) return;
      const short = ticks.length < MIN_TICKS ? MIN_TICKS - ticks.length : 0;
      const score = 10 * short + Math.abs(ticks.length - 5) + (rank === 3 ? 1.5 : 0);
      if (!best || score < best.score) best = { score, ticks };
    });
  }
  return (best as { ticks: number[] } | null)?.ticks ?? [lo, hi];
}

export function logTicks(lo: number, hi: number, maxTicks = MAX_TICKS): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi) || lo <= 0 || hi <= 0) return [];
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi / lo < 3) return linearTicks(lo, hi, maxTicks);
  for (let i = 0; i < LOG_MULTS.length; i++) {
    const ticks: number[] = [];
    for (let e = Math.floor(Math.log10(lo)) - 1; e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of LOG_MULTS[i] ?? []) {
        const v = round12(m * 10 ** e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
      }
    }
    if (i === 0 && ticks.length < MIN_TICKS) return linearTicks(lo, hi, maxTicks);
    if (ticks.length >= 2 && ticks.length <= maxTicks) return ticks;
  }
  const e0 = Math.ceil(Math.log10(lo));
  const e1 = Math.floor(Math.log10(hi));
  const stride = Math.max(1, Math.ceil((e1 - e0 + 1) / maxTicks));
  const out: number[] = [];
  for (let e = e0; e <= e1; e += stride) out.push(round12(10 ** e));
  return out;
}

/** TensorBoard's debiased exponential moving average; NaN gaps are kept. `weight` in [0, 1). */
export function ema(ys: ArrayLike<number | null>, weight: number): (number | null)[] {
  const out: (number | null)[] = new Array(ys.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < ys.length; i++) {
    const y = ys[i];
    if (y == null || !Number.isFinite(y)) {
      out[i] = null;
      continue;
    }
    last = last * weight + (1 - weight) * y;
    n += 1;
    out[i] = weight > 0 ? last / (1 - weight ** n) : y;
  }
  return out;
}
