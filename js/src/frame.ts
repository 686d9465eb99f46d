// Wire protocol v2 (docs/protocol.md section 3): the binary frame's decoder. Mirrors
// src/trainmeter/widget/frame.py; protocol.ts re-exports it with the state's shapes.

export const FRAME_MAGIC = "TMF1";
export const FRAME_VERSION = 2;

/** A series' own x. */
export type XKind = "step" | "time";
/** The x control's axes: every point comes with its x on each, mapped by Python (widget/x_axis.py). */
export type XMode = "step" | "tokens" | "time";
export const X_MODES: XMode[] = ["step", "tokens", "time"];

export interface FrameSeries {
  name: string;
  x: XKind;
  xs: Float64Array;
  ys: Float64Array;
  /** The same points' x on the other axes (NaN: not placed there); absent: the native x only. */
  mapped: Partial<Record<XMode, Float64Array>>;
}

export interface Frame {
  v: number;
  seq: number;
  series: FrameSeries[];
}

export interface FrameHeader {
  v: number;
  seq: number;
  /** `axes`: the x columns in order, the native first (absent: the native x alone). */
  series: { name: string; x: XKind; n: number; axes: XMode[] }[];
  /** Byte offset of the data section from the frame start (a multiple of 8). */
  dataOffset: number;
}

export class FrameError extends Error {
  override name = "FrameError";
}

const PREFIX_BYTES = 8;
const ALIGN = 8;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function asView(buf: DataView | ArrayBuffer | ArrayBufferView): DataView {
  if (buf instanceof DataView) return buf;
  if (ArrayBuffer.isView(buf)) return new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  return new DataView(buf);
}

function isXKind(x: unknown): x is XKind {
  return x === "step" || x === "time";
}

function isXMode(x: unknown): x is XMode {
  return X_MODES.includes(x as XMode);
}

/** Read and check a frame's prefix and JSON header, without touching its data. */
export function readFrameHeader(buf: DataView | ArrayBuffer | ArrayBufferView): FrameHeader {
  const dv = asView(buf);
  if (dv.byteLength < PREFIX_BYTES) throw new FrameError(`frame too short: ${dv.byteLength} bytes`);
  const magic = String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3));
  if (magic !== FRAME_MAGIC) throw new FrameError(`bad magic ${JSON.stringify(magic)}`);
  const headerLen = dv.getUint32(4, true);
  const end = PREFIX_BYTES + headerLen;
  if (dv.byteLength < end) throw new FrameError("frame truncated inside its header");
  const bytes = new Uint8Array(dv.buffer, dv.byteOffset + PREFIX_BYTES, headerLen);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (err) {
    throw new FrameError(`bad header: ${String(err)}`);
  }
  const h = header as { v?: unknown; seq?: unknown; series?: unknown };
  if (typeof h !== "object" || h === null || h.v !== FRAME_VERSION) {
    throw new FrameError(`unsupported frame header ${JSON.stringify(header).slice(0, 80)}`);
  }
  const entries = Array.isArray(h.series) ? h.series : [];
  const series = entries.map((e: { name?: unknown; x?: unknown; n?: unknown; axes?: unknown }) => {
    if (!isXKind(e.x)) throw new FrameError(`series ${String(e.name)}: unknown x kind ${String(e.x)}`);
    const n = Number(e.n);
    if (!Number.isInteger(n) || n < 0) throw new FrameError(`series ${String(e.name)}: bad n`);
    const axes = Array.isArray(e.axes) ? e.axes : [e.x];
    if (axes[0] !== e.x || !axes.every(isXMode)) {
      throw new FrameError(`series ${String(e.name)}: bad axes ${JSON.stringify(axes)}`);
    }
    return { name: String(e.name), x: e.x, n, axes: axes as XMode[] };
  });
  const dataOffset = end + ((ALIGN - (end % ALIGN)) % ALIGN);
  return { v: FRAME_VERSION, seq: Number(h.seq), series, dataOffset };
}

function readColumn(dv: DataView, offset: number, n: number): Float64Array {
  if (LITTLE_ENDIAN) {
    // Copy: the DataView's offset need not be 8-aligned, and the host may reuse the buffer.
    const start = dv.byteOffset + offset;
    return new Float64Array(dv.buffer.slice(start, start + 8 * n));
  }
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = dv.getFloat64(offset + 8 * i, true);
  return out;
}

/** Decode one frame (docs/protocol.md section 3). NaN ys (and unplaced mapped xs) stay NaN. */
export function decodeFrame(buf: DataView | ArrayBuffer | ArrayBufferView): Frame {
  const dv = asView(buf);
  const header = readFrameHeader(dv);
  let offset = header.dataOffset;
  const series: FrameSeries[] = [];
  for (const s of header.series) {
    const bytes = 8 * s.n * (s.axes.length + 1);
    if (offset + bytes > dv.byteLength) throw new FrameError(`series ${s.name}: data truncated`);
    const columns = s.axes.map((_, i) => readColumn(dv, offset + 8 * s.n * i, s.n));
    const ys = readColumn(dv, offset + 8 * s.n * s.axes.length, s.n);
    offset += bytes;
    const mapped: Partial<Record<XMode, Float64Array>> = {};
    s.axes.forEach((axis, i) => {
      if (i > 0) mapped[axis] = columns[i] as Float64Array;
    });
    series.push({ name: s.name, x: s.x, xs: columns[0] as Float64Array, ys, mapped });
  }
  return { v: header.v, seq: header.seq, series };
}
