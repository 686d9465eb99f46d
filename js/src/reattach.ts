// A page reloaded while the run's cell executes. The kernel answers the widget restore
// during the cell (widget/restore_route.py), so this model exists again, but the page
// holds no request for the running cell: the kernel's display messages for that cell
// (the widget view, the static dashboard at the end) never reach its output area.
// The front end does their job in the notebook model itself:
// - after the first snapshot, if no output of the run's cell (the kernel sends the
//   JupyterLab cell id in `output_ref`) shows this model, it adds the widget view;
// - on `{"kind": "final", "data": bundle}` (sent at the run's end when a page restored
//   during it), every output still showing this model's widget view becomes `bundle`,
//   the static dashboard, so the notebook saved afterwards keeps it.
// In the page that ran the cell both find nothing to do: its outputs already changed.
// A cell's trust is the user's decision: nothing here writes it. In an untrusted cell (an
// unsigned notebook reloads its cells untrusted) JupyterLab draws no widget view, but it
// draws the added output's sanitized text/html: that copy hosts the live view, mounted
// by this page's script (mount.ts) once an anchor is put in it (the sanitizer strips
// data-tm-mount and renames the id to data-jupyter-id). Its text, and the text/plain
// where even that is not drawn, say how to trust the notebook. The final static
// dashboard shows either way (docs/protocol.md section 4).
// Needs @jupyter-widgets/jupyterlab-manager (JupyterLab 4, Notebook 7), whose manager
// exposes the document context; elsewhere (VS Code, Colab) nothing happens.

export const WIDGET_VIEW = "application/vnd.jupyter.widget-view+json";
export const UNTRUSTED_NOTE =
  " (this notebook is not trusted: Jupyter draws no widget in it, so trainmeter draws the live view" +
  " itself where it can; to trust the notebook: Notebook 7: File > Trust Notebook; JupyterLab: Trust" +
  " Notebook in the command palette; or `jupyter trust NOTEBOOK.ipynb`. The static dashboard shows at" +
  " the cell's end either way)";
/** The id of the untrusted copy's element that hosts the live view of store key `key`. */
export const liveHostId = (key: string): string => `tm-live-${key}`;

export interface OutputRef {
  model_id?: string;
  cell_id?: string | null;
  /** The running cell's source: finds the cell when its id changed (a notebook saved without cell ids, reloaded). */
  source?: string | null;
}

interface OutputLike {
  data?: Record<string, unknown>;
}
export interface OutputListLike {
  length: number;
  get(index: number): OutputLike;
  set(index: number, value: Record<string, unknown>): void;
  add(value: Record<string, unknown>): number;
}
interface CellLike {
  id?: string;
  readonly trusted?: boolean;
  outputs?: OutputListLike;
  sharedModel?: { getSource?: () => string };
}
interface CellListLike {
  length: number;
  get(index: number): CellLike;
}
export interface NotebookLike {
  cells: CellListLike;
}

/** The notebook model behind `model`'s widget manager (jupyterlab-manager), or null. */
export function notebookOf(model: unknown): NotebookLike | null {
  try {
    const manager = (model as { widget_manager?: { context?: { model?: unknown } } }).widget_manager;
    const nb = manager?.context?.model as NotebookLike | undefined;
    return nb?.cells && typeof nb.cells.get === "function" ? nb : null;
  } catch {
    return null;
  }
}

function cellsOf(nb: NotebookLike): CellLike[] {
  const out: CellLike[] = [];
  for (let i = 0; i < nb.cells.length; i++) out.push(nb.cells.get(i));
  return out;
}

function showsModel(output: OutputLike, modelId: string): boolean {
  const view = output.data?.[WIDGET_VIEW] as { model_id?: unknown } | undefined;
  return !!view && view.model_id === modelId;
}

/** Every (outputs, index) whose output is a widget view of `modelId`. */
export function viewsOf(nb: NotebookLike, modelId: string): Array<[OutputListLike, number]> {
  const found: Array<[OutputListLike, number]> = [];
  for (const cell of cellsOf(nb)) {
    const outputs = cell.outputs;
    if (!outputs || typeof outputs.get !== "function") continue;
    for (let i = 0; i < outputs.length; i++) {
      if (showsModel(outputs.get(i), modelId)) found.push([outputs, i]);
    }
  }
  return found;
}

