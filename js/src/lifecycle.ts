// The widget's lifecycle: `initialize` runs once per model and owns the series
// store, the state store and the custom-message listener; `render` runs once per view.
// widget.ts re-exports these as the module's *default* export only: a named `render`
// export makes anywidget take its legacy path and skip `initialize`.

import type { AnyModel } from "@anywidget/types";
import { watchMounts } from "./mount";
import {
  decodeFrame,
  type Frame,
  isKernelMessage,
  readFrameHeader,
  type Traits,
  type WidgetState,
} from "./protocol";
import { addViewIfMissing, isFinalMessage, notebookOf, type OutputRef, replaceViews } from "./reattach";
import { StateStore } from "./statestore";
import { SeriesStore } from "./store";
import { createView, type View } from "./view";

export type Model = Pick<AnyModel<Traits>, "get" | "on" | "off" | "send">;

/** A page asks for the whole state again (hello) at most this often when a patch does not apply. */
export const ASK_AGAIN_MS = 5000;

// anywidget hands `initialize` and each `render` a new proxy of the same model, so
// stores are keyed by the model's `store_key` trait (a per-widget id set by Python).
class Keyed<T extends object> {
  private readonly byModel = new WeakMap<object, T>();
  private readonly byKey = new Map<string, T>();

  constructor(private readonly make: () => T) {}

  for(model: object): T {
    const get = (model as Partial<Pick<Model, "get">>).get;
    const key =
      typeof get === "function" ? (model as { get(k: string): unknown }).get("store_key") : undefined;
    const [map, id] = typeof key === "string" && key ? [this.byKey, key] : [null, model];
    let store = map ? map.get(id as string) : this.byModel.get(id);
    if (!store) {
      store = this.make();
      if (map) map.set(id as string, store);
      else this.byModel.set(id, store);
    }
    return store;
  }
}

const seriesStores = new Keyed(() => new SeriesStore());
const stateStores = new Keyed(() => new StateStore());
const warned = new Set<string>();

function warnOnce(key: string, ...args: unknown[]): void {
  if (warned.has(key)) return;
  warned.add(key);
  console.warn(`trainmeter: ${key}`, ...args);
}

/** The model-level series store shared by all views (and proxies) of `model`. */
export function storeFor(model: object): SeriesStore {
  return seriesStores.for(model);
}

/** The model-level state store shared by all views (and proxies) of `model`; it starts from the traitlet. */
export function stateFor(model: Model): StateStore {
  const states = stateStores.for(model);
  if (states.state == null) states.setFull(model.get("state"));
  return states;
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

/**
 * Apply one kernel -> front end custom message: its frame to the series store, its state (a patch,
 * or a snapshot's whole state) to the state store.
 * @returns false when a state patch did not apply (the page should ask for the whole state).
 */
export function handleMessage(
  store: SeriesStore,
  msg: unknown,
  buffers: readonly DataView[] | undefined,
  states?: StateStore,
): boolean {
  if (!isKernelMessage(msg)) return true;
  if (msg.kind !== "state") {
    const buffer = buffers?.[0];
    let frame: Frame | null = null;
    try {
      if (buffer) frame = decodeFrame(buffer);
      else warnOnce(`${msg.kind} without a buffer`);
    } catch (err) {
      warnOnce(`bad ${msg.kind} frame`, err);
    }
    if (frame && msg.kind === "snapshot") store.replace(frame);
    else if (frame) store.append(frame, msg.kind === "append" ? msg.replace : undefined);
  }
  const patch = msg.state;
  if (!states || !patch) return true;
  if ("full" in patch) {
    states.setFull(patch.full);
    return true;
  }
  return states.applyPatch(patch);
}

function hello(model: Model): void {
  try {
    model.send({ kind: "hello" });
  } catch (err) {
    warnOnce("hello not sent", err);
  }
}

export function initialize({ model }: { model: Model }): () => void {
  const store = storeFor(model);
  const states = stateFor(model);
  syncHistory(model, store);
  let checkedView = false;
  let askedAt = Date.now();
  const onMessage = (msg: unknown, buffers: DataView[]): void => {
    if (isFinalMessage(msg)) {
      reattach(model, (nb, ref) => replaceViews(nb, ref?.model_id, msg.data));
      return;
    }
    // a patch cut from a state this page never had (it missed a message): ask for the whole state again
    if (!handleMessage(store, msg, buffers, states) && Date.now() - askedAt >= ASK_AGAIN_MS) {
      askedAt = Date.now();
      hello(model);
    }
    // the answer to hello comes after the cell's own display message: a page that ran the
    // cell shows the view by now; a page reloaded during the run may not (reattach.ts)
    if (!checkedView && isLive(states.state)) {
      checkedView = true;
      reattach(model, (nb, ref) =>
        addViewIfMissing(nb, ref, "trainmeter: live dashboard", model.get("store_key")),
      );
    }
  };
  const onHistory = (): void => {
    syncHistory(model, store);
  };
  const onState = (): void => states.setFull(model.get("state"));
  model.on("msg:custom", onMessage);
  model.on("change:history", onHistory);
  model.on("change:state", onState);
  hello(model);
  // the static dashboard the kernel shows after a run (and for tm.display) is replaced by a live one
  const stopMounts = watchMounts(model.get("store_key"), (el) => render({ model, el }));
  return () => {
    stopMounts();
    model.off("msg:custom", onMessage);
    model.off("change:history", onHistory);
    model.off("change:state", onState);
  };
}

function isLive(state: WidgetState | null): boolean {
  return state?.status === "running" || state?.status === "starting";
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
  const states = stateFor(model);
  syncHistory(model, store);
  const key = model.get("store_key");
  const view: View = createView(store, {
    key: typeof key === "string" ? key : undefined,
    send: (msg) => model.send(msg),
  });
  el.append(view.root);
  const onState = (): void => view.update(states.state);
  const onHistory = (): void => {
    syncHistory(model, store);
  };
  onState();
  const unsubscribe = store.subscribe(() => view.invalidateCharts());
  const unsubscribeState = states.subscribe(onState); // the traitlet and the patches (initialize)
  model.on("change:history", onHistory);
  return () => {
    unsubscribe();
    unsubscribeState();
    model.off("change:history", onHistory);
    view.destroy();
  };
}
