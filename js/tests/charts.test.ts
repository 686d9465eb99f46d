// @vitest-environment happy-dom
import type uPlot from "uplot";
import { afterEach, describe, expect, it, vi } from "vitest";
import { buildChartData, plainLines } from "../src/chartdata";
import { chartOptions, flat } from "../src/chartoptions";
import { createChartPanel, FrameScheduler } from "../src/charts";
import { type ChartSpec, FALLBACK_LOOK, type Look } from "../src/protocol";
import { SeriesStore } from "../src/store";
import { stubCanvas } from "./canvas-stub";
import { frame } from "./helpers";

afterEach(() => {
  vi.restoreAllMocks();
  document.body.replaceChildren();
});

function manualFrames(): { scheduler: FrameScheduler; frames: () => number; tick: () => void } {
  let queued: (() => void) | null = null;
  let count = 0;
  const scheduler = new FrameScheduler(
    (cb) => {
      queued = cb;
      count += 1;
      return count;
    },
    () => {
      queued = null;
    },
  );
  return {
    scheduler,
    frames: () => count,
    tick: () => {
      const cb = queued;
      queued = null;
      cb?.();
    },
  };
}

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

const lossChart: ChartSpec = {
  id: "loss",
  title: "Loss",
  x: "step",
  unit: "",
  series: ["loss/train", "loss/val"],
};

describe("FrameScheduler", () => {
  it("runs a job at most once per animation frame however often it is scheduled", () => {
    const { scheduler, frames, tick } = manualFrames();
    let runs = 0;
    const key = {};
    for (let i = 0; i < 100; i++) scheduler.schedule(key, () => (runs += 1));
    expect(frames()).toBe(1);
    expect(runs).toBe(0);
    tick();
    expect(runs).toBe(1);
    scheduler.schedule(key, () => (runs += 1));
    expect(frames()).toBe(2);
    tick();
    expect(runs).toBe(2);
  });

  it("drops cancelled jobs and keeps running after a failing one", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { scheduler, tick } = manualFrames();
    const ran: string[] = [];
    scheduler.schedule("a", () => ran.push("a"));
    scheduler.schedule("b", () => {
      throw new Error("boom");
    });
    scheduler.schedule("c", () => ran.push("c"));
    scheduler.cancel("a");
    tick();
    expect(ran).toEqual(["c"]);
    expect(warn).toHaveBeenCalledWith("trainmeter: redraw failed", expect.any(Error));
  });
});

describe("buildChartData", () => {
  it("joins series with different xs and skips absent ones and other x kinds", () => {
    const store = new SeriesStore();
    store.replace(
      frame(0, {
        "loss/train": { xs: [1, 2, 3], ys: [3, Number.NaN, 1] },
        "loss/val": { xs: [2], ys: [2.5] },
        "tok/s": { xs: [0.5], ys: [1], x: "time" },
      }),
    );
    const spec = { ...lossChart, series: ["loss/train", "nope", "loss/val", "tok/s"] };
    const { names, data, points } = buildChartData(spec, store);
    expect(names).toEqual(["loss/train", "loss/val"]);
    expect(points).toBe(4);
    expect(Array.from(data[0])).toEqual([1, 2, 3]);
    expect(Array.from(data[1] ?? [])).toEqual([3, null, 1]);
    expect(Array.from(data[2] ?? [])).toEqual([undefined, 2.5, undefined]);
  });

  it("returns no series when the store has none of the chart's", () => {
    expect(buildChartData(lossChart, new SeriesStore()).names).toEqual([]);
  });
});