/**
 * Add a widget view of `ref.model_id` to the cell `ref.cell_id` when no output of the
 * notebook shows it. @returns whether a view was added.
 */
export function addViewIfMissing(
  nb: NotebookLike,
  ref: OutputRef | null | undefined,
  text: string,
  key?: unknown,
): boolean {
  const modelId = ref?.model_id;
  const cellId = ref?.cell_id;
  if (!modelId || (!cellId && !ref?.source) || viewsOf(nb, modelId).length > 0) return false;
  const cell = runCell(cellsOf(nb), ref);
  if (!cell?.outputs || typeof cell.outputs.add !== "function") return false;
  // An untrusted cell draws a widget view as its text/plain only: that text says so (never change the trust).
  const untrusted = cell.trusted === false;
  const plain = untrusted ? text + UNTRUSTED_NOTE : text;
  const data: Record<string, unknown> = {
    [WIDGET_VIEW]: { model_id: modelId, version_major: 2, version_minor: 1 },
    "text/plain": plain,
  };
  if (untrusted && typeof key === "string" && /^[\w-]+$/.test(key)) {
    const note = plain.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    data["text/html"] = `<div id="${liveHostId(key)}">${note}</div>`;
    anchorWhenShown(key);
  }
  cell.outputs.add({ output_type: "display_data", data, metadata: {} });
  return true;
}

/**
 * Put a `data-tm-mount` anchor in the untrusted copy's host element once the page draws it, so
 * mount.ts draws the live view there (its note stays above, saying the notebook is not trusted).
 */
export function anchorWhenShown(key: string, doc: Document = globalThis.document, waitMs = 60_000): void {
  if (!doc?.body) return;
  const place = (): boolean => {
    const id = liveHostId(key); // JupyterLab's sanitizer renames an untrusted id to data-jupyter-id
    const host = doc.getElementById(id) ?? doc.querySelector(`[data-jupyter-id="${id}"]`);
    if (!host) return false;
    const anchor = doc.createElement("div");
    anchor.dataset.tmMount = key;
    host.append(anchor);
    return true;
  };
  if (place() || typeof MutationObserver === "undefined") return;
  const observer = new MutationObserver(() => {
    if (place()) observer.disconnect();
  });
  observer.observe(doc.body, { childList: true, subtree: true });
  setTimeout(() => observer.disconnect(), waitMs);
}

/**
 * The run's cell: by id, else the one cell whose source is the run's (a notebook saved without cell ids
 * gets new ids when the page reloads it).
 */
function runCell(cells: CellLike[], ref: OutputRef | null | undefined): CellLike | undefined {
  const byId = ref?.cell_id ? cells.find((c) => c.id === ref.cell_id) : undefined;
  if (byId || !ref?.source) return byId;
  const source = (c: CellLike): string | null => {
    try {
      return c.sharedModel?.getSource?.() ?? null;
    } catch {
      return null;
    }
  };
  const same = cells.filter((c) => source(c) === ref.source);
  return same.length === 1 ? same[0] : undefined;
}

/** Replace every widget view of `modelId` by `bundle` (the static dashboard). @returns how many. */
export function replaceViews(nb: NotebookLike, modelId: string | undefined, bundle: unknown): number {
  if (!modelId || typeof bundle !== "object" || bundle === null) return 0;
  const views = viewsOf(nb, modelId);
  for (const [outputs, index] of views) {
    outputs.set(index, {
      output_type: "display_data",
      data: bundle as Record<string, unknown>,
      metadata: {},
    });
  }
  return views.length;
}

export function isFinalMessage(msg: unknown): msg is { kind: "final"; data: Record<string, unknown> } {
  const m = msg as { kind?: unknown; data?: unknown } | null;
  return (
    typeof m === "object" && m !== null && m.kind === "final" && typeof m.data === "object" && m.data !== null
  );
}
