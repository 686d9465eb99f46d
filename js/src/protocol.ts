// Wire protocol v2 (docs/protocol.md): the frame decoder and the shapes of
// the traitlets and custom messages. Mirrors src/trainmeter/widget/frame.py (frames) and
// tests/widget/wire_types.py (the typed state and messages); the golden
// tests/fixtures/state_v2.json is parsed into these types by js/tests/protocol.test.ts.

// The one colours file (src/trainmeter/widget/colours.json: Python reads it too), bundled in.
import COLOURS from "../../src/trainmeter/widget/colours.json";

import type { XKind } from "./frame";

export * from "./frame";

export const SCHEMA_VERSION = 2;

// ---- custom messages (section 2) ----

/** What changed since state `base` (widget/patch.py): `[path, value]` sets, `[path]` deletes; `[]` is the root. */
export type PatchOp = [path: (string | number)[], value?: unknown];
export interface StatePatch {
  rev: number;
  base: number;
  ops: PatchOp[];
}
/** A whole state at revision `rev` (a snapshot's). */
export interface FullState {
  rev: number;
  full: WidgetState;
}

export type KernelMessage =
  | { kind: "append"; seq: number; replace?: string[]; state?: StatePatch }
  | { kind: "state"; state: StatePatch }
  | { kind: "snapshot"; seq: number; state?: FullState };
/** Sent once at the run's end to a page restored during the run (reattach.ts): the static dashboard. */
export type FinalMessage = { kind: "final"; data: Record<string, string> };
/** The Stop / Checkpoint buttons, for run `run_id` (widget/controls.py `obey`). */
export type ControlMessage = { kind: "control"; action: ControlAction; run_id: string };
export type ControlAction = "stop" | "checkpoint";
export type FrontMessage = { kind: "hello" } | ControlMessage;

export function isKernelMessage(msg: unknown): msg is KernelMessage {
  const m = msg as { kind?: unknown } | null;
  return (
    typeof m === "object" &&
    m !== null &&
    (m.kind === "append" || m.kind === "snapshot" || m.kind === "state")
  );
}

// ---- the `state` traitlet (section 1) ----

/** `unfinished`: a replayed run with no end record. */
export type Status =
  | "starting"
  | "running"
  | "completed"
  | "interrupted"
  | "failed"
  | "stopped"
  | "unfinished";
export type Unit = "" | "count" | "tokens" | "bytes" | "s" | "tokens/s" | "fraction" | "flop" | "flop/s";

export interface DerivationInput {
  name: string;
  value: number | string | null;
  unit: string;
  provenance: string;
  source?: string;
}

export interface Derivation {
  name: string;
  formula: string;
  value: number | null;
  unit: string;
  inputs: DerivationInput[];
  missing?: string | null;
  /** On a tile's derivation: the weakest provenance of its inputs, the tile's badge. */
  provenance?: string;
  /** Why: "detected: the weakest of its inputs (F detected, tokens counted)". */
  provenance_note?: string;
}

export interface Tile {
  id: string;
  label: string;
  value: number | null;
  unit: string;
  text?: string;
  sub?: string;
  provenance?: string;
  missing?: string;
  /** `missing` is about this machine (no GPU, no power reading): the tile folds into one line that says why. */
  not_here?: boolean;
  derivation?: Derivation | null;
  /** Several worked out in the popover (the MFU range: one per convention); else `derivation`. */
  derivations?: Derivation[];
  /** Drawn in the alert colour (a loss that went non-finite or diverged). */
  alert?: boolean;
}

export interface Progress {
  fraction: number;
  eta_s: number | null;
  pace: "training-only" | "session" | "recent";
  label: string;
}

export interface ChartSpec {
  id: string;
  title: string;
  x: XKind;
  unit: string;
  series: string[];
  log_y?: boolean;
  /** Human label (with its unit) of each series, keyed by series name: what the legend prints. */
  labels?: Record<string, string>;
  /**
   * Raw series -> its smoothed twin, computed by the kernel over every step (optim/smoothing.py):
   * a light band over the raw line, in its colour. The front end smooths nothing.
   */
  smoothed?: Record<string, string>;
  /** A series' newest value as read (the loss tile's; "nan"/"inf" when not finite): the legend's off the chart. */
  latest?: Record<string, number | string | null>;
  /** The y axis from `[0]` to at least `[1]` (the memory chart: 0 to the device's total). */
  y_range?: [number, number | null] | null;
}

/** A verdict's marker: where on which chart a trouble began (verdicts/markers.py). */
export interface Marker {
  kind: string;
  step: number;
  label: string;
  sentence: string;
  /** Id of the chart it belongs on ("loss", "throughput", "memory"). */
  chart: string;
  /** Its step on the other x axes, mapped by Python (null: not placed there). */
  at?: { tokens: number | null; time: number | null };
}

/** What the x control needs besides the frames' mapped x columns (widget/x_axis.py). */
export interface XAxisState {
  tokens_label: string;
  /** Why the tokens axis is off (no tokens counted); null when it is available. */
  tokens_missing?: string | null;
  time_label: string;
  /** Why the time (and tokens) axes have nothing yet (no step); null when they do. */
  time_missing?: string | null;
}

/** The phase bar (widget/view_model.py `phase_bar`): each phase's share, in order, and the largest. */
export interface PhaseBar {
  shares: Record<string, number>;
  top: string | null;
}