describe("chart panel", () => {
  it("degrades to a message when the page has no 2D canvas", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { scheduler, tick } = manualFrames();
    const store = new SeriesStore();
    store.append(frame(0, { "loss/train": { xs: [1], ys: [1] } }));
    const panel = createChartPanel(lossChart, store, scheduler);
    tick();
    expect(panel.el.querySelector(".tm-chart-empty")?.textContent).toContain("chart unavailable");
    expect(panel.el.dataset.tmPoints).toBe("1");
  });

  it("creates one uPlot with a legend entry per drawn series and re-creates it when series change", async () => {
    const restore = stubCanvas();
    try {
      const { scheduler, tick } = manualFrames();
      const store = new SeriesStore();
      store.append(frame(0, { "loss/train": { xs: [1, 2], ys: [2, 1] } }));
      const panel = createChartPanel(lossChart, store, scheduler);
      document.body.append(panel.el);
      tick();
      await settle(); // uPlot commits its first draw in a microtask
      expect(panel.el.querySelectorAll(".uplot")).toHaveLength(1);
      expect(panel.el.querySelector(".u-legend")?.textContent).toContain("loss/train");
      store.append(frame(1, { "loss/val": { xs: [2], ys: [1.5] } }));
      panel.invalidate();
      tick();
      await settle();
      expect(panel.el.querySelectorAll(".uplot")).toHaveLength(1);
      expect(panel.el.querySelector(".u-legend")?.textContent).toContain("loss/val");
      panel.destroy();
      expect(panel.el.querySelectorAll(".uplot")).toHaveLength(0);
    } finally {
      restore();
    }
  });

  it("publishes its point count once per frame and shows a placeholder until data comes", async () => {
    const restore = stubCanvas();
    const { scheduler, tick, frames } = manualFrames();
    const store = new SeriesStore();
    const panel = createChartPanel(lossChart, store, scheduler);
    document.body.append(panel.el);
    tick();
    expect(panel.el.dataset.tmChart).toBe("loss");
    expect(panel.el.dataset.tmPoints).toBe("0");
    expect((panel.el.querySelector(".tm-chart-empty") as HTMLElement).hidden).toBe(false);
    const before = frames();
    for (let seq = 0; seq < 10; seq++) {
      store.append(frame(seq, { "loss/train": { xs: [seq], ys: [1 / (seq + 1)] } }));
      panel.invalidate();
    }
    expect(frames() - before).toBe(1);
    tick();
    expect(panel.el.dataset.tmPoints).toBe("10");
    expect((panel.el.querySelector(".tm-chart-empty") as HTMLElement).hidden).toBe(true);
    await settle();
    panel.destroy();
    restore();
  });
});

describe("y axis", () => {
  it("grows with its longest label so labels are not clipped", async () => {
    const { yAxisSize } = await import("../src/chartoptions");
    expect(yAxisSize(null, ["335 MiB", "97.7 KiB"])).toBe(18 + 8 * 8);
    expect(yAxisSize(null, ["1", "2"])).toBe(40);
    expect(yAxisSize(null, null)).toBe(50);
  });
});

describe("log-scale labels", () => {
  it("labels every tick the log splits chose (no unlabelled minor ticks striking through)", async () => {
    const { yLabels } = await import("../src/chartoptions");
    const labels = yLabels([2, 3, 4, 5, 6, 8], { unit: "", log_y: true });
    expect(labels).toEqual(["2", "3", "4", "5", "6", "8"]);
  });

  it("uses the data's own range and the shared splits on a log axis", async () => {
    const spec = { id: "loss", title: "loss", x: "step" as const, unit: "", series: ["l"], log_y: true };
    const opts = chartOptions(spec, plainLines(["l"]), document.createElement("div"), 400, {
      logY: true,
      smoothed: true,
    });
    type RangeFn = (u: unknown, a: number, b: number) => number[];
    type SplitsFn = (u: unknown, i: number, a: number, b: number) => number[];
    const rangeFn = opts.scales?.y?.range as unknown as RangeFn;
    const range = rangeFn(null, 1.2, 4.06);
    expect(range[0]).toBeGreaterThan(1);
    expect(range[1]).toBeLessThan(5);
    const splitsFn = (opts.axes ?? [])[1]?.splits as unknown as SplitsFn;
    const splits = splitsFn(null, 1, range[0] ?? 0, range[1] ?? 0);
    expect(splits.length).toBeGreaterThanOrEqual(4);
  });

  it("puts a marker on every point of a sparse series (a lone val_loss shows)", async () => {
    const spec = { id: "loss", title: "loss", x: "step" as const, unit: "", series: ["t", "v"] };
    const data: [number[], (number | null)[], (number | null)[]] = [
      Array.from({ length: 100 }, (_, i) => i),
      Array.from({ length: 100 }, () => 1),
      Array.from({ length: 100 }, (_, i) => (i === 50 ? 0.9 : null)),
    ];
    const opts = chartOptions(
      spec,
      plainLines(["t", "v"]),
      document.createElement("div"),
      400,
      { logY: false, smoothed: true },
      data,
    );
    expect(opts.series[1]?.points?.show).toBe(false);
    expect(opts.series[2]?.points?.show).toBe(true);
  });

  it("joins a series' points across the other series' steps (52 val_loss points among 20k steps draw a line)", async () => {
    const spec = { id: "loss", title: "loss", x: "step" as const, unit: "", series: ["t", "v"] };
    const data: [number[], (number | null)[], (number | null)[]] = [
      Array.from({ length: 1000 }, (_, i) => i),
      Array.from({ length: 1000 }, () => 1),
      Array.from({ length: 1000 }, (_, i) => (i % 19 === 0 ? 0.9 : null)),
    ];
    for (const smoothed of [false, true]) {
      const opts = chartOptions(
        spec,
        plainLines(["t", "v"]),
        document.createElement("div"),
        400,
        { logY: false, smoothed },
        data,
      );
      expect(opts.series[opts.series.length - 1]?.points?.show).toBe(false); // 53 points: no markers
      expect(opts.series.slice(1).every((s) => s.spanGaps === true)).toBe(true);
    }
  });
});

