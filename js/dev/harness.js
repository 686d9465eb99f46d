// Fake anywidget model + synthetic run for the dev harness (see index.html).
import widget from "../../src/trainmeter/static/widget.js";

const params = new URLSearchParams(location.search);
document.body.className = params.has("dark") ? "dark" : "light";
const STEPS_PER_MSG = Number(params.get("batch") ?? 50);
const PRELOAD = Number(params.get("preload") ?? 0);

class FakeModel {
  constructor(traits) { this.traits = traits; this.handlers = new Map(); this.sent = []; }
  get(k) { return this.traits[k] ?? null; }
  set(k, v) { this.traits[k] = v; this.emit(`change:${k}`); }
  on(e, cb) { if (!this.handlers.has(e)) this.handlers.set(e, new Set()); this.handlers.get(e).add(cb); }
  off(e, cb) { if (!e) this.handlers.clear(); else if (!cb) this.handlers.delete(e); else this.handlers.get(e)?.delete(cb); }
  send(c) { this.sent.push(c); }
  emit(e, ...a) { for (const cb of [...(this.handlers.get(e) ?? [])]) cb(...a); }
}

// frame v2 (docs/protocol.md section 3): every point on each x axis, as the kernel maps it (here: 0.02 s and
// 8,192 tokens a step)
const mappedOf = (s) => s.x === "step"
  ? { tokens: s.xs.map((x) => x * 8192), time: s.xs.map((x) => x * 0.02) }
  : { step: s.xs.map((t) => t / 0.02), tokens: s.xs.map((t) => (t / 0.02) * 8192) };
function encode(seq, series) {
  const axes = (s) => [s.x, ...Object.keys(mappedOf(s))];
  const header = new TextEncoder().encode(JSON.stringify({ v: 2, seq, series: series.map((s) => ({ name: s.name, x: s.x, n: s.xs.length, axes: axes(s) })) }));
  const off0 = Math.ceil((8 + header.length) / 8) * 8;
  const buf = new ArrayBuffer(off0 + series.reduce((a, s) => a + 8 * s.xs.length * (axes(s).length + 1), 0));
  const dv = new DataView(buf);
  new Uint8Array(buf).set([84, 77, 70, 49], 0);
  dv.setUint32(4, header.length, true);
  new Uint8Array(buf).set(header, 8);
  let off = off0;
  for (const s of series) {
    for (const v of [...s.xs, ...Object.values(mappedOf(s)).flat(), ...s.ys]) { dv.setFloat64(off, v, true); off += 8; }
  }
  return new DataView(buf);
}

let step = 0;
let seq = 0;
const t0 = performance.now();
function points(n) {
  const tr = { name: "loss/train", x: "step", xs: [], ys: [] };
  const val = { name: "loss/val", x: "step", xs: [], ys: [] };
  const tps = { name: "tokens_per_s/training", x: "time", xs: [], ys: [] };
  const tpss = { name: "tokens_per_s/session", x: "time", xs: [], ys: [] };
  const mem = { name: "mem/rss_bytes", x: "time", xs: [], ys: [] };
  for (let i = 0; i < n; i++) {
    step += 1;
    const t = step * 0.02;
    tr.xs.push(step); tr.ys.push(step % 997 === 0 ? NaN : 4 * Math.exp(-step / 3000) + 1.2 + 0.15 * Math.sin(step / 7) * Math.random());
    if (step % 500 === 0) { val.xs.push(step); val.ys.push(4 * Math.exp(-step / 3000) + 1.35); }
    if (step % 5 === 0) {
      tps.xs.push(t); tps.ys.push(52000 + 3000 * Math.random());
      tpss.xs.push(t); tpss.ys.push(47000 + 2000 * Math.random());
      mem.xs.push(t); mem.ys.push(2.1e9 + 4e5 * Math.min(step, 2000));
    }
  }
  return [tr, val, tps, tpss, mem].filter((s) => s.xs.length > 0);
}

function state() {
  const elapsed = (performance.now() - t0) / 1000 + step * 0.02;
  const mfu = {
    name: "mfu", formula: "6 · N · tokens_per_s / peak_flops_per_s", value: 0.412, unit: "fraction",
    inputs: [
      { name: "N", value: 124e6, unit: "count", provenance: "detected", source: "sum(p.numel())" },
      { name: "tokens_per_s", value: 53100, unit: "tokens/s", provenance: "measured", source: "training-only window" },
      { name: "peak_flops_per_s", value: 312e12, unit: "flop/s", provenance: "assumed", source: "A100 bf16 dense datasheet" },
    ], missing: null,
  };
  return {
    name: "gpt2-small · shakespeare", status: "running", elapsed_s: elapsed, run_dir: ".trainmeter/runs/2026-05-01T12-00-00",
    progress: { fraction: Math.min(1, step / 100000), eta_s: (100000 - step) * 0.02, pace: "training-only", label: `${step}/100000 steps` },
    tiles: [
      { id: "step", label: "step", value: step, unit: "count" },
      { id: "tokens", label: "tokens", value: step * 8192, unit: "tokens", provenance: "counted" },
      { id: "tps", label: "tok/s (training)", value: 53100, unit: "tokens/s", sub: "session 47.9k tok/s", provenance: "measured" },
      { id: "loss", label: "loss", value: 4 * Math.exp(-step / 3000) + 1.2, unit: "" },
      { id: "mfu", label: "MFU", value: 0.412, unit: "fraction", provenance: "assumed", derivation: mfu },
      { id: "rss", label: "RSS", value: 2.9e9, unit: "bytes", provenance: "measured" },
      { id: "cuda", label: "CUDA memory", value: null, unit: "bytes", missing: "no CUDA device" },
    ],
    phases_s: { train: elapsed * 0.8, data_wait: elapsed * 0.07, eval: elapsed * 0.08, checkpoint: elapsed * 0.03, reporting: elapsed * 0.02 },
    phase_bar: { shares: { train: 0.8, data_wait: 0.07, eval: 0.08, checkpoint: 0.03, reporting: 0.02 }, top: "train" },
    x_axis: { tokens_label: "tokens (cumulative)", tokens_missing: null, time_label: "time since start (s, wall clock)", time_missing: null },
    charts: [
      { id: "loss", title: "Loss", x: "step", unit: "", series: ["loss/train", "loss/val"] },
      { id: "throughput", title: "Throughput (tok/s)", x: "time", unit: "tokens/s", series: ["tokens_per_s/training", "tokens_per_s/session"] },
      { id: "memory", title: "Memory", x: "time", unit: "bytes", series: ["mem/rss_bytes"] },
    ],
    panels: [{ id: "gpu", title: "GPU", rows: [
      { label: "device", value: "none (CPU run)", unit: "" },
      { label: "power", value: null, unit: "W", note: "needs NVML" },
      { label: "host RAM", value: 23.4 * 1024 ** 3, unit: "bytes", provenance: "detected" },
    ] }],
    warnings: ["NVML not available: GPU panels are empty."],
  };
}

const model = new FakeModel({ state: state(), history: null, schema_version: 2 });
widget.initialize({ model });
if (PRELOAD > 0) model.emit("msg:custom", { kind: "snapshot", seq: ++seq }, [encode(seq, points(PRELOAD))]);
widget.render({ model, el: document.getElementById("out") });

window.harness = {
  model,
  tick(n = STEPS_PER_MSG) { model.emit("msg:custom", { kind: "append", seq: ++seq }, [encode(seq, points(n))]); model.set("state", state()); },
};
if (!params.has("still")) setInterval(() => window.harness.tick(), 100);
