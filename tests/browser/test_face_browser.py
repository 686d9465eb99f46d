"""The dashboard's face in JupyterLab 4: header links, MFU and FLOPs tiles, badges, ``%trainmeter runs``.

One notebook in a subfolder (``face/``) runs two short monitored cells: one under
``--dir runs`` (a folder Jupyter serves: the header links its run folder and
passport.md) and one under the default ``.trainmeter/runs`` (hidden: Jupyter refuses
it, so the header shows the path as text and what would make it a link), then
``%trainmeter runs``. Screenshots go to ``test-artifacts/browser/face-*.png``.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS, open_notebook, run_all_cells, write_notebook

pytestmark = pytest.mark.browser

SETUP = """\
%load_ext trainmeter
import time
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randint(0, 32, (4, 6)), torch.randint(0, 32, (4,))
def train(seconds):
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.002)"""
SERVED = """\
%%trainmeter --name face-links --dir runs --interval 1 --peak-tflops 0.001 --peak-source 'test figure' --budget-tokens 2M
train(4)"""
HIDDEN = """\
%%trainmeter --name face-hidden --interval 1
train(2)"""
RUNS = "%trainmeter runs --dir runs"
DONE = re.compile(r"^\[\d+\]:?$")

READ_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const roots = [...panel.querySelectorAll('.trainmeter:not(.trainmeter-snapshot)')];
  const prompts = [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')].map(
    (c) => (c.querySelector('.jp-InputPrompt')?.textContent || '').trim());
  const read = (root) => {
    const tiles = {};
    for (const t of root.querySelectorAll('[data-tm-tile]')) {
      const badge = t.querySelector('.tm-badge');
      tiles[t.dataset.tmTile] = {value: t.querySelector('.tm-tile-value')?.textContent.trim(),
        sub: t.querySelector('.tm-tile-sub')?.textContent.trim(),
        badge: badge && !badge.hidden ? badge.textContent : null};
    }
    const links = root.querySelector('[data-tm="runlinks"]');
    return {status: root.querySelector('[data-tm="status"]')?.textContent, tiles,
      links_text: links?.textContent || '',
      folder_href: root.querySelector('[data-tm="run-folder-link"]')?.getAttribute('href') || null,
      passport_href: root.querySelector('[data-tm="passport-link"]')?.getAttribute('href') || null,
      hint: root.querySelector('[data-tm="runlinks-hint"]')?.textContent || null,
      not_here: (() => { const n = root.querySelector('[data-tm="not-here"]');
                         return n && !n.hidden ? n.textContent : null; })()};
  };
  const table = panel.querySelector('table.trainmeter-runs');
  return {prompts, widgets: roots.map(read),
          runs_rows: table ? [...table.querySelectorAll('tbody tr')].map((r) => r.textContent) : null};
}
"""


