// Per-model state: what every view of a model draws. The `state` traitlet gives it whole (at the
// start, at the end, a restored page's); while the run is live the kernel sends what changed, as
// patches numbered by revision (docs/protocol.md section 2), and a whole state in answer to hello.
// A patch applies only to the revision it was cut from; one that does not is refused (the page
// asks for the whole state again). Patching copies the objects along each path and shares the rest,
// so a view can compare the old and new parts it holds.

import type { PatchOp, StatePatch, WidgetState } from "./protocol";
import { type Listener, Listeners } from "./store";

type Node = Record<string | number, unknown>;

/** `state` with `ops` applied (widget/patch.py `apply`); nothing of `state` is modified. */
export function applyOps<T>(state: T, ops: readonly PatchOp[]): T {
  let root: unknown = state;
  for (const op of ops) {
    const [path] = op;
    if (path.length === 0) {
      root = op[1];
      continue;
    }
    const top = copy(root);
    let node = top;
    for (const key of path.slice(0, -1)) {
      const child = copy(node[key]);
      node[key] = child;
      node = child;
    }
    const last = path[path.length - 1] as string | number;
    if (op.length < 2) {
      if (Array.isArray(node)) node.splice(Number(last), 1);
      else delete node[last];
    } else node[last] = op[1];
    root = top;
  }
  return root as T;
}

function copy(node: unknown): Node {
  if (Array.isArray(node)) return [...node] as unknown as Node;
  return { ...(node as Node) };
}

export class StateStore {
  state: WidgetState | null = null;
  /** Patches refused: their base was not this state's revision (a message was missed). */
  refused = 0;
  private readonly listeners = new Listeners("state");

  /** The revision of the state held (0 for a state without one). */
  get rev(): number {
    return this.state?.rev ?? 0;
  }

  /** Take a whole state (the traitlet's, a snapshot's). */
  setFull(state: WidgetState | null | undefined): void {
    if (state == null || state === this.state) return;
    this.state = state;
    this.changed();
  }

  /** Apply a patch; returns whether it applied (its base is this state's revision). */
  applyPatch(patch: StatePatch): boolean {
    if (this.state == null || patch.base !== this.rev) {
      this.refused += 1;
      return false;
    }
    this.state = { ...applyOps(this.state, patch.ops), rev: patch.rev };
    this.changed();
    return true;
  }

  /** Call `fn` after every change; returns the unsubscribe function. */
  subscribe(fn: Listener): () => void {
    return this.listeners.subscribe(fn);
  }

  private changed(): void {
    this.listeners.notify();
  }
}