describe("close byte ticks", () => {
  it("gain a digit instead of repeating the same label", async () => {
    const { yLabels } = await import("../src/chartoptions");
    const g = 2 ** 30;
    const labels = yLabels([1.3 * g, 1.32 * g, 1.34 * g], { unit: "bytes" });
    expect(new Set(labels).size).toBe(3);
    expect(labels[0]).toBe("1.30 GiB");
  });
});

describe("smoothed twins (computed by the kernel, widget/smoothed.py)", () => {
  const spec: ChartSpec = {
    id: "loss",
    title: "loss",
    x: "step",
    unit: "",
    series: ["train_loss", "val_loss"],
    smoothed: { train_loss: "train_loss.ema" },
    labels: {
      train_loss: "train loss",
      "train_loss.ema": "smoothed (EMA, ~50 steps)",
      val_loss: "validation loss",
    },
  };
  const store = (): SeriesStore => {
    const s = new SeriesStore();
    s.replace(
      frame(0, {
        train_loss: { xs: [1, 2, 3, 4], ys: [4, 1, 4, 1] },
        "train_loss.ema": { xs: [1, 2, 3, 4], ys: [4, 2.5, 3.01, 2.49] },
        val_loss: { xs: [4], ys: [2] },
      }),
    );
    return s;
  };

  it("draws the kernel's twin as sent, after its raw series and in its colour; val_loss gets none", () => {
    const { names, lines, data, points } = buildChartData(spec, store());
    expect(names).toEqual(["train_loss", "val_loss"]);
    expect(lines).toEqual([
      { name: "train_loss", colour: 0, role: "line" },
      { name: "train_loss.ema", colour: 0, role: "smoothed" },
      { name: "val_loss", colour: 1, role: "line" },
    ]);
    expect(Array.from(data[2] ?? [])).toEqual([4, 2.5, 3.01, 2.49]); // not re-smoothed
    expect(points).toBe(5);
  });

  it("draws the raw loss as the named line and its twin as a light band over it, both in the legend", () => {
    const look: Look = { ...FALLBACK_LOOK, palette: ["#111111", "#222222"], faint_alpha: "40" };
    const built = buildChartData(spec, store());
    const opts = chartOptions(
      spec,
      built.lines,
      document.createElement("div"),
      400,
      undefined,
      built.data,
      "step",
      look,
    );
    const drawn = opts.series.slice(1).map((s) => [s.label, s.stroke, s.width]);
    expect(drawn).toEqual([
      ["train loss", "#111111", 1.5],
      ["smoothed (EMA, ~50 steps)", "#11111140", 4],
      ["validation loss", "#222222", 1.5],
    ]);
  });

  it("off the chart, the legend shows the spec's latest value (the tile's), 'nan' as read", () => {
    const built = buildChartData(spec, store());
    const view = { logY: false, smoothed: true, latest: { train_loss: 0.3112 } as ChartSpec["latest"] };
    const opts = chartOptions(spec, built.lines, document.createElement("div"), 400, view, built.data);
    const u = { data: built.data } as unknown as uPlot;
    type Value = (u: uPlot, v: number | null, s: number, idx: number | null) => string;
    const legend = (i: number): unknown =>
      ((opts.series[i] as uPlot.Series).value as Value)(u, null, i, null);
    expect(legend(1)).toBe("0.3112"); // not the last drawn point (1): the decimated column may end on a bucket's min
    expect(legend(2)).toBe("2.49"); // the twin's own newest value
    view.latest = { train_loss: "nan" };
    expect(legend(1)).toBe("nan");
  });

  it("without the twin in the store, or with the toggle off, the raw series is a plain line", () => {
    const s = new SeriesStore();
    s.replace(frame(0, { train_loss: { xs: [1, 2], ys: [2, 1] } }));
    expect(buildChartData(spec, s).lines).toEqual([{ name: "train_loss", colour: 0, role: "line" }]);
    expect(buildChartData(spec, store(), undefined, false).lines.map((l) => l.role)).toEqual([
      "line",
      "line",
    ]);
  });

  it("offers the smoothing toggle only on a chart whose spec names twins, and the toggle hides them", () => {
    const { scheduler, tick } = manualFrames();
    const loss = createChartPanel(spec, store(), scheduler);
    const lr = createChartPanel(
      { id: "lr", title: "lr", x: "step", unit: "", series: ["lr"] },
      store(),
      scheduler,
    );
    tick();
    const box = loss.el.querySelector<HTMLInputElement>('[data-tm="smoothing"]') as HTMLInputElement;
    expect(box.type).toBe("checkbox");
    expect(box.checked).toBe(true);
    expect((box.parentElement as HTMLElement).hidden).toBe(false);
    const other = lr.el.querySelector('[data-tm="smoothing"]') as HTMLElement;
    expect((other.parentElement as HTMLElement).hidden).toBe(true);
    expect(loss.el.querySelector('input[type="range"]')).toBeNull();
  });
});

