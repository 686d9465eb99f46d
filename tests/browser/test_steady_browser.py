"""The dashboard's steady face and the kernel's true signals, in JupyterLab 4 and Notebook 7.

One notebook per front end runs a ``%%trainmeter --budget-steps 1150`` cell of about 12 s
that emits four validation losses. While it runs the page is read every 0.5 s: the
kernel's status (JupyterLab's status bar and the toolbar's execution indicator), the
output's height, the ETA, the step tile. After the cell: the loss chart's drawn
validation points against the run log's. Screenshots: ``test-artifacts/browser/steady-*.png``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS, open_notebook, run_all_cells, write_notebook

pytestmark = pytest.mark.browser

SETUP = """\
%load_ext trainmeter
import time
import torch, torch.nn as nn, torch.nn.functional as F
import trainmeter as tm
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
VALS = [0.457, 0.107, 0.090, 0.092]"""
RUN = """\
%%trainmeter --name steady-{kind} --dir runs --interval 2 --budget-steps 1150
for step in range(1150):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.008)
    if step % 250 == 249:
        tm.emit(val_loss=VALS[step // 250])"""
FAIL = "raise ValueError('boom')"
DONE = re.compile(r"^\[(\d+)\]:?$")

SAMPLE_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const cells = [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')];
  const prompts = cells.map((c) => (c.querySelector('.jp-InputPrompt')?.textContent || '').trim());
  const bar = document.querySelector('#jp-main-statusbar');
  const m = bar ? /\\|\\s*(Idle|Busy|Starting|Restarting|Unknown|Connecting|Dead)/i.exec(bar.textContent || '') : null;
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  // Notebook 7 shows the kernel's status as the tab icon (favicon-busy-1.ico while busy)
  const icon = document.querySelector("link[rel*='icon']")?.getAttribute('href') || '';
  const root = cells[1]?.querySelector('.trainmeter:not(.trainmeter-snapshot)');
  // the output that holds the dashboard (live, or the static copy before it is mounted)
  const dash = root || cells[1]?.querySelector('.trainmeter');
  const out = dash ? dash.closest('.jp-OutputArea-child') : null;
  const progress = root?.querySelector('[data-tm="progress"]');
  const step = root?.querySelector('[data-tm-tile="step"] .tm-tile-sub');
  const errors = [...(cells[2]?.querySelectorAll('.jp-OutputArea-output') || [])].map((e) => e.textContent || '');
  // each of the dashboard's own parts (header, links, tiles, warnings, charts, sections): which one moved
  const parts = root ? [...root.children].filter((c) => !c.hidden).map((c) =>
    `${c.dataset.tm || c.className}:${c.getBoundingClientRect().height.toFixed(1)}`) : [];
  const warnings = root ? [...root.querySelectorAll('.tm-warning')].map((w) => w.textContent || '') : [];
  const panels = root ? [...root.querySelectorAll(':scope > .tm-charts > *')].map((p) => [...p.children].map((c) =>
    `${c.className}:${c.getBoundingClientRect().height.toFixed(1)}:${(c.textContent || '').slice(0, 60)}`).join(' / ')) : [];
  return {t_ms: Date.now(), prompts, status_bar: m ? m[1].toLowerCase() : null,
          indicator: indicator ? indicator.dataset.status || null : null,
          tab_icon: icon.includes('busy') ? 'busy' : (icon ? 'idle' : null),
          height: out ? out.getBoundingClientRect().height : null, live: !!root,
          eta_s: progress && progress.dataset.etaS ? Number(progress.dataset.etaS) : null,
          progress: progress ? progress.textContent : null, step_sub: step ? step.textContent : null,
          error_text: errors.join('\\n'), parts, warnings, panels};
}
"""
DRAWN_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cell = panel.querySelectorAll('.jp-Cell.jp-CodeCell')[1];
  const chart = cell.querySelector('.trainmeter:not(.trainmeter-snapshot) [data-tm-chart="loss"]');
  const d = chart && chart.tmDrawn;
  if (!d) return null;
  return {labels: d.labels, data: d.data.map((c) => Array.from(c, (v) => (v == null ? null : Number(v))))};
}
"""


def _recorded(run_dir: Path, name: str) -> list[tuple[int, float]]:
    points = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "series" and rec.get("name") == name:
            points.extend(zip(rec["step"], rec["value"], strict=False))
    return points


@pytest.fixture(scope="module", params=["lab", "notebook"])
def steady(request: Any, servers: Any, browser: Any, notebook_root: Path) -> Any:
    kind = request.param
    server = servers.get(kind)
    folder = notebook_root / f"steady-{kind}"
    folder.mkdir(exist_ok=True)
    nb_name = f"steady-{kind}/steady.ipynb"
    write_notebook(notebook_root / nb_name, [SETUP, RUN.format(kind=kind), FAIL])
    context = browser.new_context(viewport={"width": 1280, "height": 1200})
    page = context.new_page()
    page.set_default_timeout(30_000)
    samples: list[dict[str, Any]] = []
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 3)
        deadline, ended_at = time.monotonic() + 150, None
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            s = page.evaluate(SAMPLE_JS)
            if s is None:
                continue
            samples.append(s)
            live_reads = sum(1 for x in samples if x["live"])
            if s["live"] and live_reads in (1, 3, 6):  # the first frame, and after the first reports
                page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-CodeCell").nth(1).locator(
                    ".trainmeter:not(.trainmeter-snapshot)").first.screenshot(
                    path=str(ARTIFACTS / f"steady-{kind}-live{live_reads}.png"), timeout=10_000)
            if ended_at is None and len(s["prompts"]) >= 3 and all(DONE.match(p) for p in s["prompts"][:3]):
                ended_at = time.monotonic()
            settled = _idle_after(kind, samples) and "ValueError" in s["error_text"]
            if ended_at is not None and (settled or time.monotonic() - ended_at > 5):
                break  # three idle reads and the traceback after the cells (what the tests assert), or 5 s
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-CodeCell").nth(1)
        cell.scroll_into_view_if_needed(timeout=5_000)
        cell.screenshot(path=str(ARTIFACTS / f"steady-{kind}-end.png"), timeout=10_000)
        drawn = page.evaluate(DRAWN_JS)
        (run_dir,) = [p for p in (folder / "runs").iterdir() if p.is_dir()]
        (ARTIFACTS / f"steady-{kind}-samples.json").write_text(json.dumps(samples, indent=1))
        yield {"kind": kind, "samples": samples, "drawn": drawn, "run_dir": run_dir}
    finally:
        context.close()
        server.shut_down(nb_name)


