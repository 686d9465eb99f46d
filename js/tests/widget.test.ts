// @vitest-environment happy-dom
import { afterEach, describe, expect, it, vi } from "vitest";
import { type Model, storeFor } from "../src/lifecycle";
import type { WidgetState } from "../src/protocol";
import widget from "../src/widget";
import { stubCanvas } from "./canvas-stub";
import { FakeModel } from "./fake-model";
import { encodeFrame, frame } from "./helpers";

const nextFrame = (): Promise<void> => new Promise((resolve) => requestAnimationFrame(() => resolve()));
const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

function dv(buf: ArrayBuffer): DataView {
  return new DataView(buf);
}

function state(step: number, over: Partial<WidgetState> = {}): WidgetState {
  return {
    name: "demo",
    status: "running",
    elapsed_s: 12,
    tiles: [
      { id: "step", label: "step", value: step, unit: "count" },
      { id: "loss", label: "loss", value: 2.5, unit: "" },
    ],
    charts: [{ id: "loss", title: "Loss", x: "step", unit: "", series: ["loss/train"] }],
    ...over,
  };
}

function init(model: FakeModel): () => void {
  return widget.initialize({ model: model as unknown as Model });
}

const views: (() => void)[] = [];

function render(model: FakeModel, el: HTMLElement): () => void {
  const cleanup = widget.render({ model: model as unknown as Model, el });
  views.push(cleanup);
  return cleanup;
}

afterEach(() => {
  for (const cleanup of views.splice(0)) cleanup();
  vi.restoreAllMocks();
  document.body.replaceChildren();
});

describe("initialize", () => {
  it("sends hello once and listens for custom messages at model level", () => {
    const model = new FakeModel();
    const cleanup = init(model);
    expect(model.sent).toEqual([{ kind: "hello" }]);
    expect(model.listenerCount("msg:custom")).toBe(1);
    cleanup();
    expect(model.listenerCount("msg:custom")).toBe(0);
  });

  it("puts appended points in the model's store, and a snapshot replaces them", () => {
    const model = new FakeModel();
    init(model);
    model.emit("msg:custom", { kind: "append", seq: 1 }, [
      dv(encodeFrame(frame(1, { a: { xs: [1, 2], ys: [3, 4] } }))),
    ]);
    model.emit("msg:custom", { kind: "append", seq: 2 }, [
      dv(encodeFrame(frame(2, { a: { xs: [3], ys: [5] } }))),
    ]);
    const store = storeFor(model);
    expect(store.get("a")?.ys).toEqual([3, 4, 5]);
    model.emit("msg:custom", { kind: "snapshot", seq: 2 }, [
      dv(encodeFrame(frame(2, { b: { xs: [1], ys: [1] } }))),
    ]);
    expect(store.names()).toEqual(["b"]);
  });

  it("ignores other messages and survives a corrupt buffer", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const model = new FakeModel();
    init(model);
    model.emit("msg:custom", { kind: "hello" }, []);
    expect(() =>
      model.emit("msg:custom", { kind: "append", seq: 1 }, [dv(new ArrayBuffer(4))]),
    ).not.toThrow();
    expect(storeFor(model).empty).toBe(true);
    expect(warn).toHaveBeenCalled();
  });

  it("loads the history traitlet, and a newer history replaces the store", () => {
    const model = new FakeModel({ history: dv(encodeFrame(frame(5, { a: { xs: [1], ys: [1] } }))) });
    init(model);
    const store = storeFor(model);
    expect(store.seq).toBe(5);
    model.set("history", dv(encodeFrame(frame(4, { old: { xs: [1], ys: [1] } }))));
    expect(store.names()).toEqual(["a"]);
    model.set("history", dv(encodeFrame(frame(9, { a: { xs: [1, 2], ys: [1, 2] } }))));
    expect(store.size("a")).toBe(2);
  });
});

