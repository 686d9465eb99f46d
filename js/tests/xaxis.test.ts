// @vitest-environment happy-dom
import { afterEach, describe, expect, it } from "vitest";
import { buildChartData, type ChartContext, drawnX, placeMarkers } from "../src/chartdata";
import { createChartPanel, FrameScheduler } from "../src/charts";
import type { ChartSpec, Marker } from "../src/protocol";
import { SeriesStore } from "../src/store";
import { createView } from "../src/view";
import { rememberedMode, unavailable } from "../src/xaxis";
import { stubCanvas } from "./canvas-stub";
import { frame } from "./helpers";

afterEach(() => {
  document.body.replaceChildren();
  localStorage.clear();
});

/** 10 steps of 100 tokens, one step every 2 s: every point comes with its x on each axis, mapped by Python. */
function mappedStore(): SeriesStore {
  const store = new SeriesStore();
  store.replace(
    frame(1, {
      train_loss: {
        xs: [2, 4, 6, 8, 10],
        ys: [5, 4, 3, 2, 1],
        mapped: { tokens: [200, 400, 600, 800, 1000], time: [4, 8, 12, 16, 20] },
      },
      recent_tokens_per_s: {
        xs: [4, 12, 30],
        ys: [50, 50, 50],
        x: "time",
        mapped: { step: [2, 6, Number.NaN], tokens: [200, 600, Number.NaN] }, // 30 s: not placed
      },
    }),
  );
  return store;
}

const loss: ChartSpec = {
  id: "loss",
  title: "loss",
  x: "step",
  unit: "",
  series: ["train_loss"],
  labels: { train_loss: "train loss" },
};
const throughput: ChartSpec = {
  id: "throughput",
  title: "throughput",
  x: "time",
  unit: "tokens/s",
  series: ["recent_tokens_per_s"],
};
const spike: Marker = {
  kind: "loss_spike",
  step: 6,
  label: "loss spike",
  sentence: "the loss spiked",
  chart: "loss",
  at: { tokens: 600, time: 12 },
};

describe("x axes", () => {
  it("says why tokens or time are off, as Python says, and remembers the choice per widget", () => {
    const axis = {
      tokens_label: "tokens (cumulative)",
      tokens_missing: "no tokens counted yet",
      time_label: "t",
      time_missing: null,
    };
    expect(unavailable("tokens", axis)).toBe("no tokens counted yet");
    expect(unavailable("time", axis)).toBeNull();
    expect(unavailable("time", { ...axis, time_missing: "waiting for the first steps" })).toContain(
      "waiting",
    );
    expect(unavailable("step", { ...axis, time_missing: "waiting" })).toBeNull();
    expect(rememberedMode("w1")).toBe("step");
  });

  it("appends each point's mapped x and replaces a series the kernel sends whole", () => {
    const store = mappedStore();
    store.append(frame(2, { train_loss: { xs: [12], ys: [0.5], mapped: { tokens: [1200], time: [24] } } }));
    expect(store.get("train_loss")?.mapped.tokens).toEqual([200, 400, 600, 800, 1000, 1200]);
    store.append(frame(3, { train_loss: { xs: [4, 12], ys: [4, 0.5], mapped: { tokens: [400, 1200] } } }), [
      "train_loss",
    ]);
    expect(store.get("train_loss")?.xs).toEqual([4, 12]);
    expect(store.get("train_loss")?.mapped).toEqual({ tokens: [400, 1200] });
    expect(store.get("recent_tokens_per_s")?.xs).toEqual([4, 12, 30]); // the others are kept
  });
});

describe("charts on another x", () => {
  const ctx = (mode: ChartContext["mode"]): ChartContext => ({
    mode,
    markers: [
      spike,
      { ...spike, kind: "throughput_drop", chart: "throughput", step: 5, at: { tokens: 500, time: 10 } },
      { ...spike, kind: "memory_creep", chart: "loss", step: 50, at: { tokens: null, time: null } },
    ],
  });

  it("draws a step chart against tokens and a time chart against steps, as Python mapped them", () => {
    const store = mappedStore();
    const tokens = buildChartData(loss, store, ctx("tokens"));
    expect(tokens.x).toBe("tokens");
    expect(Array.from(tokens.data[0])).toEqual([200, 400, 600, 800, 1000]);
    const steps = buildChartData(throughput, store, ctx("step"));
    expect(Array.from(steps.data[0])).toEqual([2, 6]); // the point Python did not place is left out
    expect(Array.from(buildChartData(throughput, store, ctx("time")).data[0])).toEqual([4, 12, 30]);
  });

  it("keeps a chart's own x when its series came without the chosen axis", () => {
    const store = new SeriesStore();
    store.replace(frame(1, { train_loss: { xs: [1, 2], ys: [2, 1] } }));
    expect(buildChartData(loss, store, ctx("time")).x).toBe("step");
    expect(drawnX(loss, store, ctx("time"))).toBe("step");
  });

  it("places each marker on its own chart, where Python placed it on the drawn x", () => {
    expect(placeMarkers(loss, "step", ctx("step")).map((p) => p.x)).toEqual([6, 50]);
    expect(placeMarkers(loss, "tokens", ctx("tokens")).map((p) => p.x)).toEqual([600]); // one not placed
    expect(placeMarkers(throughput, "time", ctx("time")).map((p) => [p.marker.kind, p.x])).toEqual([
      ["throughput_drop", 10],
    ]);
  });

  it("draws a marker element with the sentence as its title, a human legend and the x caption", async () => {
    const restore = stubCanvas();
    try {
      const store = mappedStore();
      const scheduler = new FrameScheduler(
        (cb) => setTimeout(cb, 0) as unknown as number,
        (id) => clearTimeout(id),
      );
      const panel = createChartPanel(loss, store, scheduler, () => ctx("tokens"));
      document.body.append(panel.el);
      await new Promise((r) => setTimeout(r, 5));
      const marker = panel.el.querySelector<HTMLElement>('[data-tm-marker="loss_spike"]');
      expect(marker?.title).toBe("the loss spiked");
      expect(marker?.textContent).toBe("loss spike");
      expect(panel.el.querySelector('[data-tm="x-label"]')?.textContent).toBe("tokens (cumulative)");
      expect(panel.el.querySelector(".u-legend")?.textContent).toContain("train loss");
      expect(panel.el.querySelector(".u-legend")?.textContent).not.toContain("train_loss");
      panel.destroy();
    } finally {
      restore();
    }
  });
});

describe("the x control", () => {
  it("switches every chart's x, disables tokens with the reason, and remembers the choice", async () => {
    const store = mappedStore();
    const view = createView(store, { key: "w2" });
    document.body.append(view.root);
    const axis = {
      tokens_label: "tokens (cumulative)",
      tokens_missing: null,
      time_label: "time since start",
      time_missing: null,
    };
    view.update({ name: "r", status: "running", charts: [loss], x_axis: axis });
    const tokens = view.root.querySelector<HTMLButtonElement>('[data-tm-x="tokens"]');
    expect(tokens?.disabled).toBe(false);
    tokens?.click();
    expect(tokens?.getAttribute("aria-pressed")).toBe("true");
    expect(rememberedMode("w2")).toBe("tokens");
    view.update({
      name: "r",
      status: "running",
      charts: [loss],
      x_axis: { ...axis, tokens_missing: "no tokens" },
    });
    expect(tokens?.disabled).toBe(true);
    expect(tokens?.title).toBe("no tokens");
    expect(view.root.querySelector('[data-tm-x="step"]')?.getAttribute("aria-pressed")).toBe("true");
    view.destroy();
  });
});
