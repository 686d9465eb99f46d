"""tm.compare in a real browser (JupyterLab 4, chromium): three saved runs, one bqplot line each, names in the legend."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import (
    VIEWPORT,
    open_notebook,
    run_all_cells,
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
tm.compare(root=root, x="step", y=("train_loss", "tokens_per_s"))"""

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


@pytest.fixture(scope="module")
def compared(servers: Any, browser: Any, notebook_root: Path) -> Any:
    server = servers.get("lab")
    nb_name = "compare-lab.ipynb"
    write_notebook(notebook_root / nb_name, [RUNS_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 1)
        read = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            read = page.evaluate(READ_JS)
            if read and read["figures"] and all(f["lines"] >= 3 for f in read["figures"]):
                break
        screenshot(page, "compare-lab")
        yield read
    finally:
        context.close()
        server.shut_down(nb_name)


def test_compare_draws_one_line_per_run_with_the_run_names_in_the_legend(compared: Any) -> None:
    assert compared is not None, "the compare box never appeared"
    assert len(compared["figures"]) == 2
    for fig in compared["figures"]:
        assert fig["lines"] == 3
        assert sorted(fig["legend"]) == ["base", "fast-lr", "slow-lr"]
    assert compared["table_rows"] == 4  # header + one row per run