describe("render", () => {
  it("draws the root, status and step tile, and follows change:state", () => {
    const model = new FakeModel({ state: state(10) });
    init(model);
    const el = document.createElement("div");
    document.body.append(el);
    render(model, el);
    const root = el.querySelector(".trainmeter") as HTMLElement;
    expect(root).not.toBeNull();
    expect(root.querySelector('[data-tm="status"]')?.textContent).toBe("running");
    expect(root.querySelector('[data-tm="step"]')?.textContent).toBe("10");
    expect(root.querySelectorAll("[data-tm-tile]")).toHaveLength(2);
    model.set("state", state(11, { status: "completed" }));
    expect(root.querySelector('[data-tm="step"]')?.textContent).toBe("11");
    expect(root.querySelector('[data-tm="status"]')?.textContent).toBe("completed");
  });

  it("follows the kernel's state patches and a snapshot's whole state, and asks again for a missed one", () => {
    const now = vi.spyOn(Date, "now").mockReturnValue(1_000);
    const model = new FakeModel({ state: { ...state(10), rev: 0 } });
    init(model);
    const el = document.createElement("div");
    render(model, el);
    const before = storeFor(model);
    const patch = {
      rev: 1,
      base: 0,
      ops: [
        [["tiles", 0, "value"], 11],
        [["status"], "running"],
      ],
    };
    model.emit("msg:custom", { kind: "state", state: patch }, []);
    expect(el.querySelector('[data-tm="step"]')?.textContent).toBe("11");
    // a frame and a patch in one message
    model.emit(
      "msg:custom",
      { kind: "append", seq: 1, state: { rev: 2, base: 1, ops: [[["tiles", 0, "value"], 12]] } },
      [dv(encodeFrame(frame(1, { "loss/train": { xs: [1], ys: [3] } })))],
    );
    expect(el.querySelector('[data-tm="step"]')?.textContent).toBe("12");
    expect(before.size("loss/train")).toBe(1);
    // a patch cut from a state this page never had: refused, and the page says hello again (not at once)
    model.emit(
      "msg:custom",
      { kind: "state", state: { rev: 9, base: 8, ops: [[["tiles", 0, "value"], 99]] } },
      [],
    );
    expect(el.querySelector('[data-tm="step"]')?.textContent).toBe("12");
    expect(model.sent).toEqual([{ kind: "hello" }]);
    now.mockReturnValue(1_000 + 5_000);
    model.emit("msg:custom", { kind: "state", state: { rev: 10, base: 9, ops: [] } }, []);
    expect(model.sent).toEqual([{ kind: "hello" }, { kind: "hello" }]);
    // the answer: the whole state and history
    const full = { ...state(20), rev: 10 };
    model.emit("msg:custom", { kind: "snapshot", seq: 2, state: { rev: 10, full } }, [
      dv(encodeFrame(frame(2, { "loss/train": { xs: [1, 2], ys: [3, 2] } }))),
    ]);
    expect(el.querySelector('[data-tm="step"]')?.textContent).toBe("20");
    model.emit(
      "msg:custom",
      { kind: "state", state: { rev: 11, base: 10, ops: [[["tiles", 0, "value"], 21]] } },
      [],
    );
    expect(el.querySelector('[data-tm="step"]')?.textContent).toBe("21");
    expect(full.tiles?.[0]?.value).toBe(20); // patches copy what they change: the old state is untouched
  });

  it("draws points that arrived before the view existed, and later ones once per frame", async () => {
    const restore = stubCanvas();
    const model = new FakeModel({ state: state(1) });
    init(model);
    model.emit("msg:custom", { kind: "append", seq: 1 }, [
      dv(encodeFrame(frame(1, { "loss/train": { xs: [1], ys: [3] } }))),
    ]);
    const el = document.createElement("div");
    document.body.append(el);
    const cleanup = render(model, el);
    await nextFrame();
    const chart = el.querySelector('[data-tm-chart="loss"]') as HTMLElement;
    expect(chart.dataset.tmPoints).toBe("1");
    for (let seq = 2; seq <= 5; seq++) {
      const f = frame(seq, { "loss/train": { xs: [seq], ys: [3 / seq] } });
      model.emit("msg:custom", { kind: "append", seq }, [dv(encodeFrame(f))]);
    }
    await nextFrame();
    expect(chart.dataset.tmPoints).toBe("5");
    await settle();
    cleanup();
    restore();
  });

  it("gives every view the whole history and cleans up its listeners and DOM", () => {
    const model = new FakeModel({ state: state(3) });
    init(model);
    model.emit("msg:custom", { kind: "append", seq: 1 }, [
      dv(encodeFrame(frame(1, { "loss/train": { xs: [1], ys: [3] } }))),
    ]);
    const first = document.createElement("div");
    const second = document.createElement("div");
    const cleanFirst = render(model, first);
    render(model, second);
    expect(model.listenerCount("change:history")).toBe(3); // the model's, and one per view
    expect(model.listenerCount("change:state")).toBe(1); // the model's: the views follow its state store
    cleanFirst();
    expect(model.listenerCount("change:history")).toBe(2);
    expect(first.querySelector(".trainmeter")).toBeNull();
    expect(second.querySelector('[data-tm="step"]')?.textContent).toBe("3");
    expect(storeFor(model).size("loss/train")).toBe(1);
  });

  it("renders a model without state", () => {
    const model = new FakeModel();
    const el = document.createElement("div");
    render(model, el);
    expect(el.querySelector(".trainmeter")).not.toBeNull();
  });
});

describe("model proxies", () => {
  it("shares one store between proxies of the same model via store_key", () => {
    const a = { get: (k: string) => (k === "store_key" ? "abc" : null) };
    const b = { get: (k: string) => (k === "store_key" ? "abc" : null) };
    const c = { get: (k: string) => (k === "store_key" ? "other" : null) };
    expect(storeFor(a)).toBe(storeFor(b));
    expect(storeFor(a)).not.toBe(storeFor(c));
  });
});
