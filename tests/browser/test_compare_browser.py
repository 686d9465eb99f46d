"""tm.compare in a real browser (JupyterLab 4, chromium): three saved runs, static charts and a table, live,
reopened without a kernel and converted by nbconvert; ``.widget()`` draws one bqplot line per run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import (
    VIEWPORT,
    open_notebook,
    run_all_cells,
    save_notebook,
    screenshot,
    write_notebook,
)

pytestmark = pytest.mark.browser

RUNS_CELL = """\
import io, contextlib, tempfile
import torch, torch.nn as nn, torch.nn.functional as F
import trainmeter as tm
torch.manual_seed(0)
root = tempfile.mkdtemp()
for name, lr in (("base", 0.01), ("fast-lr", 0.1), ("slow-lr", 0.001)):
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    with contextlib.redirect_stdout(io.StringIO()), tm.monitor(name=name, run_dir=root, interval_s=0.2):
        for _ in range(200):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            tm.emit(train_loss=loss.item())
c = tm.compare(root=root, x="step", y=("train_loss", "tokens_per_s", "mfu"))
c"""
WIDGET_CELL = "c.widget()"

READ_JS = """() => {
  const box = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .tm-compare');
  if (!box) return null;
  const figs = Array.from(box.querySelectorAll('.bqplot.figure'));
  return {
    figures: figs.map(f => ({
      lines: f.querySelectorAll('g.curve path.line').length,
      legend: Array.from(f.querySelectorAll('.legendtext')).map(t => t.textContent),
    })),
    table_rows: box.querySelectorAll('table.tm-compare-table tr').length,
  };
}"""
STATIC_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const box = panel && panel.querySelector('.trainmeter-compare');
  if (!box) return null;
  const imgs = [...box.querySelectorAll('.tm-compare-figure img')];
  return {figures: [...box.querySelectorAll('.tm-compare-figure')].map((f) => f.dataset.tmFigure),
          drawn: imgs.filter((i) => i.complete && i.naturalWidth > 0).length,
          rows: box.querySelectorAll('table.tm-compare-table tr').length,
          text: box.textContent,
          fits: box.scrollWidth <= box.parentElement.clientWidth + 1,
          // the compare cell's own output (the .widget() cell below is a plain ipywidget: reopened, it has no model)
          errors: [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')[0].querySelectorAll('.jp-OutputArea-output')]
            .map((o) => o.textContent)
            .filter((t) => t.includes('Error displaying widget') || t.includes('HBox(')).length};
}"""


def _wait(page: Any, js: str, done: Any, timeout_s: float) -> Any:
    read = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)
        read = page.evaluate(js)
        if read and done(read):
            break
    return read


@pytest.fixture(scope="module")
def compared(servers: Any, browser: Any, notebook_root: Path) -> Any:
    """Live (static figures and the bqplot widget), then saved, reopened without its kernel, converted."""
    server = servers.get("lab")
    nb_name = "compare-lab.ipynb"
    write_notebook(notebook_root / nb_name, [RUNS_CELL, WIDGET_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    out: dict[str, Any] = {}
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 2)
        out["live"] = _wait(page, READ_JS, lambda r: r["figures"] and all(f["lines"] >= 3 for f in r["figures"]), 180)
        out["static"] = _wait(page, STATIC_JS, lambda r: r["drawn"] >= 2, 30)
        screenshot(page, "compare-lab")
        save_notebook(page, server, nb_name, lambda nb: any(
            "trainmeter-compare" in "".join((o.get("data") or {}).get("text/html") or "")
            for cell in nb["cells"] for o in cell.get("outputs") or []))
        server.shut_down(nb_name)
        reopened = context.new_page()
        reopened.set_default_timeout(30_000)
        open_notebook(reopened, server, nb_name)
        out["reopened"] = _wait(reopened, STATIC_JS, lambda r: r["drawn"] >= 2, 30)
        screenshot(reopened, "compare-lab-reopened")
        html_path = notebook_root / "compare-lab.html"
        subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--output", str(html_path),
                        str(notebook_root / nb_name)], check=True, capture_output=True, timeout=120,
                       env=server.env)
        out["converted"] = html_path.read_text()
        yield out
    finally:
        context.close()
        server.shut_down(nb_name)


def test_compare_widget_draws_one_line_per_run_with_the_run_names_in_the_legend(compared: Any) -> None:
    live = compared["live"]
    assert live is not None, "the compare widget never appeared"
    assert len(live["figures"]) == 2  # train_loss and tokens_per_s; no run has mfu: no empty plot
    for fig in live["figures"]:
        assert fig["lines"] == 3
        assert sorted(fig["legend"]) == ["base", "fast-lr", "slow-lr"]
    assert live["table_rows"] == 4  # header + one row per run


def test_compare_shows_static_figures_live_and_reopened_without_its_kernel(compared: Any) -> None:
    for read in (compared["static"], compared["reopened"]):
        assert read is not None and read["figures"] == ["train_loss vs step", "tokens_per_s vs step"]
        assert read["drawn"] == 2 and read["rows"] == 4 and read["errors"] == 0
        assert "mfu: no run has it" in read["text"] and read["fits"]


def test_nbconvert_shows_the_compare_figures_not_a_widget_repr(compared: Any) -> None:
    html = compared["converted"]
    assert html.count('class="tm-compare-figure"') == 2 and "data:image/svg+xml;base64," in html
    assert "HBox(children" not in html and "Error displaying widget" not in html
