// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { buildHeader, buildPanels, buildPhaseBar, buildTiles, buildWarnings } from "../src/panels";
import type { Tile, WidgetState } from "../src/protocol";

const mfuTile: Tile = {
  id: "mfu",
  label: "MFU",
  value: 0.42,
  unit: "fraction",
  provenance: "measured",
  derivation: {
    name: "mfu",
    formula: "achieved_flops_per_s / peak_flops_per_s",
    value: 0.42,
    unit: "fraction",
    inputs: [
      {
        name: "achieved_flops_per_s",
        value: 4.2e14,
        unit: "flop/s",
        provenance: "counted",
        source: "FlopCounterMode",
      },
      {
        name: "peak_flops_per_s",
        value: 1e15,
        unit: "flop/s",
        provenance: "declared",
        source: "--peak-tflops",
      },
    ],
    missing: null,
  },
};

function state(over: Partial<WidgetState> = {}): WidgetState {
  return {
    name: "gpt-tiny",
    status: "running",
    elapsed_s: 65,
    tiles: [
      { id: "step", label: "step", value: 1234, unit: "count" },
      { id: "tokens", label: "tokens", value: 1_200_000, unit: "tokens" },
      mfuTile,
      { id: "cuda_mem", label: "CUDA memory", value: null, unit: "bytes", missing: "no CUDA device" },
    ],
    ...over,
  };
}

describe("header", () => {
  it("shows name, status and elapsed, and updates the same status element", () => {
    const header = buildHeader();
    header.update(state());
    const status = header.el.querySelector('[data-tm="status"]');
    expect(status?.textContent).toBe("running");
    expect(header.el.querySelector(".tm-name")?.textContent).toBe("gpt-tiny");
    expect(header.el.querySelector('[data-tm="elapsed"]')?.textContent).toBe("0:01:05");
    header.update(state({ status: "completed" }));
    expect(header.el.querySelector('[data-tm="status"]')).toBe(status);
    expect(status?.textContent).toBe("completed");
    expect((status as HTMLElement).dataset.status).toBe("completed");
  });

  it("shows a progress bar with ETA and pace only when progress is set", () => {
    const header = buildHeader();
    header.update(state());
    const progress = header.el.querySelector(".tm-progress") as HTMLElement;
    expect(progress.hidden).toBe(true);
    header.update(
      state({ progress: { fraction: 0.25, eta_s: 3600, pace: "training-only", label: "250/1000 steps" } }),
    );
    expect(progress.hidden).toBe(false);
    expect((header.el.querySelector(".tm-progress-fill") as HTMLElement).style.width).toBe("25.00%");
    expect(progress.textContent).toBe("25.0% · 250/1000 steps · ETA 1:00:00 (training-only pace)");
  });
});