export interface PanelRow {
  label: string;
  value: number | string | null;
  unit: string;
  provenance?: string;
  note?: string;
}

export interface PanelSpec {
  id: string;
  title: string;
  rows: PanelRow[];
  note?: string;
  /** Its values come at the first report: drawn as a box from the start (not the one-line absent form). */
  pending?: boolean;
}

/** The axis tick rule's numbers (widget/look.py; ticks.ts applies them). */
export interface TickRule {
  max_ticks: number;
  min_ticks: number;
  /** Steps times a power of ten, by preference; the last only when nothing else fits. */
  linear_steps: number[];
  /** Multipliers of each decade on a log axis, denser first. */
  log_steps: number[][];
}

/** Palette, layout ids and tick rule: owned by Python (widget/look.py), sent in the state. */
export interface Look {
  palette: string[];
  phase_colours: Record<string, string>;
  /** Charts on the first screen; the others fold into "More charts". */
  main_charts: string[];
  /** Panels shown inside another section (the time split joins the phase bar). */
  merged_panels: string[];
  /** A series with at most this many points gets a dot on every point. */
  marker_max_points: number;
  /** Hex alpha of a raw line under its smoothed twin. */
  faint_alpha: string;
  ticks: TickRule;
}

/** A line or phase with no colour of its own (an empty palette): the static charts' ink. */
export const INK: string = COLOURS.ink;

/**
 * The colours the stylesheet falls back to where the host has none (base.css `--tm-success`, `--tm-warn`,
 * `--tm-error`; panels.css `--tm-marker`), set on the widget's root: the static views' status and markers.
 */
export function setFallbackColours(root: HTMLElement): void {
  for (const name of ["success", "warn", "error", "marker"] as const) {
    root.style.setProperty(`--tm-fallback-${name}`, COLOURS[name]);
  }
}

/**
 * The look for a state that has none (the empty state before the first one arrives).
 * Its colours are widget/colours.json's; the layout and tick rule the same values as widget/look.py and
 * widget/look.py: js/tests/protocol.test.ts checks it against the golden state.
 */
export const FALLBACK_LOOK: Look = {
  palette: COLOURS.palette,
  phase_colours: Object.fromEntries(
    Object.entries(COLOURS.phase_palette_index).map(([phase, i]) => [phase, COLOURS.palette[i] ?? INK]),
  ),
  main_charts: ["loss", "throughput"],
  merged_panels: ["time"],
  marker_max_points: 40,
  faint_alpha: "55",
  ticks: {
    max_ticks: 6,
    min_ticks: 4,
    linear_steps: [1, 2, 5, 2.5],
    log_steps: [[1, 2, 3, 4, 5, 6, 8], [1, 2, 4, 6, 8], [1, 2, 5], [1, 3], [1]],
  },
};

/** The state's look, else the fallback. */
export function lookOf(state: { look?: Look | null } | null | undefined): Look {
  return state?.look ?? FALLBACK_LOOK;
}

export interface WidgetState {
  /** Its revision: a patch applies to the state whose rev is its base (section 2). */
  rev?: number;
  name: string;
  status: Status | string;
  /** The loss went non-finite or diverged (widget/facts.py): the status chip says so in its colour. */
  loss_state?: "nonfinite" | "diverged" | null;
  elapsed_s?: number;
  run_dir?: string | null;
  /** The run folder relative to the kernel's working folder (the notebook's), or null outside it. */
  run_rel?: string | null;
  text_line?: string;
  progress?: Progress | null;
  tiles?: Tile[];
  phases_s?: Record<string, number>;
  phase_bar?: PhaseBar | null;
  charts?: ChartSpec[];
  panels?: PanelSpec[];
  warnings?: string[];
  /** Optimizer steps so far (the header's "failed at step N"). */
  step?: number;
  /** `Type: message` of the exception that ended a failed run. */
  error?: string | null;
  /** Verdict markers, at most 16. */
  markers?: Marker[];
  x_axis?: XAxisState | null;
  /** Palette, layout ids and tick rule (widget/look.py). */
  look?: Look | null;
  /** The header's Stop / Checkpoint and the alerts' banner (widget/controls.py). */
  controls?: ControlsState | null;
}

/** One checkpoint written (passport.json `checkpoints`). */
export interface CheckpointEntry {
  path: string;
  step: number;
  bytes: number | null;
  seconds: number | null;
  source: string;
}

/** A fired alert; `notify`: tell the page (its title, a browser notification). */
export interface AlertEntry {
  rule: string;
  action: string;
  step: number;
  sentence: string;
  notify: boolean;
}

/** How the buttons reach the run: `message` (the widget's comm), `file` (the contents API) or null (disabled). */
export interface ControlsState {
  run_id: string | null;
  live: boolean;
  path: "message" | "file" | null;
  reason: string | null;
  control_file: string | null;
  pending: { stop: string | null; checkpoint: string | null };
  stopped: { by: string; step: number } | null;
  checkpoints: CheckpointEntry[];
  refused: { step: number; by: string; reason: string }[];
  alerts: AlertEntry[];
}

/** The traitlets the front end reads (`model.get`). */
export interface Traits {
  state: WidgetState | null;
  history: DataView | ArrayBuffer | null;
  schema_version: number;
  store_key?: string;
  output_ref?: { model_id: string | null; cell_id: string | null } | null;
}
