import { describe, expect, it } from "vitest";
import { ema, linearTicks, logTicks } from "../src/ticks";

describe("ticks (the same cases as tests/widget/test_ticks.py)", () => {
  it("labels 4 to 6 round values inside the data", () => {
    expect(linearTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(linearTicks(2.13, 2.61)).toEqual([2.2, 2.3, 2.4, 2.5, 2.6]);
    expect(linearTicks(1.1, 4.2)).toEqual([1.5, 2, 2.5, 3, 3.5, 4]);
    expect(linearTicks(49000, 49100)).toEqual([49000, 49020, 49040, 49060, 49080, 49100]);
  });

  it("labels a log axis inside the data, not only powers of ten", () => {
    expect(logTicks(1.2, 9.5)).toEqual([2, 3, 4, 5, 6, 8]);
    expect(logTicks(0.05, 40)).toEqual([0.1, 0.3, 1, 3, 10, 30]);
    expect(logTicks(2.13, 2.61)).toEqual([2.2, 2.3, 2.4, 2.5, 2.6]);
    for (const [lo, hi] of [
      [0.3, 4.06],
      [1e-5, 1e5],
      [0.8, 12],
    ] as const) {
      const ticks = logTicks(lo, hi);
      expect(ticks.length).toBeGreaterThanOrEqual(4);
      expect(ticks.length).toBeLessThanOrEqual(6);
      expect(ticks.every((t) => t >= lo && t <= hi)).toBe(true);
    }
  });

  it("smooths with a debiased EMA and keeps gaps", () => {
    expect(ema([1, 1, 1], 0.9)).toEqual([1, 1, 1].map(() => expect.closeTo(1, 9)));
    const s = ema([0, 10, null, 10], 0.5);
    expect(s[2]).toBeNull();
    expect(s[1]).toBeCloseTo((10 * 0.5) / 0.75, 9);
    expect(ema([3, 4], 0)).toEqual([3, 4]);
  });
});
