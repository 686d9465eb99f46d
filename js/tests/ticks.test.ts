import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { TickRule } from "../src/protocol";
import { linearTicks, logTicks } from "../src/ticks";

const fixtures = fileURLToPath(new URL("../../tests/fixtures/", import.meta.url));

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

  it("gives every case of tests/fixtures/ticks_v1.json, as widget/look.py does, with the state's rule", () => {
    const golden = JSON.parse(readFileSync(`${fixtures}state_v2.json`, "utf8"));
    const rule = golden.look.ticks as TickRule;
    const { cases } = JSON.parse(readFileSync(`${fixtures}ticks_v1.json`, "utf8"));
    expect(cases.length).toBeGreaterThan(20);
    for (const c of cases as { lo: number; hi: number; log: boolean; ticks: number[] }[]) {
      const got = c.log ? logTicks(c.lo, c.hi, undefined, rule) : linearTicks(c.lo, c.hi, undefined, rule);
      expect([c.lo, c.hi, c.log, got]).toEqual([c.lo, c.hi, c.log, c.ticks]);
    }
  });

  it("follows the rule it is given (the numbers come from Python)", () => {
    const rule: TickRule = { max_ticks: 3, min_ticks: 2, linear_steps: [5], log_steps: [[1]] };
    expect(linearTicks(0, 1, undefined, rule)).toEqual([0, 0.5, 1]);
    expect(logTicks(1, 500, undefined, rule)).toEqual([1, 10, 100]);
  });

  it("has no smoothing: the smoothed loss is a series the kernel sends", async () => {
    const ticks = await import("../src/ticks");
    expect(Object.keys(ticks).sort()).toEqual(["linearTicks", "logTicks"]);
  });
});
