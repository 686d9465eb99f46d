import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  formatAxis,
  formatBytes,
  formatCompact,
  formatCount,
  formatCountPair,
  formatDuration,
  formatFlops,
  formatGib,
  formatInteger,
  formatJoules,
  formatNumber,
  formatPercent,
  formatRate,
  formatScientific,
  formatSeconds,
  formatValue,
  formatWatts,
  MISSING,
  pyFixed,
} from "../src/format";
import { tileText } from "../src/tiles";

// tests/fixtures/format_cases.json is also read by tests/test_sizes.py: Python and the
// widget print one text per value (docs/spec.md, "Number formats").
type Value = number | null | string | (number | null)[];
interface Case {
  kind: string;
  value: Value;
  text: string;
  unit?: string;
  label?: string;
  whole?: boolean;
}

const path = fileURLToPath(new URL("../../tests/fixtures/format_cases.json", import.meta.url));
const CASES = JSON.parse(readFileSync(path, "utf-8")) as Case[];

function num(v: Value): number | null {
  if (typeof v === "string") return { nan: Number.NaN, inf: Infinity, "-inf": -Infinity }[v] ?? Number.NaN;
  return v as number | null;
}

function format(c: Case): string {
  const v = num(Array.isArray(c.value) ? 0 : c.value);
  switch (c.kind) {
    case "count":
      return formatCount(v);
    case "count_pair": {
      const [a, b] = c.value as (number | null)[];
      return formatCountPair(a, b).join(" / ");
    }
    case "integer":
      return formatInteger(v);
    case "number":
      return formatNumber(v);
    case "scientific":
      return formatScientific(v);
    case "rate":
      return c.label === undefined ? formatRate(v) : formatRate(v, c.label);
    case "bytes":
      return formatBytes(v);
    case "gib":
      return formatGib(v, c.whole ?? false);
    case "percent":
      return formatPercent(v);
    case "flops":
      return formatFlops(v, false);
    case "flops_per_s":
      return formatFlops(v, true);
    case "joules":
      return formatJoules(v);
    case "watts":
      return formatWatts(v);
    case "duration_s":
      return formatDuration(v);
    case "seconds":
      return formatSeconds(v);
    case "value":
      return formatValue(v, c.unit ?? "");
    default:
      throw new Error(`unknown kind ${c.kind}`);
  }
}

describe("the shared format cases", () => {
  it("has cases of every kind", () => {
    expect(CASES.length).toBeGreaterThanOrEqual(60);
    expect(new Set(CASES.map((c) => c.kind)).size).toBe(16);
  });

  it.each(CASES.map((c) => [c.kind, JSON.stringify(c.value), c.unit ?? c.label ?? "", c] as const))(
    "%s %s %s",
    (_kind, _value, _unit, c) => {
      expect(format(c)).toBe(c.text);
    },
  );
});

describe("format", () => {
  it("rounds an exact tie to even, as Python does", () => {
    expect(pyFixed(2.5, 0)).toBe("2");
    expect(pyFixed(3.5, 0)).toBe("4");
    expect(pyFixed(42.25, 1)).toBe("42.2");
    expect(pyFixed(-0.5, 0)).toBe("-0");
    expect(pyFixed(0.35, 1)).toBe("0.3"); // 0.35 is below the tie in binary
    expect(pyFixed(1.005, 2)).toBe("1.00");
  });

  it("shows the loss tile as the text line shows the loss", () => {
    const line = CASES.find((c) => c.kind === "number" && c.value === 2.34567);
    expect(tileText({ id: "loss", label: "loss", value: 2.34567, unit: "" })).toBe(line?.text);
  });

  it("shows a dash for missing or non-finite values", () => {
    for (const f of [formatCount, formatBytes, formatPercent, formatDuration, formatNumber, formatInteger]) {
      expect(f(null)).toBe(MISSING);
      expect(f(undefined)).toBe(MISSING);
      expect(f(Number.NaN)).toBe(MISSING);
    }
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
});