def _kernel_shown(kind: str, sample: dict[str, Any]) -> str | None:
    """The kernel's state as the page shows it: JupyterLab's status bar, Notebook 7's tab icon."""
    return sample["status_bar" if kind == "lab" else "tab_icon"]


def _idle_after(kind: str, samples: list[dict[str, Any]]) -> bool:
    """The last three reads show an idle kernel."""
    return len(samples) >= 3 and all(_kernel_shown(kind, s) == "idle" for s in samples[-3:])


def _running(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reads while the run's cell runs: the set-up cell done (between two cells the kernel is idle, bare too)
    and the run's cell not."""
    return [s for s in samples
            if len(s["prompts"]) > 1 and DONE.match(s["prompts"][0]) and s["prompts"][1].startswith("[*]")]


def test_the_kernel_reads_busy_for_the_whole_run_with_the_widget(steady: Any) -> None:
    running = _running(steady["samples"])[1:]  # the first read may precede the execute's busy
    assert len(running) >= 10, steady["samples"][:3]
    if steady["kind"] == "lab":  # the status bar's "Python 3 (ipykernel) | Busy"
        shown = [s["status_bar"] for s in running]
    else:  # Notebook 7: the tab icon
        shown = [s["tab_icon"] for s in running]
    assert shown and all(v == "busy" for v in shown), shown
    after = [_kernel_shown(steady["kind"], s) for s in steady["samples"][-3:]]
    assert after == ["idle"] * 3, after  # and Idle once the cells are done


def test_a_failing_cells_traceback_names_its_own_count(steady: Any) -> None:
    last = steady["samples"][-1]
    count = DONE.match(last["prompts"][2])
    assert count is not None and "ValueError" in last["error_text"]
    cells = re.findall(r"Cell In\[(\d+)\]", last["error_text"])
    assert cells and set(cells) == {count.group(1)}, last["error_text"]


def test_the_outputs_height_never_changes_by_more_than_8_px_after_the_first_frame(steady: Any) -> None:
    heights = [s["height"] for s in steady["samples"] if s["live"] and s["height"]]
    assert len(heights) >= 10
    first = heights[0]
    moved = [(s["height"], s["parts"], s["warnings"]) for s in steady["samples"]
             if s["live"] and s["height"] and abs(s["height"] - first) > 8]
    assert not moved, (heights, [s["parts"] for s in steady["samples"] if s["live"]][:1], moved[:2])


def test_the_chart_panels_keep_their_height_when_the_run_ends(steady: Any) -> None:
    # the finished view is the live one mounted in the static copy, inside the host's rendered HTML, whose heading
    # and table styles must not reach the panels (a chart title that was an h3 grew by 2.5-12 px there)
    live = [s for s in steady["samples"] if s["live"] and s["height"]]
    grids = [[p for p in s["parts"] if p.startswith("tm-charts:")][0] for s in live]
    assert len(set(grids)) == 1, [(s["prompts"], s["parts"], s["panels"]) for s in (live[0], live[-1])]
    assert any(re.match(r"^\[\d+\]", s["prompts"][1]) for s in live)  # read after the run's cell ended too


def test_the_eta_counts_down_between_reports(steady: Any) -> None:
    etas = [s["eta_s"] for s in _running(steady["samples"]) if s["eta_s"] is not None]
    assert len(etas) >= 8, etas
    late = etas[len(etas) // 4:]
    rises = [b - a for a, b in zip(late, late[1:], strict=False) if b > a]
    assert all(r <= 2.0 for r in rises), late  # within a tolerance: never up by more than 2 s
    drops = [a - b for a, b in zip(late, late[1:], strict=False)]
    assert max(drops) <= 8.0, late  # no jump of many seconds between two 0.5 s reads


def test_budget_step_counts_are_exact(steady: Any) -> None:
    subs = [s["step_sub"] for s in steady["samples"] if s["step_sub"]]
    assert subs and all(sub == "of 1,150" for sub in subs), subs
    progress = [s["progress"] for s in steady["samples"] if s["progress"]]
    assert any("/ 1,150 steps" in p for p in progress) and not any("1.1k" in p for p in progress), progress


def test_the_drawn_validation_points_are_the_recorded_ones(steady: Any) -> None:
    drawn = steady["drawn"]
    assert drawn is not None
    col = drawn["labels"].index("validation loss") + 1
    xs, ys = drawn["data"][0], drawn["data"][col]
    points = [(int(x), y) for x, y in zip(xs, ys, strict=False) if y is not None]
    recorded = [(int(s), float(v)) for s, v in _recorded(steady["run_dir"], "val_loss")]
    assert [v for _, v in recorded] == [0.457, 0.107, 0.090, 0.092]
    assert [x for x, _ in points] == [x for x, _ in recorded], (points, recorded)
    assert [y for _, y in points] == pytest.approx([y for _, y in recorded]), (points, recorded)
    assert not any("smoothed" in label and "validation" in label for label in drawn["labels"])
