"""The browser's frame time with a full history loaded: Chromium, JupyterLab 4, a 1M-step run.

A synthetic run of ``--steps`` steps (default 1,000,000: a train loss every step,
a validation loss every 1,000 steps, a report every 1,000 steps) is written as a
real run folder (events.jsonl + passport). A JupyterLab server (the harness of
``tests/browser``) opens a notebook whose widget holds that run's replayed,
decimated history (as ``tm.display(run_dir)`` builds it), and the page samples
``requestAnimationFrame`` intervals for ``--seconds`` in three modes:

- ``idle``: the history is drawn, nothing changes;
- ``append``: the kernel sends ``append`` frames of 250 new train-loss points 4
  times a second (the publisher's live rate), the store grows, charts redraw;
- ``rebuild``: every frame, a theme change forces every chart to be rebuilt from
  the whole store (the worst case: each frame redraws everything).

Prints median / p95 / max frame interval per mode (16.7 ms is one 60 Hz frame).
Usage: ``python benchmarks/frame_time.py [--steps 1000000] [--seconds 2]``.
:func:`browser_frame_time_ms` is what ``benchmarks/stream.py`` calls with a page.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MODES = ("idle", "append", "rebuild")
CHUNK_STEPS = 10_000
REPORT_EVERY_STEPS = 1_000
STEPS_PER_S = 1_000.0
TOKENS_PER_STEP = 4096

# rAF intervals for `ms`; mode "rebuild" flips a body attribute the widget's theme
# watcher observes, so every chart is rebuilt from the whole store on the next frame.
FRAME_JS = """
async ([ms, mode]) => {
  const out = [];
  let flip = false;
  await new Promise((resolve) => {
    let last = null;
    const end = performance.now() + ms;
    const tick = (t) => {
      if (last !== null) out.push(t - last);
      last = t;
      if (mode === 'rebuild') {
        flip = !flip;
        document.body.dataset.vscodeThemeKind = flip ? 'vscode-light' : 'vscode-light-x';
      }
      if (t < end) requestAnimationFrame(tick); else resolve();
    };
    requestAnimationFrame(tick);
  });
  delete document.body.dataset.vscodeThemeKind;
  return out;
}
"""
POINTS_JS = """
() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)'
        + ' [data-tm-chart]')].reduce((acc, el) => acc + Number(el.dataset.tmPoints || 0), 0)
"""
SCROLL_JS = """
() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)')
  ?.scrollIntoView({block: 'start'})
"""
ERROR_JS = """
() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]
  .filter((el) => el.dataset.mimeType === 'application/vnd.jupyter.error'
          || el.classList.contains('jp-RenderedText') && el.dataset.mimeType === 'application/vnd.jupyter.stderr')
  .map((el) => el.textContent).join('\\n').slice(-2000)
"""
SHOW_CELL = """\
import json, math, time
try:
    from trainmeter.widget.show import replay
except ImportError:  # older layout
    from trainmeter.display import replay
