import type { Frame, XKind, XMode } from "../src/protocol";

type Columns = { xs: number[]; ys: number[]; x?: XKind; mapped?: Partial<Record<XMode, number[]>> };

/** Build a decoded frame from plain arrays (NaN marks a gap); `mapped`: the points' x on the other axes. */
export function frame(seq: number, series: Record<string, Columns>): Frame {
  return {
    v: 2,
    seq,
    series: Object.entries(series).map(([name, s]) => ({
      name,
      x: s.x ?? "step",
      xs: Float64Array.from(s.xs),
      ys: Float64Array.from(s.ys),
      mapped: Object.fromEntries(Object.entries(s.mapped ?? {}).map(([k, v]) => [k, Float64Array.from(v)])),
    })),
  };
}

/** Encode a frame as frame.py does: the bytes a kernel would send. */
export function encodeFrame(f: Frame): ArrayBuffer {
  const axes = (s: Frame["series"][number]): string[] => [s.x, ...Object.keys(s.mapped ?? {})];
  const header = new TextEncoder().encode(
    JSON.stringify({
      v: 2,
      seq: f.seq,
      series: f.series.map((s) => ({
        name: s.name,
        x: s.x,
        n: s.xs.length,
        ...(axes(s).length > 1 ? { axes: axes(s) } : {}),
      })),
    }),
  );
  const dataOffset = Math.ceil((8 + header.length) / 8) * 8;
  const total = dataOffset + f.series.reduce((acc, s) => acc + 8 * s.xs.length * (axes(s).length + 1), 0);
  const out = new ArrayBuffer(total);
  const dv = new DataView(out);
  new Uint8Array(out).set(new TextEncoder().encode("TMF1"), 0);
  dv.setUint32(4, header.length, true);
  new Uint8Array(out).set(header, 8);
  let off = dataOffset;
  for (const s of f.series) {
    const mapped = Object.values(s.mapped ?? {}).flatMap((c) => [...(c as Float64Array)]);
    for (const v of [...s.xs, ...mapped, ...s.ys]) {
      dv.setFloat64(off, v, true);
      off += 8;
    }
  }
  return out;
}
