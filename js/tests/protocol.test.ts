// @vitest-environment happy-dom
import { readFileSync } from "node:fs";
import { fileURLToPath, URL as NodeURL } from "node:url";
import { describe, expect, it } from "vitest";
import COLOURS from "../../src/trainmeter/widget/colours.json";
import goldenState from "../../tests/fixtures/state_v2.json";
import {
  type ChartSpec,
  decodeFrame,
  FALLBACK_LOOK,
  FrameError,
  isKernelMessage,
  type Look,
  type Marker,
  type PanelSpec,
  type Progress,
  readFrameHeader,
  type Tile,
  type WidgetState,
  type XAxisState,
  type XKind,
} from "../src/protocol";
import { SeriesStore } from "../src/store";
import { createView } from "../src/view";
import { stubCanvas } from "./canvas-stub";
import { encodeFrame, frame } from "./helpers";

const fixtures = fileURLToPath(new NodeURL("../../tests/fixtures/", import.meta.url)); // happy-dom replaces URL

interface GoldenSeries {
  name: string;
  x: string;
  xs: number[];
  mapped: Record<string, (number | null)[]>;
  ys: (number | null)[];
}
interface Golden {
  v: number;
  seq: number;
  byte_length: number;
  header_len: number;
  data_offset: number;
  series: GoldenSeries[];
}

const golden = JSON.parse(readFileSync(`${fixtures}frame_v2.json`, "utf-8")) as Golden;
const bin = readFileSync(`${fixtures}frame_v2.bin`);

function toNullable(a: Float64Array): (number | null)[] {
  return Array.from(a, (v) => (Number.isNaN(v) ? null : v));
}

function encode(seq: number, series: { name: string; x: string; xs: number[]; ys: number[] }[]): ArrayBuffer {
  return encodeFrame({
    v: 2,
    seq,
    series: series.map((s) => ({
      ...s,
      x: s.x as XKind,
      xs: Float64Array.from(s.xs),
      ys: Float64Array.from(s.ys),
      mapped: {},
    })),
  });
}

describe("golden frame shared with pytest", () => {
  it("decodes to the same series as its JSON form, NaN as null", () => {
    const frame = decodeFrame(new DataView(bin.buffer, bin.byteOffset, bin.byteLength));
    expect(bin.byteLength).toBe(golden.byte_length);
    expect(frame.v).toBe(golden.v);
    expect(frame.seq).toBe(golden.seq);
    expect(
      frame.series.map((s) => ({
        name: s.name,
        x: s.x,
        xs: Array.from(s.xs),
        mapped: Object.fromEntries(Object.entries(s.mapped).map(([k, v]) => [k, toNullable(v)])),
        ys: toNullable(s.ys),
      })),
    ).toEqual(golden.series);
    expect(Object.keys(frame.series[0]?.mapped ?? {})).toEqual(["tokens", "time"]); // mapped by Python
    expect(frame.series.some((s) => s.ys.some((y) => Number.isNaN(y)))).toBe(true);
  });

  it("finds the header length in UTF-8 bytes and the 8-aligned data offset", () => {
    const header = readFrameHeader(new Uint8Array(bin));
    expect(header.dataOffset).toBe(golden.data_offset);
    expect(header.dataOffset % 8).toBe(0);
    expect(new DataView(bin.buffer, bin.byteOffset).getUint32(4, true)).toBe(golden.header_len);
    expect(header.series.map((s) => s.name)).toContain("tok/s · session");
  });

  it("decodes from a DataView whose byte offset is not 8-aligned", () => {
    const shifted = new Uint8Array(bin.byteLength + 3);
    shifted.set(bin, 3);
    const frame = decodeFrame(new DataView(shifted.buffer, 3, bin.byteLength));
    expect(Array.from(frame.series[2]?.ys ?? [])).toEqual([1024.5, 2048, 3e9]);
  });

  it("copies columns so the host may reuse its buffer", () => {
    const copy = new Uint8Array(bin);
    const frame = decodeFrame(copy.buffer);
    copy.fill(0);
    expect(frame.series[0]?.xs[0]).toBe(1);
  });
});

