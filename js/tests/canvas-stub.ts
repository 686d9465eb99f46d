import { vi } from "vitest";

/** An object whose every method is a no-op (measureText returns a width). */
function noopObject(): object {
  const target: Record<string | symbol, unknown> = {};
  return new Proxy(target, {
    get(t, key) {
      if (key in t) return t[key];
      if (key === "measureText") return () => ({ width: 10 });
      if (key === "canvas") return undefined;
      return () => undefined;
    },
    set(t, key, value) {
      t[key] = value;
      return true;
    },
  });
}

/** Give happy-dom a stand-in 2D canvas and Path2D so uPlot can be created (nothing is drawn). */
export function stubCanvas(): () => void {
  const spy = vi
    .spyOn(HTMLCanvasElement.prototype, "getContext")
    .mockImplementation((() => noopObject()) as unknown as HTMLCanvasElement["getContext"]);
  const g = globalThis as { Path2D?: unknown };
  const hadPath2D = "Path2D" in g;
  const previous = g.Path2D;
  g.Path2D = class {
    constructor() {
      // biome-ignore lint/correctness/noConstructorReturn: a no-op path
      return noopObject();
    }
  };
  return () => {
    spy.mockRestore();
    if (hadPath2D) g.Path2D = previous;
    else delete g.Path2D;
  };
}
