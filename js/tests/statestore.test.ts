import { describe, expect, it } from "vitest";
import type { WidgetState } from "../src/protocol";
import { applyOps, StateStore } from "../src/statestore";

const base = (): WidgetState => ({
  rev: 3,
  name: "r",
  status: "running",
  tiles: [
    { id: "step", label: "step", value: 1, unit: "count" },
    { id: "loss", label: "loss", value: 2, unit: "" },
  ],
  phases_s: { train: 1 },
});

describe("state patches (widget/patch.py's operations)", () => {
  it("sets and deletes along paths, copying only what they change", () => {
    const old = base();
    const next = applyOps(old, [
      [["tiles", 0, "value"], 5],
      [["phases_s", "eval"], 0.5],
      [["error"], "boom"],
      [["phases_s", "train"]],
    ]);
    expect(next.tiles?.[0]?.value).toBe(5);
    expect(next.phases_s).toEqual({ eval: 0.5 });
    expect(next.error).toBe("boom");
    expect(old.tiles?.[0]?.value).toBe(1); // the old state is untouched
    expect(old.phases_s).toEqual({ train: 1 });
    expect(next.tiles?.[1]).toBe(old.tiles?.[1]); // an unchanged part is shared
    expect(applyOps(old, [[[], { name: "x", status: "completed" }]])).toEqual({
      name: "x",
      status: "completed",
    });
  });

  it("applies a patch only to the revision it was cut from, and takes a whole state always", () => {
    const states = new StateStore();
    let calls = 0;
    states.subscribe(() => {
      calls += 1;
    });
    expect(states.applyPatch({ rev: 1, base: 0, ops: [] })).toBe(false); // nothing held yet
    states.setFull(base());
    expect(states.applyPatch({ rev: 4, base: 3, ops: [[["status"], "completed"]] })).toBe(true);
    expect(states.state?.status).toBe("completed");
    expect(states.rev).toBe(4);
    expect(states.applyPatch({ rev: 6, base: 5, ops: [[["status"], "failed"]] })).toBe(false);
    expect(states.state?.status).toBe("completed");
    expect(states.refused).toBe(2);
    states.setFull({ ...base(), rev: 9 });
    expect(states.rev).toBe(9);
    expect(calls).toBe(3);
  });
});
