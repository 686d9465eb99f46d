import { describe, expect, it } from "vitest";
import { formatValue, MISSING } from "../src/format";

// The same table as tests/test_sizes.py (trainmeter.sizes): tiles, popovers and the
// static snapshot must print one text per value and unit.
const CASES: [number | null, string, string][] = [
  [950, "count", "950"],
  [12_345, "count", "12.3k"],
  [125_000, "tokens", "125k"],
  [1_234_567, "count", "1.2M"],
  [2e9, "tokens", "2.0B"],
  [999_960, "count", "1.0M"],
  [387_000_000, "bytes", "369 MiB"],
  [21.9 * 2 ** 30, "bytes", "21.9 GiB"],
  [512, "bytes", "512 B"],
  [0.423, "fraction", "42.3%"],
  [0.73, "fraction", "73.0%"],
  [7.28e11, "flop", "728 GFLOP"],
  [3.12e14, "flop/s", "312 TFLOP/s"],
  [7.28e11, "FLOP", "728 GFLOP"],
  [3.12e14, "FLOP/s", "312 TFLOP/s"],
  [7.28e8, "FLOP/token", "728 MFLOP/token"],
  [1, "1", "1"],
  [49_100, "tokens/s", "49.1k tok/s"],
  [4.5, "samples/s", "4.5 samples/s"],
  [90, "s", "0:01:30"],
  [0.35, "s", "0.35 s"],
  [2.34567, "", "2.346"],
  [1.23e-5, "", "1.23e-5"],
  [null, "bytes", MISSING],
  [Number.NaN, "", MISSING],
];

describe("one formatter per unit (shared with Python)", () => {
  it.each(CASES)("%s %s -> %s", (value, unit, text) => {
    expect(formatValue(value, unit)).toBe(text);
  });
});
