// @vitest-environment happy-dom
import { afterEach, describe, expect, it } from "vitest";
import { buildChartData, type ChartContext, placeMarkers } from "../src/chartdata";
import { createChartPanel, FrameScheduler } from "../src/charts";
import type { ChartSpec, Marker } from "../src/protocol";
import { SeriesStore } from "../src/store";
import { createView } from "../src/view";
import {
  AXIS_TIME,
  AXIS_TOKENS,
  buildMapping,
  convertX,
  interpolate,
  remap,
  rememberedMode,
  unavailable,
} from "../src/xaxis";
import { stubCanvas } from "./canvas-stub";
import { frame } from "./helpers";

afterEach(() => {
  document.body.replaceChildren();
  localStorage.clear();
});

/** 10 steps of 100 tokens, one step every 2 s, mapped at steps 5 and 10. */
function mappedStore(): SeriesStore {
  const store = new SeriesStore();
  store.replace(
    frame(1, {
      [AXIS_TOKENS]: { xs: [5, 10], ys: [500, 1000] },
      [AXIS_TIME]: { xs: [5, 10], ys: [10, 20] },
      train_loss: { xs: [2, 4, 6, 8, 10], ys: [5, 4, 3, 2, 1] },
      recent_tokens_per_s: { xs: [4, 12, 30], ys: [50, 50, 50], x: "time" },
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
};

describe("x mappings", () => {
  it("interpolates linearly from the implied origin and gives nothing outside the mapped steps", () => {
    expect(interpolate([5, 10], [500, 1000], 2, true)).toBe(200);
    expect(interpolate([5, 10], [500, 1000], 7.5, true)).toBe(750);
    expect(interpolate([5, 10], [500, 1000], 11, true)).toBeNull();
  });

  it("maps steps to tokens and time, and time back to steps, through the store's axis series", () => {
    const m = buildMapping(mappedStore());
    expect(convertX(4, "step", "tokens", m)).toBe(400);
    expect(convertX(4, "step", "time", m)).toBe(8);
    expect(convertX(12, "time", "step", m)).toBe(6);
    expect(convertX(12, "time", "tokens", m)).toBe(600);
    expect(convertX(30, "time", "step", m)).toBeNull(); // after the last mapped step
  });

  it("extends the mapping with the live head the decimator has not sent yet", () => {
    const m = buildMapping(mappedStore(), { step: 15, tokens: 1500, t_s: 30 });
    expect(convertX(30, "time", "step", m)).toBe(15);
  });

  it("drops the points a mapping cannot place and keeps the rest in order", () => {
    const m = buildMapping(mappedStore());
    const out = remap([4, 12, 30], [1, 2, 3], "time", "step", m);
    expect(out).toEqual({ xs: [2, 6], ys: [1, 2] });
  });

  it("says why tokens are off and remembers the choice per widget", () => {
    const m = buildMapping(mappedStore());
    const axis = {
      tokens_label: "tokens (cumulative)",
      tokens_missing: "no tokens counted yet",
      time_label: "t",
    };
    expect(unavailable("tokens", axis, m)).toBe("no tokens counted yet");
    expect(unavailable("time", axis, buildMapping(new SeriesStore()))).toContain("waiting");
    expect(rememberedMode("w1")).toBe("step");
  });
});

describe("charts on another x", () => {
  const ctx = (mode: ChartContext["mode"], store: SeriesStore): ChartContext => ({
    mode,
    mapping: buildMapping(store),
    markers: [spike, { ...spike, kind: "throughput_drop", chart: "throughput", step: 5 }],
  });

  it("draws a step chart against tokens and a time chart against steps", () => {
    const store = mappedStore();
    const tokens = buildChartData(loss, store, ctx("tokens", store));
    expect(tokens.x).toBe("tokens");
    expect(Array.from(tokens.data[0])).toEqual([200, 400, 600, 800, 1000]);
    const steps = buildChartData(throughput, store, ctx("step", store));
    expect(Array.from(steps.data[0])).toEqual([2, 6]);
  });

  it("keeps a chart's own x when there is no mapping", () => {
    const store = new SeriesStore();
    store.replace(frame(1, { train_loss: { xs: [1, 2], ys: [2, 1] } }));
    expect(buildChartData(loss, store, ctx("time", store)).x).toBe("step");
  });

  it("places each marker on its own chart, at its step on the drawn x", () => {
    const store = mappedStore();
    expect(placeMarkers(loss, ctx("step", store)).map((p) => p.x)).toEqual([6]);
    expect(placeMarkers(loss, ctx("tokens", store)).map((p) => p.x)).toEqual([600]);
    expect(placeMarkers(throughput, ctx("time", store)).map((p) => [p.marker.kind, p.x])).toEqual([
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
      const panel = createChartPanel(loss, store, scheduler, () => ctx("tokens", store));
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
