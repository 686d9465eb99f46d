import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { decodeFrame, FrameError, isKernelMessage, readFrameHeader, type XKind } from "../src/protocol";
import { encodeFrame } from "./helpers";

const fixtures = fileURLToPath(new URL("../../tests/fixtures/", import.meta.url));

interface GoldenSeries {
  name: string;
  x: string;
  xs: number[];
  ys: (number | null)[];
}
interface Golden {
  v: number;
  seq: number;
  byte_length: number;
  header_len: number;
  data_offset: number;
  series: GoldenSeries[];
}

const golden = JSON.parse(readFileSync(`${fixtures}frame_v1.json`, "utf-8")) as Golden;
const bin = readFileSync(`${fixtures}frame_v1.bin`);

function toNullable(a: Float64Array): (number | null)[] {
  return Array.from(a, (v) => (Number.isNaN(v) ? null : v));
}

function encode(seq: number, series: { name: string; x: string; xs: number[]; ys: number[] }[]): ArrayBuffer {
  return encodeFrame({
    v: 1,
    seq,
    series: series.map((s) => ({
      ...s,
      x: s.x as XKind,
      xs: Float64Array.from(s.xs),
      ys: Float64Array.from(s.ys),
    })),
  });
}

describe("golden frame shared with pytest", () => {
  it("decodes to the same series as its JSON form, NaN as null", () => {
    const frame = decodeFrame(new DataView(bin.buffer, bin.byteOffset, bin.byteLength));
    expect(bin.byteLength).toBe(golden.byte_length);
    expect(frame.v).toBe(golden.v);
    expect(frame.seq).toBe(golden.seq);
    expect(
      frame.series.map((s) => ({ name: s.name, x: s.x, xs: Array.from(s.xs), ys: toNullable(s.ys) })),
    ).toEqual(golden.series);
    expect(frame.series.some((s) => s.ys.some((y) => Number.isNaN(y)))).toBe(true);
  });

  it("finds the header length in UTF-8 bytes and the 8-aligned data offset", () => {
    const header = readFrameHeader(new Uint8Array(bin));
    expect(header.dataOffset).toBe(golden.data_offset);
    expect(header.dataOffset % 8).toBe(0);
    expect(new DataView(bin.buffer, bin.byteOffset).getUint32(4, true)).toBe(golden.header_len);
    expect(header.series.map((s) => s.name)).toContain("tok/s · session");
  });

  it("decodes from a DataView whose byte offset is not 8-aligned", () => {
    const shifted = new Uint8Array(bin.byteLength + 3);
    shifted.set(bin, 3);
    const frame = decodeFrame(new DataView(shifted.buffer, 3, bin.byteLength));
    expect(Array.from(frame.series[2]?.ys ?? [])).toEqual([1024.5, 2048, 3e9]);
  });

  it("copies columns so the host may reuse its buffer", () => {
    const copy = new Uint8Array(bin);
    const frame = decodeFrame(copy.buffer);
    copy.fill(0);
    expect(frame.series[0]?.xs[0]).toBe(1);
  });
});

describe("decodeFrame", () => {
  it("round-trips frames with every padding length", () => {
    for (let len = 1; len <= 16; len++) {
      const buf = encode(len, [{ name: "x".repeat(len), x: "step", xs: [1, 2], ys: [3, Number.NaN] }]);
      const frame = decodeFrame(buf);
      expect(frame.seq).toBe(len);
      expect(Array.from(frame.series[0]?.xs ?? [])).toEqual([1, 2]);
      expect(toNullable(frame.series[0]?.ys ?? new Float64Array())).toEqual([3, null]);
    }
  });

  it("decodes an empty frame", () => {
    expect(decodeFrame(encode(0, [])).series).toEqual([]);
  });

  it.each([
    ["too short", new Uint8Array([84, 77, 70]).buffer],
    ["bad magic", new TextEncoder().encode("XXXX\0\0\0\0").buffer],
    ["truncated inside its header", new Uint8Array([84, 77, 70, 49, 16, 0, 0, 0, 123, 125]).buffer],
  ])("rejects a frame that is %s", (message, buf) => {
    expect(() => decodeFrame(buf as ArrayBuffer)).toThrow(FrameError);
    expect(() => decodeFrame(buf as ArrayBuffer)).toThrow(message);
  });

  it("rejects truncated data and unknown versions or x kinds", () => {
    const buf = encode(1, [{ name: "a", x: "step", xs: [1, 2], ys: [3, 4] }]);
    expect(() => decodeFrame(buf.slice(0, buf.byteLength - 8))).toThrow("data truncated");
    const bad = new TextEncoder().encode('TMF1\x08\x00\x00\x00{"v":2} ');
    expect(() => decodeFrame(bad)).toThrow("unsupported");
    expect(() => decodeFrame(encode(1, [{ name: "a", x: "epoch", xs: [1], ys: [1] }]))).toThrow(
      "unknown x kind",
    );
  });
});

describe("isKernelMessage", () => {
  it("accepts append and snapshot and nothing else", () => {
    expect(isKernelMessage({ kind: "append", seq: 1 })).toBe(true);
    expect(isKernelMessage({ kind: "snapshot", seq: 0 })).toBe(true);
    expect(isKernelMessage({ kind: "hello" })).toBe(false);
    expect(isKernelMessage(null)).toBe(false);
  });
});
