// The charts' switchable x axis: step, tokens or time. Python sends every point with its x on
// each axis (the frames' mapped columns, widget/x_axis.py) and each marker's (`at`), and says
// in state.x_axis why an axis is off; a chart draws its points against the chosen axis as they
// came, and keeps its own x for a series sent without that axis (its x label says which).

import type { XAxisState, XMode } from "./protocol";

export type { XMode } from "./protocol";
export { X_MODES } from "./protocol";

/** The x axis caption of a chart drawn against `mode`. */
export function xCaption(mode: XMode, axis: XAxisState | null | undefined): string {
  if (mode === "tokens") return axis?.tokens_label ?? "tokens (cumulative)";
  if (mode === "time") return axis?.time_label ?? "time since start (s, wall clock)";
  return "step";
}

/** Why `mode` is not available (null when it is), as Python says (state.x_axis). */
export function unavailable(mode: XMode, axis: XAxisState | null | undefined): string | null {
  if (mode === "step") return null;
  if (mode === "tokens" && axis?.tokens_missing) return axis.tokens_missing;
  return axis?.time_missing ?? null;
}

const PREFIX = "trainmeter.x.";

function storage(): Storage | null {
  try {
    return typeof localStorage === "undefined" ? null : localStorage;
  } catch {
    return null;
  }
}

/** The x mode remembered for widget `key` (default step). */
export function rememberedMode(key: string | undefined): XMode {
  const raw = key ? storage()?.getItem(PREFIX + key) : null;
  return raw === "tokens" || raw === "time" ? raw : "step";
}

export function rememberMode(key: string | undefined, mode: XMode): void {
  if (!key) return;
  try {
    storage()?.setItem(PREFIX + key, mode);
  } catch {
    // a blocked storage only forgets the choice
  }
}