describe("tiles", () => {
  it("renders the step in data-tm=step and updates it in place", () => {
    const tiles = buildTiles();
    tiles.update(state());
    const step = tiles.el.querySelector('[data-tm="step"]') as HTMLElement;
    expect(step.textContent).toBe("1,234");
    expect(step.dataset.value).toBe("1234");
    tiles.update(state({ tiles: [{ id: "step", label: "step", value: 1300, unit: "count" }] }));
    expect(tiles.el.querySelector('[data-tm="step"]')).toBe(step);
    expect(step.textContent).toBe("1,300");
    expect(tiles.el.querySelectorAll("[data-tm-tile]")).toHaveLength(1);
  });

  it("formats by unit and shows what is missing", () => {
    const tiles = buildTiles();
    tiles.update(state());
    const tokens = tiles.el.querySelector('[data-tm-tile="tokens"] .tm-tile-value');
    expect(tokens?.textContent).toBe("1.2M");
    const mem = tiles.el.querySelector('[data-tm-tile="cuda_mem"]') as HTMLElement;
    expect(mem.classList.contains("tm-tile--missing")).toBe(true);
    expect(mem.querySelector(".tm-tile-value")?.textContent).toBe("—");
    expect(mem.querySelector(".tm-tile-sub")?.textContent).toBe("no CUDA device");
    expect(tiles.el.querySelector('[data-tm-tile="mfu"] .tm-badge')?.textContent).toBe("measured");
  });

  it("folds the tiles that do not apply on this machine into one line with their whole reasons", () => {
    const tiles = buildTiles();
    const why = "the model is on the CPU: there is no dense datasheet peak to divide by";
    tiles.update(
      state({
        tiles: [
          { id: "step", label: "step", value: 3, unit: "count" },
          { id: "mfu", label: "MFU", value: null, unit: "fraction", missing: why, not_here: true },
          {
            id: "energy",
            label: "Energy",
            value: null,
            unit: "",
            missing: "no NVIDIA driver",
            not_here: true,
          },
          { id: "loss", label: "loss", value: null, unit: "", missing: "a loss" },
        ],
      }),
    );
    expect(
      [...tiles.el.querySelectorAll<HTMLElement>("[data-tm-tile]")].map((t) => t.dataset.tmTile),
    ).toEqual(["step", "loss"]);
    const line = tiles.el.querySelector('[data-tm="not-here"]') as HTMLElement;
    expect(line.hidden).toBe(false);
    expect(line.querySelector("summary")?.textContent).toBe("Not on this machine: MFU, Energy (why)");
    expect([...line.querySelectorAll(".tm-not-here-why > div")].map((d) => d.textContent)).toEqual([
      `MFU: ${why}`,
      "Energy: no NVIDIA driver",
    ]);
    tiles.update(state({ tiles: [{ id: "step", label: "step", value: 3, unit: "count" }] }));
    expect(line.hidden).toBe(true);
  });

  it("toggles a popover with the formula and inputs' provenance on click", () => {
    const tiles = buildTiles();
    tiles.update(state());
    const popover = tiles.el.querySelector('[data-tm="derivation"]') as HTMLElement;
    const mfu = tiles.el.querySelector('[data-tm-tile="mfu"]') as HTMLElement;
    expect(popover.hidden).toBe(true);
    mfu.click();
    expect(popover.hidden).toBe(false);
    expect(mfu.getAttribute("aria-expanded")).toBe("true");
    expect(popover.querySelector('[data-tm="formula"]')?.textContent).toBe(
      "achieved_flops_per_s / peak_flops_per_s",
    );
    const peak = popover.querySelector('[data-input="peak_flops_per_s"]');
    expect(peak?.textContent).toContain("1.0 PFLOP/s");
    expect(peak?.textContent).toContain("declared");
    expect(peak?.textContent).toContain("--peak-tflops");
    tiles.update(state()); // a state update keeps it open
    expect(popover.hidden).toBe(false);
    mfu.click();
    expect(popover.hidden).toBe(true);
  });

  it("ignores clicks on tiles without a derivation", () => {
    const tiles = buildTiles();
    tiles.update(state());
    (tiles.el.querySelector('[data-tm-tile="tokens"]') as HTMLElement).click();
    expect((tiles.el.querySelector('[data-tm="derivation"]') as HTMLElement).hidden).toBe(true);
  });

  it("closes the popover when the tile loses its derivation", () => {
    const tiles = buildTiles();
    tiles.update(state());
    (tiles.el.querySelector('[data-tm-tile="mfu"]') as HTMLElement).click();
    tiles.update(state({ tiles: [{ ...mfuTile, derivation: null }] }));
    expect((tiles.el.querySelector('[data-tm="derivation"]') as HTMLElement).hidden).toBe(true);
  });

  it("works out every derivation of a range tile, each with its provenance note", () => {
    const base = mfuTile.derivation as NonNullable<Tile["derivation"]>;
    const hf = {
      ...base,
      name: "mfu[hf]",
      provenance_note: "declared: the weakest of its inputs (F counted)",
    };
    const noF = { name: "F", value: null, unit: "FLOP/token", provenance: "assumed" };
    const titan = { ...base, name: "mfu[titan]", value: null, inputs: [noF], missing: "needs --layers N" };
    const range: Tile = { ...mfuTile, text: "42.0%", derivation: hf, derivations: [hf, titan] };
    const tiles = buildTiles();
    tiles.update(state({ tiles: [range] }));
    (tiles.el.querySelector('[data-tm-tile="mfu"]') as HTMLElement).click();
    const popover = tiles.el.querySelector('[data-tm="derivation"]') as HTMLElement;
    const names = [...popover.querySelectorAll(".tm-deriv-head strong")].map((e) => e.textContent);
    expect(names).toEqual(["mfu[hf]", "mfu[titan]"]);
    expect(popover.querySelector('[data-tm="provenance"]')?.textContent).toContain(
      "the weakest of its inputs",
    );
    expect(popover.querySelector(".tm-deriv-missing")?.textContent).toBe("Missing: needs --layers N");
    const missingInput = popover.querySelectorAll('[data-input="F"]')[0] as HTMLElement;
    expect(missingInput.textContent).toContain("—");
    expect(missingInput.querySelector(".tm-badge")).toBeNull(); // no badge on a missing value
  });
});

