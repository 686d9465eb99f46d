import { describe, expect, it } from "vitest";
import { SeriesStore } from "../src/store";
import { frame } from "./helpers";

describe("SeriesStore", () => {
  it("replace swaps the whole content and takes the frame's seq", () => {
    const store = new SeriesStore();
    store.replace(frame(3, { a: { xs: [1, 2], ys: [10, 20] }, b: { xs: [1], ys: [5] } }));
    store.replace(frame(4, { c: { xs: [7], ys: [70], x: "time" } }));
    expect(store.names()).toEqual(["c"]);
    expect(store.seq).toBe(4);
    expect(store.get("c")).toEqual({ name: "c", x: "time", xs: [7], ys: [70], mapped: {} });
  });

  it("append extends existing series and adds new ones", () => {
    const store = new SeriesStore();
    store.replace(frame(1, { a: { xs: [1], ys: [10] } }));
    expect(store.append(frame(2, { a: { xs: [2, 3], ys: [20, 30] }, b: { xs: [3], ys: [1] } }))).toBe(true);
    expect(store.get("a")?.xs).toEqual([1, 2, 3]);
    expect(store.get("a")?.ys).toEqual([10, 20, 30]);
    expect(store.size("b")).toBe(1);
    expect(store.seq).toBe(2);
  });

  it("turns NaN ys into null so uPlot draws a gap", () => {
    const store = new SeriesStore();
    store.append(frame(0, { loss: { xs: [1, 2, 3], ys: [1, Number.NaN, 0.5] } }));
    expect(store.get("loss")?.ys).toEqual([1, null, 0.5]);
  });

  it("ignores an append already included in a snapshot and counts skipped seqs", () => {
    const store = new SeriesStore();
    store.replace(frame(10, { a: { xs: [1, 2], ys: [1, 2] } }));
    expect(store.append(frame(9, { a: { xs: [2], ys: [2] } }))).toBe(false);
    expect(store.append(frame(10, { a: { xs: [2], ys: [2] } }))).toBe(false);
    expect(store.size("a")).toBe(2);
    expect(store.append(frame(12, { a: { xs: [3], ys: [3] } }))).toBe(true);
    expect(store.gaps).toBe(1);
  });

  it("keeps every point it is sent: retention is the kernel decimator's, not the store's", () => {
    const store = new SeriesStore();
    for (let seq = 0; seq < 500; seq++) {
      const xs = Array.from({ length: 50 }, (_, i) => seq * 50 + i);
      store.append(frame(seq, { a: { xs, ys: xs } }));
    }
    expect(store.size("a")).toBe(25_000);
    expect(store.get("a")?.xs[0]).toBe(0);
    const big = Array.from({ length: 30_000 }, (_, i) => i);
    store.replace(frame(500, { a: { xs: big, ys: big } }));
    expect(store.size("a")).toBe(30_000);
  });

  it("has no retention policy of its own to configure", () => {
    expect(SeriesStore.length).toBe(0);
    expect(Object.keys(new SeriesStore())).not.toContain("capPoints");
  });

  it("notifies subscribers on every change until unsubscribed", () => {
    const store = new SeriesStore();
    let calls = 0;
    const off = store.subscribe(() => {
      calls += 1;
    });
    store.replace(frame(0, {}));
    store.append(frame(1, { a: { xs: [1], ys: [1] } }));
    store.append(frame(1, { a: { xs: [1], ys: [1] } })); // stale: no notification
    off();
    store.append(frame(2, { a: { xs: [2], ys: [2] } }));
    expect(calls).toBe(2);
    expect(store.version).toBe(3);
  });

  it("keeps each point's mapped x, NaN for points held before an axis was first sent", () => {
    const store = new SeriesStore();
    store.append(frame(0, { a: { xs: [1], ys: [1] } }));
    store.append(frame(1, { a: { xs: [2, 3], ys: [2, 3], mapped: { tokens: [20, 30] } } }));
    expect(store.get("a")?.mapped.tokens).toEqual([Number.NaN, 20, 30]);
    store.append(frame(2, { a: { xs: [4], ys: [4] } }));
    expect(store.get("a")?.mapped.tokens).toEqual([Number.NaN, 20, 30, Number.NaN]);
  });

  it("skips points whose x is not finite", () => {
    const store = new SeriesStore();
    store.append(frame(0, { a: { xs: [1, Number.NaN, 3], ys: [1, 2, 3] } }));
    expect(store.get("a")?.xs).toEqual([1, 3]);
  });
});
