"""``tm.calibrate()`` reaches the dashboard (issue 42 item 2), in JupyterLab at 1280x900: after it, a monitored run on the
CPU (no datasheet peak) shows its MFU tile as "of achievable X%" with "(measured" in its note, live and at the end, and
no text on the widget asks for the calibration that was done. Screenshot: ``test-artifacts/browser/calibrate-*.png``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import (
    DONE,
    LIVE_READ_JS,
    open_notebook,
    run_all_cells,
    screenshot,
    write_notebook,
)

pytestmark = pytest.mark.browser

SETUP = """\
%load_ext trainmeter
import trainmeter as tm
tm.calibrate(["fp32"], device="cpu", size=64, min_seconds=0.05)"""
TRAIN = """\
%%trainmeter --name calibrated --interval 1
import time, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randint(0, 32, (4, 6)), torch.randint(0, 32, (4,))
t_end = time.perf_counter() + 4
while time.perf_counter() < t_end:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); time.sleep(0.004)"""

READ_JS = LIVE_READ_JS + """
  const tile = root.querySelector('[data-tm-tile="mfu"]');
  const shown = tile && !tile.hidden && tile.offsetParent !== null;
  const titles = [...root.querySelectorAll('[title]')].map((e) => e.getAttribute('title')).join(' | ');
  return {prompts, root: true, status: root.querySelector('[data-tm="status"]')?.dataset.status,
          shown, label: tile?.querySelector('.tm-tile-label-text')?.textContent || '',
          value: tile?.querySelector('.tm-tile-value')?.textContent.trim() || '',
          sub: tile?.querySelector('.tm-tile-sub')?.textContent || '',
          text: root.textContent + ' | ' + titles};
}
"""


@pytest.fixture(scope="module")
def calibrated(servers: Any, browser: Any, notebook_root: Path) -> Any:
    """The live widget's reads: the last one while running with the MFU tile filled, and the one after the end."""
    server = servers.get("lab")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    nb = "calibrate.ipynb"
    write_notebook(notebook_root / nb, [SETUP, TRAIN])
    out: dict[str, Any] = {"live": None, "end": None}
    try:
        open_notebook(page, server, nb)
        run_all_cells(page, 2)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            read = page.evaluate(READ_JS)
            if read["root"] and read["status"] == "running" and read["value"] not in ("", "—"):
                if out["live"] is None:
                    screenshot(page, "calibrate-live")
                out["live"] = read
            if read["root"] and len(read["prompts"]) > 1 and DONE.match(read["prompts"][1]) \
                    and read["status"] == "completed":
                page.wait_for_timeout(1000)
                out["end"] = page.evaluate(READ_JS)
                break
            page.wait_for_timeout(300)
        screenshot(page, "calibrate-end")
        server.shut_down(nb)
        yield out
    finally:
        context.close()


@pytest.mark.parametrize("when", ["live", "end"])
def test_after_calibrate_the_mfu_tile_shows_the_measured_of_achievable(calibrated: Any, when: str) -> None:
    read = calibrated[when]
    assert read is not None and read["shown"], calibrated
    assert read["label"].startswith("of achievable") and read["value"].endswith("%"), read
    assert read["sub"].startswith(f"of achievable {read['value']} (measured"), read


def test_after_calibrate_no_text_asks_for_it(calibrated: Any) -> None:
    for when in ("live", "end"):
        read = calibrated[when]
        assert read is not None and "call tm.calibrate()" not in read["text"], read["text"]
        assert "Not on this machine: MFU" not in read["text"], read["text"]
