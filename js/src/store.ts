// Per-model series store: every view of a model draws from the one store, so a
// view created late (or re-created at the cell's end) still shows the whole history.
// It keeps every point it is sent: the kernel's decimator (widget/decimate.py) owns
// retention, and its snapshots replace the store whenever it re-buckets.

import type { Frame, XKind } from "./protocol";

export interface StoredSeries {
  name: string;
  x: XKind;
  xs: number[];
  /** y values; a missing value (NaN on the wire) is `null`, which uPlot draws as a gap. */
  ys: (number | null)[];
}

export type Listener = () => void;

function toStored(name: string, x: XKind, xs: Float64Array, ys: Float64Array): StoredSeries {
  const out: StoredSeries = { name, x, xs: [], ys: [] };
  pushPoints(out, xs, ys);
  return out;
}

function pushPoints(target: StoredSeries, xs: Float64Array, ys: Float64Array): void {
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i] as number;
    if (!Number.isFinite(x)) continue;
    const y = ys[i] as number;
    target.xs.push(x);
    target.ys.push(Number.isNaN(y) ? null : y);
  }
}

export class SeriesStore {
  /** Sequence number of the last frame applied; -1 before any. */
  seq = -1;
  /** Increases on every change; views compare it to skip needless redraws. */
  version = 0;
  /** Appends whose seq skipped ahead (a message was lost); kept for diagnostics. */
  gaps = 0;
  private readonly byName = new Map<string, StoredSeries>();
  private readonly listeners = new Set<Listener>();

  /** Replace the whole store with a frame's series (a snapshot or the history traitlet). */
  replace(frame: Frame): void {
    this.byName.clear();
    for (const s of frame.series) {
      this.byName.set(s.name, toStored(s.name, s.x, s.xs, s.ys));
    }
    this.seq = frame.seq;
    this.changed();
  }

  /**
   * Append a frame of new points. A frame whose seq is not newer than the store's
   * is already included (for example in a snapshot) and is ignored.
   * @returns whether the frame was applied.
   */
  append(frame: Frame): boolean {
    if (this.seq >= 0 && frame.seq <= this.seq) return false;
    if (this.seq >= 0 && frame.seq > this.seq + 1) this.gaps += 1;
    for (const s of frame.series) {
      const stored = this.byName.get(s.name);
      if (stored === undefined) this.byName.set(s.name, toStored(s.name, s.x, s.xs, s.ys));
      else pushPoints(stored, s.xs, s.ys);
    }
    this.seq = frame.seq;
    this.changed();
    return true;
  }

  get(name: string): StoredSeries | undefined {
    return this.byName.get(name);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  /** Number of points held for `name` (0 when absent). */
  size(name: string): number {
    return this.byName.get(name)?.xs.length ?? 0;
  }

  get empty(): boolean {
    return this.byName.size === 0;
  }

  /** Call `fn` after every change; returns the unsubscribe function. */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => {
      this.listeners.delete(fn);
    };
  }

  private changed(): void {
    this.version += 1;
    for (const fn of [...this.listeners]) {
      try {
        fn();
      } catch (err) {
        console.warn("trainmeter: store listener failed", err);
      }
    }
  }
}
