// The widget's lifecycle: `initialize` runs once per model and owns the series
// store and the custom-message listener; `render` runs once per view. widget.ts
// re-exports these as the module's *default* export only: a named `render`
// export makes anywidget take its legacy path and skip `initialize`.

import type { AnyModel } from "@anywidget/types";
import { watchMounts } from "./mount";
import { decodeFrame, type Frame, isKernelMessage, readFrameHeader, type Traits } from "./protocol";
import { addViewIfMissing, isFinalMessage, notebookOf, type OutputRef, replaceViews } from "./reattach";
import { SeriesStore } from "./store";
import { createView, type View } from "./view";

export type Model = Pick<AnyModel<Traits>, "get" | "on" | "off" | "send">;

// anywidget hands `initialize` and each `render` a new proxy of the same model, so
// stores are keyed by the model's `store_key` trait (a per-widget id set by Python).
const stores = new WeakMap<object, SeriesStore>();
const storesByKey = new Map<string, SeriesStore>();
const warned = new Set<string>();

function warnOnce(key: string, ...args: unknown[]): void {
  if (warned.has(key)) return;
  warned.add(key);
  console.warn(`trainmeter: ${key}`, ...args);
}

/** The model-level store shared by all views (and proxies) of `model`. */
export function storeFor(model: object): SeriesStore {
  const get = (model as Partial<Pick<Model, "get">>).get;
  const key = typeof get === "function" ? (model as { get(k: string): unknown }).get("store_key") : undefined;
  if (typeof key === "string" && key) {
    let byKey = storesByKey.get(key);
    if (!byKey) {
      byKey = new SeriesStore();
      storesByKey.set(key, byKey);
    }
    return byKey;
  }
  let store = stores.get(model);
  if (!store) {
    store = new SeriesStore();
    stores.set(model, store);
  }
  return store;
}

function isEmptyBuffer(value: unknown): boolean {
  if (value == null) return true;
  if (value instanceof ArrayBuffer) return value.byteLength === 0;
  if (ArrayBuffer.isView(value)) return value.byteLength === 0;
  return true;
}

/**
 * Load the `history` traitlet into the store when it is newer than what the store
 * holds (or the store has nothing yet). Idempotent: safe to call from every view.
 * @returns whether the store was replaced.
 */
export function syncHistory(model: Model, store: SeriesStore): boolean {
  const history = model.get("history");
  if (history == null || isEmptyBuffer(history)) return false;
  try {
    const header = readFrameHeader(history);
    if (store.seq >= 0 && header.seq <= store.seq) return false;
    store.replace(decodeFrame(history));
    return true;
  } catch (err) {
    warnOnce("bad history frame", err);
    return false;
  }
}

/** Apply one kernel -> front end custom message to the store. */
export function handleMessage(
  store: SeriesStore,
  msg: unknown,
  buffers: readonly DataView[] | undefined,
): void {
  if (!isKernelMessage(msg)) return;
  const buffer = buffers?.[0];
  if (!buffer) {
    warnOnce(`${msg.kind} without a buffer`);
    return;
  }
  let frame: Frame;
  try {
    frame = decodeFrame(buffer);
  } catch (err) {
    warnOnce(`bad ${msg.kind} frame`, err);
    return;
  }
  if (msg.kind === "snapshot") store.replace(frame);
  else store.append(frame);
}

export function initialize({ model }: { model: Model }): () => void {
  const store = storeFor(model);
  syncHistory(model, store);
  let checkedView = false;
  const onMessage = (msg: unknown, buffers: DataView[]): void => {
    if (isFinalMessage(msg)) {
      reattach(model, (nb, ref) => replaceViews(nb, ref?.model_id, msg.data));
      return;
    }
    handleMessage(store, msg, buffers);
    // the answer to hello comes after the cell's own display message: a page that ran the
    // cell shows the view by now; a page reloaded during the run may not (reattach.ts)
    if (!checkedView && isLive(model)) {
      checkedView = true;
      reattach(model, (nb, ref) => addViewIfMissing(nb, ref, "trainmeter: live dashboard"));
    }
  };
  const onHistory = (): void => {
    syncHistory(model, store);
  };
  model.on("msg:custom", onMessage);
  model.on("change:history", onHistory);
  try {
    model.send({ kind: "hello" });
  } catch (err) {
    warnOnce("hello not sent", err);
  }
  // the static dashboard the kernel shows after a run (and for tm.display) is replaced by a live one
  const stopMounts = watchMounts(model.get("store_key"), (el) => render({ model, el }));
  return () => {
    stopMounts();
    model.off("msg:custom", onMessage);
    model.off("change:history", onHistory);
  };
}

function isLive(model: Model): boolean {
  const status = (model.get("state") as { status?: string } | null)?.status;
  return status === "running" || status === "starting";
}

function reattach(
  model: Model,
  act: (nb: NonNullable<ReturnType<typeof notebookOf>>, ref: OutputRef) => unknown,
): void {
  try {
    const nb = notebookOf(model);
    const ref = (model as unknown as { get(k: string): unknown }).get("output_ref") as OutputRef | null;
    if (nb && ref) act(nb, ref);
  } catch (err) {
    warnOnce("the output of a reloaded page was not updated", err);
  }
}

export function render({ model, el }: { model: Model; el: HTMLElement }): () => void {
  const store = storeFor(model);
  syncHistory(model, store);
  const key = model.get("store_key");
  const view: View = createView(store, {
    key: typeof key === "string" ? key : undefined,
    send: (msg) => model.send(msg),
  });
  el.append(view.root);
  const onState = (): void => view.update(model.get("state"));
  const onHistory = (): void => {
    syncHistory(model, store);
  };
  onState();
  const unsubscribe = store.subscribe(() => view.invalidateCharts());
  model.on("change:state", onState);
  model.on("change:history", onHistory);
  return () => {
    unsubscribe();
    model.off("change:state", onState);
    model.off("change:history", onHistory);
    view.destroy();
  };
}
