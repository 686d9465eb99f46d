// Per-model series store: every view of a model draws from the one store, so a
// view created late (or re-created at the cell's end) still shows the whole history.
// It keeps every point it is sent, with its x on every axis as Python mapped it: the
// kernel's decimator (widget/decimate.py) owns retention, and replaces a series whose
// copy grew past its bound (an append's `replace`) or the whole store (a snapshot).

import type { Frame, FrameSeries, XKind, XMode } from "./protocol";

export interface StoredSeries {
  name: string;
  x: XKind;
  xs: number[];
  /** y values; a missing value (NaN on the wire) is `null`, which uPlot draws as a gap. */
  ys: (number | null)[];
  /** The same points' x on the other axes (NaN: not placed there), as long as `xs`. */
  mapped: Partial<Record<XMode, number[]>>;
}

export type Listener = () => void;

/** Listeners called after every change of a store (a failing one is logged, the others still run). */
export class Listeners {
  private readonly fns = new Set<Listener>();

  constructor(private readonly what: string) {}

  /** Call `fn` after every change; returns the unsubscribe function. */
  subscribe(fn: Listener): () => void {
    this.fns.add(fn);
    return () => {
      this.fns.delete(fn);
    };
  }

  notify(): void {
    for (const fn of [...this.fns]) {
      try {
        fn();
      } catch (err) {
        console.warn(`trainmeter: ${this.what} listener failed`, err);
      }
    }
  }
}

function toStored(s: FrameSeries): StoredSeries {
  const out: StoredSeries = { name: s.name, x: s.x, xs: [], ys: [], mapped: {} };
  pushPoints(out, s);
  return out;
}

function pushPoints(target: StoredSeries, s: FrameSeries): void {
  const axes = Object.keys(s.mapped) as XMode[];
  for (const axis of axes) {
    // a column first sent now: the points held before it are not placed on that axis
    if (!target.mapped[axis]) target.mapped[axis] = target.xs.map(() => Number.NaN);
  }
  for (let i = 0; i < s.xs.length; i++) {
    const x = s.xs[i] as number;
    if (!Number.isFinite(x)) continue;
    const y = s.ys[i] as number;
    target.xs.push(x);
    target.ys.push(Number.isNaN(y) ? null : y);
    for (const [axis, column] of Object.entries(target.mapped) as [XMode, number[]][]) {
      column.push(s.mapped[axis]?.[i] ?? Number.NaN);
    }
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
  private readonly listeners = new Listeners("store");

  /** Replace the whole store with a frame's series (a snapshot or the history traitlet). */
  replace(frame: Frame): void {
    this.byName.clear();
    for (const s of frame.series) {
      this.byName.set(s.name, toStored(s));
    }
    this.seq = frame.seq;
    this.changed();
  }

  /**
   * Append a frame of new points; the series named in `replace` take the frame's points
   * instead of adding them. A frame whose seq is not newer than the store's is already
   * included (for example in a snapshot) and is ignored.
   * @returns whether the frame was applied.
   */
  append(frame: Frame, replace: readonly string[] = []): boolean {
    if (this.seq >= 0 && frame.seq <= this.seq) return false;
    if (this.seq >= 0 && frame.seq > this.seq + 1) this.gaps += 1;
    for (const s of frame.series) {
      const stored = this.byName.get(s.name);
      if (stored === undefined || replace.includes(s.name)) this.byName.set(s.name, toStored(s));
      else pushPoints(stored, s);
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
    return this.listeners.subscribe(fn);
  }

  private changed(): void {
    this.version += 1;
    this.listeners.notify();
  }
}
