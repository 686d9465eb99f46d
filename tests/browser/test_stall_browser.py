"""A stall in the user's loop, read in JupyterLab at 1280x900 (issue 42 item 3): while no step comes for 9 s the rate
tile's text and label change (the rate decays, "no step for N s") and the ETA grows (widget/live_rate.py); it ends
when steps resume. Screenshots: ``test-artifacts/browser/stall-*.png``.
"""

from __future__ import annotations

import re
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

STALL_S = 9
TRAIN = f"""\
%%trainmeter --name stall --interval 1 --budget-steps 20000
import time, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randint(0, 32, (4, 6)), torch.randint(0, 32, (4,))
t0, stalled = time.perf_counter(), False
while time.perf_counter() < t0 + {4 + STALL_S + 3}:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); time.sleep(0.004)
    if not stalled and time.perf_counter() > t0 + 4:
        stalled = True
        time.sleep({STALL_S})  # the user's loop stalls: no step for {STALL_S} s"""

READ_JS = LIVE_READ_JS + """
  const tile = root.querySelector('[data-tm-tile="throughput"]');
  const progress = root.querySelector('[data-tm="progress"]');
  return {prompts, root: true, status: root.querySelector('[data-tm="status"]')?.dataset.status,
          step: root.querySelector('[data-tm="step"]')?.textContent,
          label: tile?.querySelector('.tm-tile-label-text')?.textContent || '',
          rate: tile?.querySelector('.tm-tile-value')?.textContent.trim() || '',
          eta_s: progress?.dataset.etaS ? Number(progress.dataset.etaS) : null,
          progress: progress?.textContent || ''};
}
"""


@pytest.fixture(scope="module")
def stall(servers: Any, browser: Any, notebook_root: Path) -> Any:
    """Every read of the live widget, every 250 ms, from the run's first frame to its end."""
    server = servers.get("lab")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    nb = "stall.ipynb"
    write_notebook(notebook_root / nb, ["%load_ext trainmeter", TRAIN])
    reads: list[dict[str, Any]] = []
    try:
        open_notebook(page, server, nb)
        run_all_cells(page, 2)
        shot, deadline = False, time.monotonic() + 120
        while time.monotonic() < deadline:
            read = page.evaluate(READ_JS)
            if read["root"]:
                reads.append(read)
                if not shot and "no step for" in read["label"] and read["label"] != "session rate (no step for 1 s)":
                    screenshot(page, "stall-during")
                    shot = True
                if len(read["prompts"]) > 1 and DONE.match(read["prompts"][1]) and read["status"] != "running":
                    break
            page.wait_for_timeout(250)
        screenshot(page, "stall-end")
        server.shut_down(nb)
        yield reads
    finally:
        context.close()


def _split(reads: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The live reads before the stall (with a rate and an ETA) and those during it."""
    during = [r for r in reads if r["status"] == "running" and "no step for" in r["label"]]
    first = reads.index(during[0]) if during else len(reads)
    before = [r for r in reads[:first] if r["status"] == "running" and r["eta_s"] is not None and r["rate"] != "—"]
    return before, during


def test_a_9_s_stall_changes_the_rate_tiles_text_while_it_lasts(stall: Any) -> None:
    before, during = _split(stall)
    assert before and during, [(r["label"], r["rate"], r["eta_s"]) for r in stall]
    last = before[-1]
    assert last["label"].startswith("session rate (last "), last
    assert any(r["rate"] != last["rate"] for r in during), (last, during)
    seconds = [int(m.group(1)) for r in during if (m := re.search(r"no step for (\d+) s", r["label"]))]
    assert max(seconds) >= STALL_S - 3, seconds  # read while it lasts, the count grows
    assert seconds == sorted(seconds), seconds
    assert stall[-1]["status"] == "completed" and "no step for" not in stall[-1]["label"]


def test_a_9_s_stall_grows_the_eta_while_it_lasts(stall: Any) -> None:
    before, during = _split(stall)
    etas = [r["eta_s"] for r in during if r["eta_s"] is not None]
    assert etas and max(etas) > before[-1]["eta_s"] * 1.5, (before[-1], etas)
