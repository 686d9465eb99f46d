"""The static dashboard outside Jupyter: ``jupyter nbconvert --to html`` and a strict sanitizer, in chromium.

The saved output of a monitored cell is plain HTML (tables and ``<img>`` chart
images as data URIs). Here it goes through nbconvert, and through bleach with an
allow-list about as strict as the notebook viewers of code-hosting sites (no
``style``, ``class``, ``svg`` or scripts; ``img`` with ``src``/``alt``/``width``/
``height`` and data URIs), and chromium must still draw every chart and show the
tile values in their own cells. Screenshots go to ``test-artifacts/browser/``.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS
from trainmeter.widget.frame import SeriesColumns
from trainmeter.widget.snapshot import snapshot_bundle

pytestmark = pytest.mark.browser

STRICT_TAGS = ["div", "span", "b", "table", "tr", "td", "th", "img", "details", "summary"]
STRICT_ATTRS = {"img": ["src", "alt", "width", "height"]}


def _state() -> dict[str, Any]:
    return {
        "name": "static-check", "status": "failed", "elapsed_s": 95.0, "step": 300, "error": "ValueError: nan loss",
        "progress": {"fraction": 0.3, "eta_s": 200.0, "pace": "training-only", "label": "300 / 1.0k steps"},
        "tiles": [{"id": "step", "label": "step", "value": 300, "unit": "count"},
                  {"id": "throughput", "label": "training-only rate", "value": 49_100.0, "unit": "tokens/s"},
                  {"id": "loss", "label": "loss", "value": 2.31, "unit": ""},
                  {"id": "rss", "label": "memory (RSS)", "value": 387_000_000, "unit": "bytes"}],
        "charts": [{"id": "loss", "title": "loss", "x": "step", "unit": "", "series": ["train_loss", "val_loss"],
                    "log_y": True},
                   {"id": "throughput", "title": "throughput (tokens/s)", "x": "time", "unit": "tokens/s",
                    "series": ["train_tokens_per_s"]}],
        "phases_s": {"train": 80.0, "data_wait": 10.0},
        "panels": [], "warnings": [],
    }


def _series() -> list[SeriesColumns]:
    xs = [float(i) for i in range(1, 301)]
    return [SeriesColumns(name="train_loss", x_kind="step", xs=xs, ys=[4.0 * math.exp(-i / 120) + 1.1 for i in xs]),
            SeriesColumns(name="val_loss", x_kind="step", xs=[200.0], ys=[1.9]),
            SeriesColumns(name="train_tokens_per_s", x_kind="time", xs=[float(t) for t in range(90)],
                          ys=[49_000.0 + 100 * math.sin(t) for t in range(90)])]


def _check_page(page: Any, html: str, shot: str) -> dict[str, Any]:
    page.set_content(f"<html><body>{html}</body></html>")
    page.wait_for_timeout(300)
    seen = page.evaluate("""() => ({
        images: document.images.length,
        drawn: [...document.images].filter((i) => i.complete && i.naturalWidth > 0).length,
        cells: [...document.querySelectorAll('td')].map((td) => td.innerText.trim()),
        text: document.body.innerText})""")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
    return seen


def test_strictly_sanitized_dashboard_still_draws_every_chart_and_keeps_values_apart(new_page: Any) -> None:
    import bleach

    html = snapshot_bundle(_state(), _series())["text/html"]
    clean = bleach.clean(html, tags=STRICT_TAGS, attributes=STRICT_ATTRS, protocols=["http", "https", "data"],
                         strip=True)
    assert "style=" not in clean and "<img" in clean
    seen = _check_page(new_page(), clean, "static-sanitized")
    assert seen["images"] == 2 and seen["drawn"] == 2, seen
    assert "300" in seen["cells"] and "49.1k tok/s" in seen["cells"] and "369 MiB" in seen["cells"], seen["cells"]
    assert "failed at step 300: ValueError: nan loss" in seen["text"] and "ETA" not in seen["text"]


def test_nbconvert_html_shows_the_dashboard(new_page: Any, tmp_path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%trainmeter\n...")
    cell.outputs = [nbformat.v4.new_output("display_data", data=snapshot_bundle(_state(), _series(), mount_key="k"))]
    nb.cells = [cell]
    src = tmp_path / "run.ipynb"
    nbformat.write(nb, str(src))
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(src)], check=True, capture_output=True,
                   timeout=120)
    html = (tmp_path / "run.html").read_text()
    assert "model not found" not in html
    page = new_page()
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_timeout(500)
    seen = page.evaluate("""() => ({
        drawn: [...document.querySelectorAll('.trainmeter-snapshot img')].filter((i) => i.naturalWidth > 0).length,
        text: document.body.innerText})""")
    page.screenshot(path=str(ARTIFACTS / "static-nbconvert.png"), full_page=True)
    assert seen["drawn"] == 2 and "failed at step 300" in seen["text"], seen