from trainmeter.widget.frame import SeriesColumns, encode_frame
from trainmeter.widget.widget import TrainmeterWidget
state, columns, history = replay({run_dir!r})
w = TrainmeterWidget(state=state, history=history)
print(json.dumps({{"series": len(columns), "points": sum(len(c.xs) for c in columns), "history_bytes": len(history)}}))
w"""
FEED_CELL = """\
seq, step = 1, {steps}
t_end = time.perf_counter() + {seconds}
while time.perf_counter() < t_end:
    seq += 1
    xs = [float(step + i) for i in range(1, 251)]
    step += 250
    ys = [0.3 + 2.5 * math.exp(-x / 1e5) + 0.02 * math.sin(x / 7) for x in xs]
    w.send({{"kind": "append", "seq": seq}}, buffers=[encode_frame(seq, [SeriesColumns(
        name="train_loss", x_kind="step", xs=xs, ys=ys)])])
    time.sleep(0.25)"""


def make_synthetic_run(root: Path, steps: int = 1_000_000, seed: int = 0) -> Path:
    """Write a completed run of ``steps`` steps under ``root``; returns its folder.

    A real tiny run provides the start record and passport; its events are then
    replaced by synthetic series and reports (1,000 steps/s, 4,096 tokens/step).
    """
    import torch

    import trainmeter as tm

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tm.monitor(name=f"synthetic-{steps}", run_dir=root, interval_s=3600) as m:
        for _ in range(3):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    run_dir = Path(m.run_dir) if getattr(m, "run_dir", None) else sorted(root.iterdir())[-1]
    events_path = run_dir / "events.jsonl"
    records = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
    start = next(r for r in records if r["kind"] == "start")
    end = next(r for r in records if r["kind"] == "end")
    template = next((r for r in records if r["kind"] == "interval"), None)
    rng = random.Random(seed)

    def loss_at(s: int) -> float:
        return 0.3 + 2.5 * math.exp(-s / 1e5) + 0.05 * rng.random()

    lines = [json.dumps(start)]
    for first in range(1, steps + 1, CHUNK_STEPS):
        xs = list(range(first, min(steps, first + CHUNK_STEPS - 1) + 1))
        lines.append(json.dumps({"schema_version": 1, "kind": "series", "name": "train_loss", "step": xs,
                                 "t_s": [s / STEPS_PER_S for s in xs], "value": [loss_at(s) for s in xs]}))
    val_steps = list(range(REPORT_EVERY_STEPS, steps + 1, REPORT_EVERY_STEPS))
    lines.append(json.dumps({"schema_version": 1, "kind": "series", "name": "val_loss", "step": val_steps,
                             "t_s": [s / STEPS_PER_S for s in val_steps],
                             "value": [loss_at(s) + 0.1 for s in val_steps]}))
    for s in val_steps:
        if template is None:
            break
        rec = json.loads(json.dumps(template))
        rec.update(step=s, tokens=s * TOKENS_PER_STEP, elapsed_s=s / STEPS_PER_S)
        tp = rec.get("throughput") or {}
        wobble = 1.0 + 0.05 * math.sin(s / 7e3)
        for key in ("train_tokens_per_s", "session_tokens_per_s"):
            if key in tp:
                tp[key] = STEPS_PER_S * TOKENS_PER_STEP * wobble * (0.97 if key.startswith("session") else 1.0)
        mem = rec.get("memory") or {}
        if "rss_bytes" in mem:
            mem["rss_bytes"] = int(2e9 + 1e8 * math.sin(s / 5e4))
        lines.append(json.dumps(rec))
    lines.append(json.dumps(end))
    events_path.write_text("\n".join(lines) + "\n")
    passport_path = run_dir / "passport.json"
    passport = json.loads(passport_path.read_text())
    elapsed_s = steps / STEPS_PER_S
    passport.update(steps=steps, tokens=steps * TOKENS_PER_STEP, elapsed_s=elapsed_s)
    passport.setdefault("phases_s", {})["train"] = elapsed_s
    passport["throughput"] = {"train_tokens_per_s": STEPS_PER_S * TOKENS_PER_STEP,
                              "session_tokens_per_s": 0.97 * STEPS_PER_S * TOKENS_PER_STEP,
                              "seconds_per_step": 1.0 / STEPS_PER_S}
    passport.setdefault("series", {})["train_loss"] = {"last": loss_at(steps), "min": 0.3, "max": 2.85,
                                                        "count": steps, "last_step": steps}
    passport_path.write_text(json.dumps(passport, indent=2))
    return run_dir


def frame_stats(intervals_ms: list[float]) -> dict[str, float]:
    """Median, p95 and max of frame intervals (ms), and the frame count."""
    xs = sorted(intervals_ms)
    if not xs:
        return {"frames": 0, "p50_ms": math.nan, "p95_ms": math.nan, "max_ms": math.nan}
    p95 = xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)]
    return {"frames": len(xs), "p50_ms": statistics.median(xs), "p95_ms": p95, "max_ms": xs[-1]}


def browser_frame_time_ms(page: Any, mode: str = "idle", seconds: float = 2.0) -> dict[str, float] | None:
    """``requestAnimationFrame`` intervals in ``page`` for ``seconds``: ``{frames, p50_ms, p95_ms, max_ms}``.

    ``mode`` ``rebuild`` forces every trainmeter chart to be rebuilt each frame; ``idle`` and
    ``append`` only sample (the caller makes the kernel append). Returns ``None`` without a page.
    """
    if page is None:
        return None
    return frame_stats(page.evaluate(FRAME_JS, [int(seconds * 1000), mode]))


def _run_cell(page: Any, index: int) -> None:
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputArea-editor:visible").nth(index)
    cell.click()
    page.keyboard.press("Shift+Enter")


def _prompt(page: Any, index: int) -> str:
    return page.evaluate(
        "(i) => (document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)')"
        "  ?.querySelectorAll('.jp-Cell.jp-CodeCell')[i]?.querySelector('.jp-InputPrompt')?.textContent || '').trim()",
        index)


def measure(steps: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """Build the run, open it in JupyterLab + chromium, and measure every mode."""
    from playwright.sync_api import sync_playwright
    from tests.browser import jupyter_harness as jh

    reason = jh.missing_requirements()
    if reason is not None:
        raise SystemExit(f"frame_time: {reason}")
    t0 = time.perf_counter()
    run_dir = make_synthetic_run(workdir / "runs", steps)
    made_s = time.perf_counter() - t0
    nb_dir = workdir / "notebooks"
    nb_dir.mkdir()
    jh.write_notebook(nb_dir / "frame-time.ipynb", [SHOW_CELL.format(run_dir=str(run_dir)),
                                                     FEED_CELL.format(steps=steps, seconds=seconds + 1.5)])
    env = jh.isolated_env(workdir / "env")
    server = jh.JupyterServer("lab", nb_dir, env, workdir / "lab.log").start()
    result: dict[str, Any] = {"steps": steps, "synthetic_run_s": round(made_s, 1)}
    try:
        with sync_playwright() as p:
            browser = jh.launch_browser(p, env)
            page = browser.new_context(viewport=jh.VIEWPORT).new_page()
            page.set_default_timeout(60_000)
            jh.open_notebook(page, server, "frame-time.ipynb")
            t1 = time.perf_counter()
            _run_cell(page, 0)
            page.wait_for_function(f"() => ({POINTS_JS})() > 0 || ({ERROR_JS})()", timeout=120_000, polling=200)
            error = page.evaluate(ERROR_JS)
            if error:
                raise SystemExit(f"frame_time: the display cell failed:\n{error}")
            page.wait_for_timeout(1500)
            result["display_s"] = round(time.perf_counter() - t1, 1)
            result["points_drawn"] = page.evaluate(POINTS_JS)
            result["idle"] = browser_frame_time_ms(page, "idle", seconds)
            result["rebuild"] = browser_frame_time_ms(page, "rebuild", seconds)
            before = page.evaluate(POINTS_JS)
            _run_cell(page, 1)
            deadline = time.monotonic() + 30
            while not _prompt(page, 1).startswith("[*]") and time.monotonic() < deadline:
                page.wait_for_timeout(50)
            page.evaluate(SCROLL_JS)  # running the cell scrolled to it: draw with the charts on screen
            page.wait_for_timeout(300)
            result["append"] = browser_frame_time_ms(page, "append", seconds)
            result["points_appended"] = page.evaluate(POINTS_JS) - before
            jh.ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(jh.ARTIFACTS / "frame-time-1M.png"))
            browser.close()
    finally:
        server.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(args.steps, args.seconds, Path(tmp))
    print(f"synthetic run: {r['steps']:,} steps (written in {r['synthetic_run_s']} s); widget shown in "
          f"{r['display_s']} s; {r['points_drawn']:,} points drawn; {r['points_appended']:,} appended in 'append'")
    print("| mode | frames | median (ms) | p95 (ms) | max (ms) |\n|---|---:|---:|---:|---:|")
    for mode in MODES:
        s = r[mode]
        print(f"| {mode} | {s['frames']} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['max_ms']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
