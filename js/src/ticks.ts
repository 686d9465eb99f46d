// Axis ticks people can read: 4 to 6 labelled values inside the data, linear or log.
// The rule is src/trainmeter/widget/look.py's; its numbers (label counts, the steps tried)
// come in the state (`look.ticks`), and tests/fixtures/ticks_v1.json holds cases from the
// Python functions that js/tests/ticks.test.ts checks these against.

import { FALLBACK_LOOK, type TickRule } from "./protocol";

const round12 = (v: number): number => Number(v.toPrecision(12));

function withStep(lo: number, hi: number, step: number): number[] {
  const out: number[] = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(round12(k * step));
  return out;
}

/** Round values inside [lo, hi]: min_ticks to `maxTicks` of them, 5 when possible. */
export function linearTicks(
  lo: number,
  hi: number,
  maxTicks?: number,
  rule: TickRule = FALLBACK_LOOK.ticks,
): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) return [lo];
  const most = maxTicks ?? rule.max_ticks;
  const last = rule.linear_steps.length - 1;
  const top = Math.floor(Math.log10(hi - lo));
  let best: { score: number; ticks: number[] } | null = null;
  for (let power = top - 2; power < top + 2; power++) {
    rule.linear_steps.forEach((mult, rank) => {
      const ticks = withStep(lo, hi, mult * 10 ** power);
      if (ticks.length < 2 || ticks.length > most) return;
      const short = ticks.length < rule.min_ticks ? rule.min_ticks - ticks.length : 0;
      const score = 10 * short + Math.abs(ticks.length - 5) + (rank === last ? 1.5 : 0);
      if (!best || score < best.score) best = { score, ticks };
    });
  }
  return (best as { ticks: number[] } | null)?.ticks ?? [lo, hi];
}

/** Labelled values for a log axis over [lo, hi] (both > 0); linear under a factor of 3. */
export function logTicks(
  lo: number,
  hi: number,
  maxTicks?: number,
  rule: TickRule = FALLBACK_LOOK.ticks,
): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi) || lo <= 0 || hi <= 0) return [];
  if (hi < lo) [lo, hi] = [hi, lo];
  const most = maxTicks ?? rule.max_ticks;
  if (hi / lo < 3) return linearTicks(lo, hi, most, rule);
  for (let i = 0; i < rule.log_steps.length; i++) {
    const ticks: number[] = [];
    for (let e = Math.floor(Math.log10(lo)) - 1; e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of rule.log_steps[i] ?? []) {
        const v = round12(m * 10 ** e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
      }
    }
    if (i === 0 && ticks.length < rule.min_ticks) return linearTicks(lo, hi, most, rule);
    if (ticks.length >= 2 && ticks.length <= most) return ticks;
  }
  const e0 = Math.ceil(Math.log10(lo));
  const e1 = Math.floor(Math.log10(hi));
  const stride = Math.max(1, Math.ceil((e1 - e0 + 1) / most));
  const out: number[] = [];
  for (let e = e0; e <= e1; e += stride) out.push(round12(10 ** e));
  return out;
}
