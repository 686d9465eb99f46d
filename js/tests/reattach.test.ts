import { describe, expect, it } from "vitest";
import {
  addViewIfMissing,
  isFinalMessage,
  type NotebookLike,
  notebookOf,
  replaceViews,
  UNTRUSTED_NOTE,
  viewsOf,
  WIDGET_VIEW,
} from "../src/reattach";

type Output = { data?: Record<string, unknown> };

function outputs(items: Output[]) {
  return {
    items,
    get length() {
      return items.length;
    },
    get: (i: number) => items[i] as Output,
    set: (i: number, value: Record<string, unknown>) => {
      items[i] = value as Output;
    },
    add: (value: Record<string, unknown>) => items.push(value as Output),
  };
}

function notebook(cells: Array<{ id: string; outs: Output[] }>, trusted = false) {
  const writes: unknown[] = [];
  const list = cells.map((c) => {
    const cell = { id: c.id, outputs: outputs(c.outs) } as {
      id: string;
      trusted: boolean;
      outputs: ReturnType<typeof outputs>;
    };
    Object.defineProperty(cell, "trusted", {
      get: () => trusted,
      set: (value: unknown) => writes.push(value), // the user's decision: must never be written
      enumerable: true,
    });
    return cell;
  });
  const nb: NotebookLike = { cells: { length: list.length, get: (i: number) => list[i] as never } };
  return { nb, list, writes };
}

const view = (modelId: string): Output => ({
  data: { [WIDGET_VIEW]: { model_id: modelId }, "text/plain": "x" },
});

describe("reattach", () => {
  it("finds the notebook model through jupyterlab-manager's context, else null", () => {
    const { nb } = notebook([]);
    expect(notebookOf({ widget_manager: { context: { model: nb } } })).toBe(nb);
    expect(notebookOf({ widget_manager: {} })).toBeNull();
    expect(notebookOf({})).toBeNull();
  });

  it("adds the widget view to the run's cell when no output shows the model", () => {
    const { nb, list } = notebook([
      { id: "a", outs: [] },
      { id: "run", outs: [] },
    ]);
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "line")).toBe(true);
    expect(list[1]?.outputs.items).toHaveLength(1);
    expect(viewsOf(nb, "m1")).toHaveLength(1);
    expect(list[0]?.outputs.items).toHaveLength(0);
  });

  it("finds the run's cell by its source when a reload gave it a new id (a notebook saved without ids)", () => {
    const { nb, list } = notebook([
      { id: "new-1", outs: [] },
      { id: "new-2", outs: [] },
    ]);
    const sources = ["import torch", "%%trainmeter\ntrain()"];
    list.forEach((c, i) => {
      (c as unknown as { sharedModel: { getSource: () => string } }).sharedModel = {
        getSource: () => sources[i] as string,
      };
    });
    const ref = { model_id: "m1", cell_id: "old-id", source: "%%trainmeter\ntrain()" };
    expect(addViewIfMissing(nb, ref, "line")).toBe(true);
    expect(list[1]?.outputs.items).toHaveLength(1);
    expect(list[0]?.outputs.items).toHaveLength(0);
    // two cells with that source: no guess
    const twin = notebook([
      { id: "x", outs: [] },
      { id: "y", outs: [] },
    ]);
    for (const c of twin.list) {
      (c as unknown as { sharedModel: { getSource: () => string } }).sharedModel = {
        getSource: () => "same",
      };
    }
    expect(addViewIfMissing(twin.nb, { model_id: "m1", cell_id: "old", source: "same" }, "line")).toBe(false);
  });

  it("never writes a cell's trust; an untrusted cell's view says how to see it", () => {
    const { nb, list, writes } = notebook([{ id: "run", outs: [] }]);
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "line")).toBe(true);
    expect(writes).toEqual([]);
    expect(list[0]?.trusted).toBe(false);
    expect(list[0]?.outputs.items[0]?.data?.["text/plain"]).toBe(`line${UNTRUSTED_NOTE}`);
    const trusted = notebook([{ id: "run", outs: [] }], true);
    expect(addViewIfMissing(trusted.nb, { model_id: "m1", cell_id: "run" }, "line")).toBe(true);
    expect(trusted.writes).toEqual([]);
    expect(trusted.list[0]?.outputs.items[0]?.data?.["text/plain"]).toBe("line");
  });

  it("adds nothing when an output already shows the model (the page that ran the cell, or a saved one)", () => {
    const { nb, list } = notebook([{ id: "run", outs: [view("m1")] }]);
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "line")).toBe(false);
    expect(list[0]?.outputs.items).toHaveLength(1);
  });

  it("adds nothing without a cell id or when the cell is gone", () => {
    const { nb } = notebook([{ id: "other", outs: [] }]);
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: null }, "line")).toBe(false);
    expect(addViewIfMissing(nb, { model_id: "m1", cell_id: "run" }, "line")).toBe(false);
  });

  it("replaces every view of the model by the final bundle and leaves other outputs", () => {
    const other = view("m2");
    const { nb, list } = notebook([
      { id: "run", outs: [{ data: { "text/plain": "log" } }, view("m1"), other] },
    ]);
    const bundle = { "text/html": "<div class='trainmeter-snapshot'></div>", "text/plain": "done" };
    expect(replaceViews(nb, "m1", bundle)).toBe(1);
    expect(list[0]?.outputs.items[1]).toEqual({ output_type: "display_data", data: bundle, metadata: {} });
    expect(list[0]?.outputs.items[2]).toBe(other);
    expect(replaceViews(nb, "m1", bundle)).toBe(0);
  });

  it("recognises only a final message with a bundle", () => {
    expect(isFinalMessage({ kind: "final", data: { "text/plain": "x" } })).toBe(true);
    expect(isFinalMessage({ kind: "final" })).toBe(false);
    expect(isFinalMessage({ kind: "snapshot", seq: 1 })).toBe(false);
  });
});