describe("phase bar, panels, warnings", () => {
  it("draws one segment per phase in proportion, with a legend", () => {
    const bar = buildPhaseBar();
    // the shares and the largest are Python's (widget/view_model.py phase_bar); nothing is summed here
    bar.update(
      state({
        phases_s: { train: 30, eval: 10, checkpoint: 0, my_phase: 10 },
        phase_bar: { shares: { train: 0.6, eval: 0.2, my_phase: 0.2 }, top: "train" },
      }),
    );
    const segs = [...bar.el.querySelectorAll<HTMLElement>(".tm-phase")];
    expect(segs.map((s) => s.dataset.phase)).toEqual(["train", "eval", "my_phase"]);
    expect(segs.map((s) => s.style.flexGrow)).toEqual(["0.6", "0.2", "0.2"]);
    expect(bar.el.textContent).toContain("train: 30.0 s (60.0%)");
    expect(bar.el.textContent).toContain("Where the time went — train 60.0%");
    bar.update(state({ phases_s: {}, phase_bar: { shares: {}, top: null } }));
    expect(bar.el.hidden).toBe(true);
  });

  it("renders generic key/value panels with provenance and notes", () => {
    const panels = buildPanels();
    panels.update(
      state({
        panels: [
          {
            id: "gpu",
            title: "GPU",
            rows: [
              { label: "memory", value: 8 * 1024 ** 3, unit: "bytes", provenance: "measured" },
              { label: "name", value: "A100", unit: "" },
              { label: "power", value: null, unit: "W", note: "not supported" },
            ],
            note: "NVML",
          },
        ],
      }),
    );
    const panel = panels.el.querySelector('[data-tm-panel="gpu"]') as HTMLElement;
    expect(panel.tagName).toBe("DETAILS"); // folded until the user opens it
    expect(panel.querySelector("summary")?.textContent).toBe("GPU");
    const cells = [...panel.querySelectorAll(".tm-kv-value")].map((c) => c.textContent);
    expect(cells).toEqual(["8.0 GiB", "A100", "—"]);
    expect(panel.textContent).toContain("not supported");
    expect(panel.textContent).toContain("measured");
  });

  it("shows a panel with no value as one line saying why, with no badge", () => {
    const panels = buildPanels();
    panels.update(
      state({
        panels: [
          {
            id: "gpu",
            title: "GPU",
            rows: [{ label: "util", value: null, unit: "", provenance: "measured" }],
            note: "no NVIDIA GPU visible (install nvidia-ml-py on a GPU machine)",
          },
        ],
      }),
    );
    const line = panels.el.querySelector('[data-tm-panel="gpu"]') as HTMLElement;
    expect(line.tagName).toBe("DIV");
    expect(line.textContent).toBe("GPU — no NVIDIA GPU visible (install nvidia-ml-py on a GPU machine)");
    expect(line.querySelector(".tm-badge")).toBeNull();
  });

  it("says how a finished run ended instead of an ETA", () => {
    const header = buildHeader();
    const progress = { fraction: 0.3, eta_s: 29, pace: "training-only" as const, label: "300 / 1k steps" };
    header.update(state({ status: "failed", step: 300, error: "ValueError: bad", progress }));
    expect(header.el.textContent).toContain("failed at step 300: ValueError: bad");
    expect(header.el.textContent).not.toContain("ETA");
    header.update(state({ status: "completed", elapsed_s: 62, progress }));
    expect(header.el.textContent).toContain("finished in 0:01:02");
  });

  it("says a stopped run stopped, and by whom, in the static view's words", () => {
    const header = buildHeader();
    const progress = { fraction: 0.3, eta_s: 29, pace: "training-only" as const, label: "300 / 1k steps" };
    header.update(state({ status: "stopped", step: 300, elapsed_s: 62, progress }));
    expect(header.el.textContent).toContain("stopped at step 300 after 0:01:02");
    expect(header.el.textContent).not.toContain("ETA");
    const controls = { stopped: { by: "alert loss_nan", step: 300 } } as unknown as WidgetState["controls"];
    header.update(state({ status: "stopped", step: 300, elapsed_s: 62, progress, controls }));
    expect(header.el.textContent).toContain("stopped by alert loss_nan at step 300 after 0:01:02");
  });

  it("remembers which sections are open per widget", () => {
    localStorage.clear();
    const first = buildPhaseBar("w1");
    first.update(state({ phases_s: { train: 3 }, phase_bar: { shares: { train: 1 }, top: "train" } }));
    const details = first.el as HTMLDetailsElement;
    expect(details.open).toBe(false);
    details.open = true;
    details.dispatchEvent(new Event("toggle"));
    expect((buildPhaseBar("w1").el as HTMLDetailsElement).open).toBe(true);
    expect((buildPhaseBar("w2").el as HTMLDetailsElement).open).toBe(false);
  });

  it("lists warnings and hides when there are none", () => {
    const warnings = buildWarnings();
    warnings.update(state({ warnings: ["sampler: NVML not found"] }));
    expect(warnings.el.querySelectorAll("li")).toHaveLength(1);
    expect(warnings.el.hidden).toBe(false);
    warnings.update(state({ warnings: [] }));
    expect(warnings.el.hidden).toBe(true);
  });
});

