import type { Frame, XKind } from "../src/protocol";

/** Build a decoded frame from plain arrays (NaN marks a gap). */
export function frame(seq: number, series: Record<string, { xs: number[]; ys: number[]; x?: XKind }>): Frame {
  return {
    v: 1,
    seq,
    series: Object.entries(series).map(([name, s]) => ({
      name,
      x: s.x ?? "step",
      xs: Float64Array.from(s.xs),
      ys: Float64Array.from(s.ys),
    })),
  };
}

/** Encode a frame as frame.py does: the bytes a kernel would send. */
export function encodeFrame(f: Frame): ArrayBuffer {
  const header = new TextEncoder().encode(
    JSON.stringify({
      v: 1,
      seq: f.seq,
      series: f.series.map((s) => ({ name: s.name, x: s.x, n: s.xs.length })),
    }),
  );
  const dataOffset = Math.ceil((8 + header.length) / 8) * 8;
  const total = dataOffset + f.series.reduce((acc, s) => acc + 16 * s.xs.length, 0);
  const out = new ArrayBuffer(total);
  const dv = new DataView(out);
  new Uint8Array(out).set(new TextEncoder().encode("TMF1"), 0);
  dv.setUint32(4, header.length, true);
  new Uint8Array(out).set(header, 8);
  let off = dataOffset;
  for (const s of f.series) {
    for (const v of [...s.xs, ...s.ys]) {
      dv.setFloat64(off, v, true);
      off += 8;
    }
  }
  return out;
}