describe("decodeFrame", () => {
  it("round-trips frames with every padding length", () => {
    for (let len = 1; len <= 16; len++) {
      const buf = encode(len, [{ name: "x".repeat(len), x: "step", xs: [1, 2], ys: [3, Number.NaN] }]);
      const frame = decodeFrame(buf);
      expect(frame.seq).toBe(len);
      expect(Array.from(frame.series[0]?.xs ?? [])).toEqual([1, 2]);
      expect(toNullable(frame.series[0]?.ys ?? new Float64Array())).toEqual([3, null]);
    }
  });

  it("reads each point's x on every axis it was sent with, the native first", () => {
    const buf = encodeFrame(
      frame(3, { loss: { xs: [1, 2], ys: [5, 4], mapped: { tokens: [64, 128], time: [0.5, Number.NaN] } } }),
    );
    expect(readFrameHeader(buf).series[0]?.axes).toEqual(["step", "tokens", "time"]);
    const loss = decodeFrame(buf).series[0];
    expect(Array.from(loss?.xs ?? [])).toEqual([1, 2]);
    expect(Array.from(loss?.mapped.tokens ?? [])).toEqual([64, 128]);
    expect(toNullable(loss?.mapped.time ?? new Float64Array())).toEqual([0.5, null]);
    expect(Array.from(loss?.ys ?? [])).toEqual([5, 4]);
  });

  it("decodes an empty frame", () => {
    expect(decodeFrame(encode(0, [])).series).toEqual([]);
  });

  it.each([
    ["too short", new Uint8Array([84, 77, 70]).buffer],
    ["bad magic", new TextEncoder().encode("XXXX\0\0\0\0").buffer],
    ["truncated inside its header", new Uint8Array([84, 77, 70, 49, 16, 0, 0, 0, 123, 125]).buffer],
  ])("rejects a frame that is %s", (message, buf) => {
    expect(() => decodeFrame(buf as ArrayBuffer)).toThrow(FrameError);
    expect(() => decodeFrame(buf as ArrayBuffer)).toThrow(message);
  });

  it("rejects truncated data and unknown versions or x kinds", () => {
    const buf = encode(1, [{ name: "a", x: "step", xs: [1, 2], ys: [3, 4] }]);
    expect(() => decodeFrame(buf.slice(0, buf.byteLength - 8))).toThrow("data truncated");
    const bad = new TextEncoder().encode('TMF1\x08\x00\x00\x00{"v":3} ');
    expect(() => decodeFrame(bad)).toThrow("unsupported");
    expect(() => decodeFrame(encode(1, [{ name: "a", x: "epoch", xs: [1], ys: [1] }]))).toThrow(
      "unknown x kind",
    );
  });
});

describe("isKernelMessage", () => {
  it("accepts append, state and snapshot and nothing else", () => {
    expect(isKernelMessage({ kind: "append", seq: 1 })).toBe(true);
    expect(isKernelMessage({ kind: "snapshot", seq: 0 })).toBe(true);
    expect(isKernelMessage({ kind: "state", state: { rev: 2, base: 1, ops: [] } })).toBe(true);
    expect(isKernelMessage({ kind: "hello" })).toBe(false);
    expect(isKernelMessage(null)).toBe(false);
  });
});

// ---- the golden state shared with pytest (tests/fixtures/make_state_v2.py, a FakeClock run) ----

/**
 * A type as a JSON import sees it: string-literal unions widened to string, and a record's values
 * possibly undefined (TS unions the objects of an array, giving each the others' keys as `?: undefined`).
 */
type Widen<T> = T extends string
  ? string
  : T extends number | boolean | null | undefined
    ? T
    : T extends (infer U)[]
      ? Widen<U>[]
      : { [K in keyof T]: Widen<T[K]> | (string extends K ? undefined : never) };

// Compile time (npm run typecheck): the fixture has the TS types' shape, key by key.
const typedGolden: Widen<WidgetState> = goldenState;

/** Every key of each TS type, once: tsc fails when a type gains or loses a key these do not list. */
const STATE_KEYS: Record<keyof WidgetState, true> = {
  rev: true,
  name: true,
  status: true,
  loss_state: true,
  elapsed_s: true,
  run_dir: true,
  run_rel: true,
  text_line: true,
  step: true,
  error: true,
  progress: true,
  tiles: true,
  phases_s: true,
  phase_bar: true,
  charts: true,
  panels: true,
  warnings: true,
  markers: true,
  x_axis: true,
  look: true,
  controls: true,
};
const TILE_KEYS: Record<keyof Tile, true> = {
  id: true,
  label: true,
  value: true,
  unit: true,
  text: true,
  sub: true,
  provenance: true,
  missing: true,
  not_here: true,
  derivation: true,
  derivations: true,
  alert: true,
};
const CHART_KEYS: Record<keyof ChartSpec, true> = {
  id: true,
  title: true,
  x: true,
  unit: true,
  series: true,
  log_y: true,
  labels: true,
  smoothed: true,
  latest: true,
  y_range: true,
};
const PANEL_KEYS: Record<keyof PanelSpec, true> = {
  id: true,
  title: true,
  rows: true,
  note: true,
  pending: true,
};
const PROGRESS_KEYS: Record<keyof Progress, true> = { fraction: true, eta_s: true, pace: true, label: true };
const MARKER_KEYS: Record<keyof Marker, true> = {
  kind: true,
  step: true,
  label: true,
  sentence: true,
  chart: true,
  at: true,
};
const X_AXIS_KEYS: Record<keyof XAxisState, true> = {
  tokens_label: true,
  tokens_missing: true,
  time_label: true,
  time_missing: true,
};
const LOOK_KEYS: Record<keyof Look, true> = {
  palette: true,
  phase_colours: true,
  main_charts: true,
  merged_panels: true,
  marker_max_points: true,
  faint_alpha: true,
  ticks: true,
};