def _shoot(locator: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"face-{name}.png"
    locator.scroll_into_view_if_needed(timeout=5_000)
    locator.screenshot(path=str(path), timeout=10_000)
    return path


# the served run's widget is read while this cell runs (a later run closes its model): it waits for the test's
# stop file (at most 60 s)
PAUSE = """\
import os
t_end = time.perf_counter() + 60
while time.perf_counter() < t_end and not os.path.exists({stop!r}):
    time.sleep(0.05)"""
LIVE = ".jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)"


def _wait(page: Any, done: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        page.wait_for_timeout(400)
        seen = page.evaluate(READ_JS) or {}
        if done(seen):
            break
    return seen


@pytest.fixture(scope="module")
def face(servers: Any, browser: Any, notebook_root: Path) -> Any:
    """Phase 1 (while the pause cell runs): the served run's widget, its popover, screenshots.
    Phase 2 (all cells done): the hidden run's widget and the runs table."""
    server = servers.get("lab")
    (notebook_root / "face").mkdir(exist_ok=True)
    nb_name = "face/face.ipynb"
    stop = notebook_root / "face" / "pause.stop"
    stop.unlink(missing_ok=True)
    write_notebook(notebook_root / nb_name, [SETUP, SERVED, RUNS, PAUSE.format(stop=str(stop)), HIDDEN])
    context = browser.new_context(viewport={"width": 1280, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(30_000)
    out: dict[str, Any] = {"server": server, "root": notebook_root}
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 5)
        seen = _wait(page, lambda s: len(s.get("prompts", [])) >= 3 and bool(DONE.match(s["prompts"][2]))
                     and bool(s.get("widgets")) and bool(s["widgets"][0].get("passport_href")), 120)
        out["served"] = seen["widgets"][0]
        out["runs_rows"] = seen.get("runs_rows")
        root = page.locator(LIVE).first
        _shoot(root, "served-widget")
        root.locator('[data-tm-tile="mfu"]').click()
        popover = root.locator('[data-tm="derivation"]')
        popover.wait_for(state="visible")
        out["popover_names"] = popover.locator(".tm-deriv-head strong").all_text_contents()
        out["popover_note"] = popover.locator('[data-tm="provenance"]').first.text_content()
        _shoot(root.locator(".tm-tiles-wrap"), "mfu-popover")
        _shoot(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) table.trainmeter-runs"), "runs-table")
        stop.touch()  # phase 1 read: the pause ends, the hidden run starts
        seen = _wait(page, lambda s: len(s.get("prompts", [])) >= 5
                     and all(DONE.match(p) for p in s["prompts"][:5])
                     and any(w.get("hint") for w in s.get("widgets") or []), 120)
        out["hidden"] = next((w for w in seen.get("widgets") or [] if w.get("hint")), None)
        _shoot(page.locator(LIVE).last, "hidden-widget")
        yield out
    finally:
        stop.touch()
        context.close()


def test_header_links_the_served_run_folder_and_passport_relative_to_the_server_root(face: Any) -> None:
    served, root = face["served"], face["root"]
    (run,) = list((root / "face" / "runs").iterdir())
    assert served["folder_href"] == f"/lab/tree/face/runs/{run.name}"
    assert served["passport_href"] == f"/lab/tree/face/runs/{run.name}/passport.md"
    assert f"run folder runs/{run.name}" in served["links_text"]  # relative to the notebook's folder
    path = urllib.parse.quote(f"face/runs/{run.name}/passport.md")
    assert face["server"].api(f"/api/contents/{path}?content=0")["type"] == "file"


def test_a_hidden_run_folder_is_text_with_what_would_make_it_a_link(face: Any) -> None:
    hidden = face["hidden"]
    assert hidden is not None and hidden["folder_href"] is None and hidden["passport_href"] is None
    assert "run folder .trainmeter/runs/" in hidden["links_text"] and "--dir runs" in hidden["hint"]


def test_mfu_and_flops_tiles_badge_their_weakest_input_and_flops_use_one_formatter(face: Any) -> None:
    tiles = face["served"]["tiles"]
    assert tiles["mfu"]["badge"] == "declared"  # the declared peak is the weakest input
    assert tiles["flops"]["badge"] == "detected"  # a convention's F is a model of the work, never "counted" (spec 5)
    assert tiles["flops"]["value"].endswith("FLOP")
    assert re.search(r"^of [\d.]+ [kMGTPE]?FLOP required$", tiles["flops"]["sub"])
    hidden = face["hidden"]
    assert "mfu" not in hidden["tiles"]  # no peak on the CPU: folded into the one not-here line, with its reason
    assert hidden["not_here"] is not None and "MFU" in hidden["not_here"] and "--peak-tflops" in hidden["not_here"]


def test_the_mfu_popover_works_out_every_convention_in_the_range(face: Any) -> None:
    assert face["popover_names"][0] == "mfu[hf]" and len(face["popover_names"]) == 4
    assert "the weakest of its inputs" in face["popover_note"]


def test_runs_verb_renders_an_html_table_in_the_notebook(face: Any) -> None:
    rows = face["runs_rows"]
    assert rows is not None and len(rows) == 1 and "face-links" in rows[0] and "completed" in rows[0]