describe("the time split", () => {
  it("joins the time-split panel to the phase bar: one section, and no separate panel", () => {
    const time = {
      id: "time",
      title: "Where the time goes",
      rows: [{ label: "train", value: 0.9, unit: "fraction" }],
    };
    const bar = buildPhaseBar();
    bar.update(
      state({
        phases_s: { train: 9, eval: 1 },
        phase_bar: { shares: { train: 0.9, eval: 0.1 }, top: "train" },
        panels: [time],
      }),
    );
    expect(bar.el.textContent).toContain("Where the time goes — train 90.0%");
    expect(bar.el.querySelector(".tm-kv-table")?.textContent).toContain("90.0%");
    const panels = buildPanels();
    panels.update(state({ panels: [time] }));
    expect(panels.el.querySelector('[data-tm-panel="time"]')).toBeNull();
  });
});

describe("a loss that went non-finite or diverged", () => {
  const nan: Tile = { id: "loss", label: "loss", value: null, unit: "", text: "nan", alert: true };

  it("reads nan in the alert colour's class on its tile", () => {
    const tiles = buildTiles();
    tiles.update({ name: "r", status: "running", tiles: [nan] });
    const tile = tiles.el.querySelector('[data-tm-tile="loss"]') as HTMLElement;
    expect(tile.classList.contains("tm-tile--alert")).toBe(true);
    expect(tile.classList.contains("tm-tile--missing")).toBe(false);
    expect(tile.querySelector(".tm-tile-value")?.textContent).toBe("nan");
  });

  it("says so in the status chip (Python's loss_state), never a plain completed", () => {
    const header = buildHeader();
    header.update({ name: "r", status: "completed", loss_state: "nonfinite", tiles: [nan] });
    const status = header.el.querySelector('[data-tm="status"]') as HTMLElement;
    expect(status.textContent).toBe("completed · loss nan");
    expect(status.dataset.loss).toBe("nonfinite");
    header.update({ name: "r", status: "completed", loss_state: "diverged" });
    expect(status.textContent).toBe("completed · loss diverged");
    header.update({ name: "r", status: "completed", loss_state: null });
    expect(status.textContent).toBe("completed");
    expect(status.dataset.loss).toBeUndefined();
  });
});
