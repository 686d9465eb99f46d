import { describe, expect, it } from "vitest";
import {
  formatAxis,
  formatBytes,
  formatCompact,
  formatCount,
  formatDuration,
  formatFlops,
  formatInteger,
  formatNumber,
  formatPercent,
  formatSeconds,
  formatTokensPerSecond,
  formatValue,
  MISSING,
} from "../src/format";

describe("format", () => {
  it("prints SI counts", () => {
    expect(formatCount(950)).toBe("950");
    expect(formatCount(12_345)).toBe("12.3k");
    expect(formatCount(125_000)).toBe("125k");
    expect(formatCount(1_200_000)).toBe("1.2M");
    expect(formatCount(2e9)).toBe("2.0B");
    expect(formatCount(3.4e12)).toBe("3.4T");
  });

  it("moves up a unit when rounding reaches 1000", () => {
    expect(formatCount(999_960)).toBe("1.0M");
    expect(formatBytes(1024 * 1024 - 1)).toBe("1.0 MiB");
  });

  it("prints binary bytes", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(23.4 * 1024 ** 3)).toBe("23.4 GiB");
    expect(formatBytes(80 * 1024 ** 3)).toBe("80.0 GiB");
  });

  it("prints fractions as percentages", () => {
    expect(formatPercent(0.423)).toBe("42.3%");
    expect(formatPercent(1)).toBe("100.0%");
    expect(formatPercent(0)).toBe("0.0%");
    expect(formatPercent(0.0004)).toBe("0.04%");
  });

  it("prints FLOP counts and rates", () => {
    expect(formatFlops(312e12)).toBe("312 TFLOP/s");
    expect(formatFlops(1.2e15, false)).toBe("1.2 PFLOP");
    expect(formatFlops(989.5e12)).toBe("990 TFLOP/s");
  });

  it("prints durations as h:mm:ss", () => {
    expect(formatDuration(0)).toBe("0:00:00");
    expect(formatDuration(125)).toBe("0:02:05");
    expect(formatDuration(3725)).toBe("1:02:05");
    expect(formatDuration(97_380)).toBe("27:03:00");
    expect(formatDuration(-5)).toBe("0:00:00");
  });

  it("prints short spans in seconds", () => {
    expect(formatSeconds(0.35)).toBe("0.35 s");
    expect(formatSeconds(12.54)).toBe("12.5 s");
    expect(formatSeconds(90)).toBe("0:01:30");
  });

  it("prints tokens per second", () => {
    expect(formatTokensPerSecond(850)).toBe("850 tok/s");
    expect(formatTokensPerSecond(12_345)).toBe("12.3k tok/s");
    expect(formatTokensPerSecond(42.25)).toBe("42.3 tok/s");
  });

  it("prints plain numbers with 4 significant figures", () => {
    expect(formatNumber(2.34567)).toBe("2.346");
    expect(formatNumber(0.012345)).toBe("0.01235");
    expect(formatNumber(0.0000123)).toBe("1.23e-5");
    expect(formatNumber(0)).toBe("0");
    expect(formatInteger(1234567)).toBe("1,234,567");
  });

  it("shows a dash for missing or non-finite values", () => {
    for (const f of [formatCount, formatBytes, formatPercent, formatDuration, formatNumber, formatInteger]) {
      expect(f(null)).toBe(MISSING);
      expect(f(undefined)).toBe(MISSING);
      expect(f(Number.NaN)).toBe(MISSING);
    }
    expect(formatValue(null, "bytes")).toBe(MISSING);
  });

  it("dispatches on the protocol's units", () => {
    expect(formatValue(125_000, "tokens")).toBe("125k");
    expect(formatValue(42, "count")).toBe("42");
    expect(formatValue(2 * 1024 ** 3, "bytes")).toBe("2.0 GiB");
    expect(formatValue(0.5, "fraction")).toBe("50.0%");
    expect(formatValue(3.5, "s")).toBe("3.5 s");
    expect(formatValue(1500, "tokens/s")).toBe("1.5k tok/s");
    expect(formatValue(1e15, "flop")).toBe("1.0 PFLOP");
    expect(formatValue(2.5e14, "flop/s")).toBe("250 TFLOP/s");
    expect(formatValue(2.3456, "")).toBe("2.346");
    expect(formatValue(3, "W")).toBe("3 W");
  });

  it("prints compact axis labels", () => {
    expect(formatAxis(2e9, "bytes")).toBe("1.9 GiB");
    expect(formatAxis(25_000, "tokens/s")).toBe("25k");
    expect(formatCompact(1250)).toBe("1.25k");
    expect(formatCompact(999_999)).toBe("1M");
    expect(formatCompact(12_500_000)).toBe("12.5M");
    expect(formatCompact(500)).toBe("500");
    expect(formatAxis(3e14, "flop/s")).toBe("300T");
    expect(formatAxis(0.25, "")).toBe("0.25");
  });
  it("formats samples per second with its own label", () => {
    expect(formatValue(1234, "samples/s")).toBe("1.2k samples/s");
  });
});