const keysWithin = (items: object[], known: object): string[] =>
  items.flatMap((item) => Object.keys(item)).filter((k) => !(k in known));

describe("golden state shared with pytest", () => {
  const state = typedGolden as WidgetState;

  it("holds every key of WidgetState and no key the TS types do not know", () => {
    expect(Object.keys(goldenState).sort()).toEqual(Object.keys(STATE_KEYS).sort());
    expect(keysWithin(state.tiles ?? [], TILE_KEYS)).toEqual([]);
    expect(keysWithin(state.charts ?? [], CHART_KEYS)).toEqual([]);
    expect(keysWithin(state.panels ?? [], PANEL_KEYS)).toEqual([]);
    expect(keysWithin([state.progress ?? {}], PROGRESS_KEYS)).toEqual([]);
    expect(keysWithin(state.markers ?? [], MARKER_KEYS)).toEqual([]);
    expect(keysWithin([state.x_axis ?? {}], X_AXIS_KEYS)).toEqual([]);
    expect(Object.keys(state.look ?? {}).sort()).toEqual(Object.keys(LOOK_KEYS).sort());
    expect(state.status).toBe("running");
    expect((state.charts ?? []).every((c) => c.x === "step" || c.x === "time")).toBe(true);
  });

  it("sends the look this front end falls back to (one palette, layout, tick rule: widget/look.py's)", () => {
    expect(state.look).toEqual(FALLBACK_LOOK);
  });

  it("takes its colours from the one colours file Python reads (widget/colours.json)", () => {
    expect(FALLBACK_LOOK.palette).toEqual(COLOURS.palette);
    expect(FALLBACK_LOOK.phase_colours.checkpoint).toBe(COLOURS.palette[4]);
    const view = createView(new SeriesStore());
    const style = view.root.style;
    expect(
      ["success", "warn", "error", "marker"].map((n) => style.getPropertyValue(`--tm-fallback-${n}`)),
    ).toEqual(["#1a7f37", "#9a6700", "#cf222e", "#d1242f"]);
    view.destroy();
  });

  it("mounts a view that draws the loss with the kernel's smoothed twin and the look's layout", async () => {
    const restore = stubCanvas();
    try {
      const store = new SeriesStore();
      store.replace(
        frame(1, {
          train_loss: { xs: [1, 2, 3], ys: [2.5, 2.4, 2.45] },
          "train_loss.ema": { xs: [1, 2, 3], ys: [2.5, 2.45, 2.45] },
          val_loss: { xs: [3], ys: [2.3] },
          recent_tokens_per_s: { xs: [1, 2], ys: [600, 640], x: "time" },
        }),
      );
      const view = createView(store);
      document.body.append(view.root);
      view.update(state);
      await new Promise((resolve) => requestAnimationFrame(() => resolve(null)));
      await new Promise((resolve) => setTimeout(resolve, 0));
      const root = view.root;
      expect(root.querySelector('[data-tm="status"]')?.textContent).toBe("running");
      const step = state.tiles?.find((t) => t.id === "step")?.value;
      expect(root.querySelector('[data-tm-tile="step"] [data-value]')?.getAttribute("data-value")).toBe(
        String(step),
      );
      const grid = root.querySelector(".tm-charts") as HTMLElement;
      const main = [...grid.querySelectorAll<HTMLElement>(":scope > [data-tm-chart]")].map(
        (e) => e.dataset.tmChart,
      );
      expect(main).toEqual(state.look?.main_charts);
      const loss = root.querySelector<HTMLElement>('[data-tm-chart="loss"]') as HTMLElement;
      expect(loss.dataset.tmPoints).toBe("4"); // train_loss and val_loss; the twin is not counted
      const legend = loss.querySelector(".u-legend")?.textContent ?? "";
      expect(legend).toContain("smoothed (EMA, ~6 steps)");
      expect(legend).toContain("train loss2.038"); // the raw loss is the named line, the tile's value in the legend
      // off the chart, every legend row reads its series' newest value (not a blank until hovered)
      expect(legend).toMatch(/validation loss\d/);
      const toggle = loss.querySelector('[data-tm="smoothing"]') as HTMLElement;
      expect((toggle.parentElement as HTMLElement).hidden).toBe(false);
      expect(root.querySelector('.tm-panels [data-tm-panel="time"]')).toBeNull(); // merged into the phases
      expect(
        root.querySelector('.tm-phases [data-tm-panel="phases"], [data-tm-panel="phases"]'),
      ).not.toBeNull();
      view.destroy();
    } finally {
      restore();
    }
  });
});