describe("axis ranges and log tick spacing", () => {
  it("draws a share (unit fraction) on its whole 0-100% scale", async () => {
    const { chartOptions } = await import("../src/chartoptions");
    const { plainLines } = await import("../src/chartdata");
    const spec = { id: "node_cpu", title: "Node CPU", x: "time" as const, unit: "fraction", series: ["c"] };
    const opts = chartOptions(spec, plainLines(["c"]), document.createElement("div"), 400);
    type RangeFn = (u: unknown, a: number, b: number) => number[];
    const rangeFn = opts.scales?.y?.range as unknown as RangeFn;
    const range = rangeFn(null, 0.995, 1.0);
    expect(range).toEqual([0, 1]); // a 0.5% dip is not a cliff
  });

  it("keeps log-axis labels apart: powers of ten first, the rest where there is room", async () => {
    const { spacedLogTicks, MIN_LABEL_GAP_PX } = await import("../src/chartoptions");
    const ticks = [0.4, 0.5, 0.6, 0.8, 1, 2];
    const kept = spacedLogTicks(ticks, 0.35, 2.3, 100); // 1 and 0.8 were 12 px apart on the loss chart
    expect(kept).toContain(1);
    const px = (v: number) =>
      ((Math.log10(v) - Math.log10(0.35)) / (Math.log10(2.3) - Math.log10(0.35))) * 100;
    for (let i = 1; i < kept.length; i++) {
      expect(px(kept[i] as number) - px(kept[i - 1] as number)).toBeGreaterThanOrEqual(MIN_LABEL_GAP_PX);
    }
    expect(kept).not.toContain(0.8); // 0.8 would touch 1
  });
});

describe("y scales", () => {
  const spec: ChartSpec = { id: "lr", title: "lr", x: "step", unit: "lr", series: ["lr"], log_y: true };
  const el = (): HTMLElement => document.createElement("div");

  it("draws a constant (an lr never scheduled) on a linear axis, a varying one on its log axis", () => {
    const constant: uPlot.AlignedData = [
      [1, 2, 3],
      [3e-4, 3e-4, 3e-4],
    ];
    expect(flat(constant)).toBe(true);
    expect(chartOptions(spec, plainLines(["lr"]), el(), 400, undefined, constant).scales?.y?.distr).toBe(1);
    const decaying: uPlot.AlignedData = [
      [1, 2, 3],
      [3e-4, 2e-4, 1e-4],
    ];
    expect(flat(decaying)).toBe(false);
    expect(chartOptions(spec, plainLines(["lr"]), el(), 400, undefined, decaying).scales?.y?.distr).toBe(3);
  });

  it("draws memory from 0 to the device's total, or to a reading past it", () => {
    const mem: ChartSpec = {
      id: "memory",
      title: "memory",
      x: "time",
      unit: "bytes",
      series: ["a"],
      y_range: [0, 80],
    };
    const range = chartOptions(mem, plainLines(["a"]), el(), 400).scales?.y?.range as (
      u: unknown,
      min: number,
      max: number,
    ) => [number, number];
    expect(range(null, 30, 40)).toEqual([0, 80]);
    expect(range(null, 30, 90)).toEqual([0, 90]);
  });

  it("draws a rate from 0 (rates are non-negative: autoscale hid the scale)", () => {
    const rate: ChartSpec = {
      id: "throughput",
      title: "t",
      x: "time",
      unit: "tokens/s",
      series: ["a"],
      y_range: [0, null],
    };
    const range = chartOptions(rate, plainLines(["a"]), el(), 400).scales?.y?.range as (
      u: unknown,
      min: number,
      max: number,
    ) => [number, number];
    expect(range(null, 40_000, 42_000)).toEqual([0, 44_100]);
    expect(range(null, 0, 0)).toEqual([0, 1]); // no rate yet: still an axis
  });
});
