"""tm.display(path, follow=True) in a real browser (JupyterLab 4, chromium): a run written by another process.

One notebook: its first cell starts a script in a subprocess that trains slowly under ``tm.monitor`` (the
other process) and follows its run folder with ``tm.display(run_dir, follow=True)``; its second cell runs
``tm.display(follow=True)`` with no run, which picks the newest live run under the default run root. The
test reads both live widgets' step counts and waits until each has risen past its first reading. A third
cell follows a two-rank launch folder (records as ranks write them) and shows the MFU over both ranks' devices.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import VIEWPORT, open_notebook, run_all_cells, screenshot, write_notebook

pytestmark = pytest.mark.browser

WRITER = """\
import time
import torch
import trainmeter as tm

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with tm.monitor(name="follow-writer", interval_s=0.2, widget=False):
    for _ in range(300):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.15)
"""

START_CELL = f"""\
import pathlib, subprocess, sys, time
import trainmeter as tm
pathlib.Path("follow_writer.py").write_text({WRITER!r})
writer = subprocess.Popen([sys.executable, "follow_writer.py"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pathlib.Path("follow_writer.pid").write_text(str(writer.pid))
runs = []
for _ in range(1200):
    runs = sorted(pathlib.Path(".trainmeter/runs").glob("*-follow-writer/events.jsonl"))
    if runs:
        break
    time.sleep(0.1)
tm.display(runs[-1].parent, follow=True)"""

NEWEST_CELL = "tm.display(follow=True)"

LAUNCH_CELL = """\
import json
launch = pathlib.Path("two-ranks-launch")
compute = {"convention": "hf", "flops_per_token": {"hf": 6.0e9}, "peak_flops_per_s": 989e12,
           "peak_text": "H100 SXM dense bf16: NVIDIA datasheet", "peak_provenance": "detected"}
for k in (0, 1):
    seat = launch / f"rank-{k}"
    seat.mkdir(parents=True, exist_ok=True)
    records = [{"kind": "start", "name": "ddp", "started_at": "2026-11-30T17:00:00+00:00"},
               {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": "node-1", "pid": None},
               {"kind": "interval", "step": 40, "tokens": 40960, "elapsed_s": 10.0 + k, "phases_s": {"train": 9.0},
                "throughput": {"seconds_per_step": 0.25},
                "distributed": {"rank": k, "backend": "nccl", "compute": compute}}]
    (seat / "events.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in records))
tm.display(launch, follow=True)"""

READ_STEPS_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return [];
  return [...panel.querySelectorAll('.trainmeter:not(.trainmeter-snapshot)')].map((root) => {
    const step = root.querySelector('[data-tm="step"]');
    return step && step.dataset.value != null ? Number(step.dataset.value) : null;
  });
}"""

READ_MFU_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const tile = panel && panel.querySelector('.trainmeter:not(.trainmeter-snapshot) [data-tm-tile="mfu_ranks"]');
  return tile ? (tile.querySelector('.tm-tile-value')?.textContent || '').trim() : null;
}"""


def _read(page: Any) -> list[int | None]:
    return page.evaluate(READ_STEPS_JS)


@pytest.fixture(scope="module")
def followed(servers: Any, browser: Any, notebook_root: Path) -> Any:
    server = servers.get("lab")
    nb_name = "follow-lab.ipynb"
    write_notebook(notebook_root / nb_name, [START_CELL, NEWEST_CELL, LAUNCH_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 3)
        first: list[int | None] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # both widgets shown, each with a step
            page.wait_for_timeout(500)
            first = _read(page)
            if len(first) == 3 and all(s for s in first[:2]):
                break
        later = list(first)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the other process steps on: each widget's count rises
            page.wait_for_timeout(500)
            later = _read(page)
            if len(later) == 3 and all(b is not None and a is not None and b > a
                                       for a, b in zip(first[:2], later[:2], strict=True)):
                break
        mfu = page.evaluate(READ_MFU_JS)
        screenshot(page, "follow-lab")
        yield first, later, mfu
    finally:
        context.close()
        pid_file = notebook_root / "follow_writer.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
        server.shut_down(nb_name)


def test_following_a_path_shows_the_other_processs_step_count_rising(followed: Any) -> None:
    first, later, _ = followed
    assert len(first) == 3 and first[0], f"the followed run never showed a step: {first}"
    assert later[0] > first[0]


def test_display_with_no_run_follows_the_newest_live_run(followed: Any) -> None:
    first, later, _ = followed
    assert first[1], f"tm.display(follow=True) never showed a step: {first}"
    assert later[1] > first[1]


def test_a_followed_two_rank_launch_shows_mfu_over_both_devices(followed: Any) -> None:
    _, later, mfu = followed
    assert later[2] == 40
    # 6e9 FLOP/token x 81,920 tokens / 11 s / (2 x 989 TFLOP/s) = 2.26%, shown to one decimal
    assert mfu == "2.3%", mfu
