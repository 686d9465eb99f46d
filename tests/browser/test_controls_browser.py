"""The header's Stop and Checkpoint, and an alert that stops, in a real browser (JupyterLab 4, chromium).

Runs on ipykernel 7:

- the message path (JupyterLab 4 and Notebook 7): a cell trains for up to 90 s; the test presses Checkpoint (a file appears in
  the run's ``checkpoints/`` and the header names it), then Stop twice (the confirm): the cell ends
  within one step of the request, the passport says ``stopped`` by ``button``, and the cell's
  output is one line, no traceback;
- ``--alert nan:stop`` (JupyterLab) with a NaN loss injected at step 300: the run ends at step 300, the alert is
  in the passport, in the banner and as a marker on the loss chart;
- the control-file path (JupyterLab): the same as the first with the kernel's subshell routing switched off
  (``TRAINMETER_DISABLE=reload``, as on ipykernel 6): the buttons write ``<run>/control.json``
  through the contents API and the run's watchdog obeys it.

Screenshots go to test-artifacts/browser/controls-*.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS, VIEWPORT, open_notebook, run_all_cells, write_notebook

pytestmark = pytest.mark.browser

SETUP = """\
%load_ext trainmeter
import os, time
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * 8, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randint(0, 100, (32, 8)), torch.randint(0, 10, (32,))
print("ready")"""
LONG_RUN = """\
%%trainmeter --name {name} --dir runs --interval 1
loop_finished = False
t_end = time.perf_counter() + 90
while time.perf_counter() < t_end:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    time.sleep(0.004)
loop_finished = True"""
NAN_RUN = """\
%%trainmeter --name nanstop --dir runs --interval 1 --alert nan:stop
for i in range(1, 3001):
    loss = F.cross_entropy(model(x), y)
    if i == 300:
        loss = loss * float("nan")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    time.sleep(0.004)"""
AFTER = "print('loop_finished', loop_finished)"
HIDDEN_RUN = """\
%%trainmeter --name hidden --interval 1
t_end = time.perf_counter() + 60
while time.perf_counter() < t_end and not os.path.exists({stop!r}):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    time.sleep(0.004)"""
LIVE = ".jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)"
READ_JS = """([sel, name]) => {
  const roots = [...document.querySelectorAll(sel)].filter(
    (r) => (r.querySelector('.tm-name')?.textContent || '') === name);
  const root = roots[roots.length - 1];
  if (!root) return null;
  const stop = root.querySelector('[data-tm="control-stop"]');
  const ckpt = root.querySelector('[data-tm="control-checkpoint"]');
  const controls = root.querySelector('[data-tm="controls"]');
  const loss = root.querySelector('[data-tm-chart="loss"]');
  return {
    status: (root.querySelector('[data-tm="status"]')?.textContent || '').trim(),
    controls_hidden: controls ? controls.hidden : null,
    stop: stop ? {disabled: stop.disabled, text: stop.textContent, title: stop.title} : null,
    checkpoint: ckpt ? {disabled: ckpt.disabled, title: ckpt.title} : null,
    note: (root.querySelector('[data-tm="control-note"]')?.textContent || ''),
    banner: (root.querySelector('[data-tm="alerts"]')?.textContent || ''),
    warnings: (root.querySelector('[data-tm="warnings"]')?.textContent || ''),
    alert_marker: loss ? !!loss.querySelector('[data-tm-marker="alert"]') : null,
    title: document.title,
  };
}"""
OUTPUTS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-CodeCell')]
  .map((c) => (c.querySelector('.jp-OutputArea')?.innerText || ''))"""


def _widget(page: Any, run: str) -> Any:
    """The live dashboard of run ``run`` (re-located each time: a view re-created at the cell's end detaches)."""
    return page.locator(LIVE).filter(has=page.locator(".tm-name", has_text=run)).last


def _shot(page: Any, run: str, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            widget = _widget(page, run)
            widget.scroll_into_view_if_needed(timeout=5_000)
            page.wait_for_timeout(400)
            widget.screenshot(path=str(ARTIFACTS / f"{name}.png"), timeout=10_000)
            return
        except Exception:
            if attempt == 2:
                raise
            page.wait_for_timeout(1000)


def _wait(page: Any, run: str, ok: Any, timeout_s: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    read = None
    while time.monotonic() < deadline:
        read = page.evaluate(READ_JS, [LIVE, run])
        if read and ok(read):
            return read
        page.wait_for_timeout(250)
    raise AssertionError(f"{what} not seen in {timeout_s:.0f} s; last read {read}")


def _run_dir(root: Path, name: str) -> Path:
    found = sorted((root / "runs").glob(f"*-{name}"))
    assert found, f"no run folder for {name} under {root / 'runs'}"
    return found[-1]


def _wait_run(root: Path, name: str, timeout_s: float = 150.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not list((root / "runs").glob(f"*-{name}")):
        time.sleep(0.25)
    return _run_dir(root, name)


def _passport(run: Path, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return json.loads((run / "passport.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.25)
    raise AssertionError(f"no passport in {run}")


def _stop_and_checkpoint(page: Any, server: Any, root: Path, name: str, path_title: str, shot: str
                         ) -> dict[str, Any]:
    """Press Checkpoint, then Stop twice, on the live run ``name``; the figures and the passport."""
    live = _wait(page, name, lambda r: r["status"] == "running" and r["stop"] and not r["stop"]["disabled"], 120,
                 "enabled controls on the running run")
    assert path_title in live["checkpoint"]["title"], live
    run = _run_dir(root, name)
    _widget(page, name).locator('[data-tm="control-checkpoint"]').click()
    read = _wait(page, name, lambda r: r["note"].startswith("checkpoint saved: checkpoints/step-"), 30,
                 "the checkpoint's name")
    files = list((run / "checkpoints").glob("step-*.pt"))
    assert len(files) == 1 and files[0].name in read["note"]
    page.keyboard.press("Escape")
    if server.kind == "lab":
        page.keyboard.press("Control+b")  # the file browser closed: the dashboard gets the width
    _shot(page, name, f"{shot}-checkpoint")
    stop = _widget(page, name).locator('[data-tm="control-stop"]')
    stop.click()
    confirm = _wait(page, name, lambda r: r["stop"]["text"] == "Confirm stop", 5, "the stop's confirm")
    _shot(page, name, f"{shot}-confirm")
    t0 = time.monotonic()
    stop.click()
    passport = _passport(run)
    seconds = time.monotonic() - t0
    ended = _wait(page, name, lambda r: r["status"] == "stopped" and r["note"].startswith("stopped by"), 60,
                  "the stopped status")
    _shot(page, name, f"{shot}-stopped")
    return {"passport": passport, "seconds_to_passport": seconds, "files": files, "confirm": confirm,
            "ended": ended, "run": run}


def _notebook(servers: Any, browser: Any, root: Path, nb_name: str, cells: list[str], kind: str = "lab") -> Any:
    """Open ``nb_name`` with ``cells`` in JupyterLab (or Notebook 7) and run them all; yields (page, server)."""
    server = servers.get(kind)
    write_notebook(root / nb_name, cells)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, len(cells))
        yield page, server
    finally:
        context.close()
        server.shut_down(nb_name)


@pytest.fixture(scope="module", params=["lab", "notebook"])
def message_path(request: Any, servers: Any, browser: Any, notebook_root: Path) -> Any:
    kind = request.param
    nb_name = f"controls-{kind}.ipynb"
    name = f"stopme-{kind}"
    for page, server in _notebook(servers, browser, notebook_root, nb_name,
                                  [SETUP, LONG_RUN.format(name=name), AFTER], kind):
        shot = "controls" if kind == "lab" else "controls-nb7"
        out = _stop_and_checkpoint(page, server, notebook_root, name, "through the widget's comm", shot)
        server.wait_kernel_idle(nb_name)
        page.wait_for_timeout(1000)
        out["outputs"] = page.evaluate(OUTPUTS_JS)
        yield out


@pytest.fixture(scope="module")
def nan_alert(servers: Any, browser: Any, notebook_root: Path) -> Any:
    for page, _server in _notebook(servers, browser, notebook_root, "controls-nan.ipynb", [SETUP, NAN_RUN]):
        passport = _passport(_wait_run(notebook_root, "nanstop"), timeout_s=150)
        read = _wait(page, "nanstop", lambda r: r["status"].startswith("stopped") and r["alert_marker"], 60,
                     "the nan alert's marker")
        page.keyboard.press("Escape")
        page.keyboard.press("Control+b")
        _shot(page, "nanstop", "controls-nan-alert")
        yield {"passport": passport, "read": read}


def test_stop_ends_the_cell_within_one_step_with_status_stopped_and_no_traceback(message_path):
    p = message_path["passport"]
    assert p["status"] == "stopped" and p["stopped_by"] == "button" and p["error"] is None
    assert p["steps"] == p["stopped_at_step"]
    assert p["stopped_at_step"] - p["stop_requested_at_step"] <= 1  # the next step boundary
    assert message_path["seconds_to_passport"] < 30
    assert message_path["ended"]["note"] == f"stopped by button after step {p['stopped_at_step']} · " \
        f"checkpoint saved: {p['checkpoints'][0]['path']}"
    outputs = message_path["outputs"]
    assert "Traceback" not in outputs[1] and "StopTraining" not in outputs[1]
    assert "loop_finished False" in outputs[2]  # the loop's own end never ran


def test_checkpoint_writes_a_file_that_the_passport_lists(message_path):
    p = message_path["passport"]
    (ckpt,) = p["checkpoints"]
    (path,) = message_path["files"]
    assert ckpt["path"] == f"checkpoints/{path.name}" and ckpt["bytes"] == path.stat().st_size
    assert ckpt["source"] == "trainmeter" and ckpt["step"] <= p["stopped_at_step"]


def test_a_nan_alert_stops_the_run_at_the_nan_step_and_shows_on_the_chart(nan_alert):
    p = nan_alert["passport"]
    assert p["status"] == "stopped" and p["stopped_at_step"] == 300 and p["stopped_by"] == "alert:nan:stop"
    assert [(a["rule"], a["step"]) for a in p["alerts"]] == [("nan:stop", 300)]
    read = nan_alert["read"]
    assert "nan:stop" in read["banner"] and read["alert_marker"]
    assert read["status"] == "stopped · loss nan"  # the status says why, in the alert colour (spec section 12)
    assert read["warnings"].count("alert nan:stop") == 0  # in the banner only, not again among the warnings


@pytest.fixture(scope="module")
def file_path(servers: Any, browser: Any, notebook_root: Path) -> Any:
    setup = 'import os\nos.environ["TRAINMETER_DISABLE"] = "reload"  # as on ipykernel 6: no subshell\n' + SETUP
    stop = notebook_root / "controls-hidden.stop"  # the hidden-folder run trains until the test has read it
    stop.unlink(missing_ok=True)
    for page, server in _notebook(servers, browser, notebook_root, "controls-file.ipynb",
                                  [setup, HIDDEN_RUN.format(stop=str(stop)), LONG_RUN.format(name="filestop")]):
        # the default run folder (.trainmeter/runs) is hidden: the server does not serve it, so no path works
        hidden = _wait(page, "hidden", lambda r: r["status"] == "running" and r["stop"] is not None, 60,
                       "the hidden-folder run's controls")
        page.keyboard.press("Escape")
        page.keyboard.press("Control+b")
        _shot(page, "hidden", "controls-disabled")
        stop.touch()  # the hidden run ends at its next step; the control-file run starts
        out = _stop_and_checkpoint(page, server, notebook_root, "filestop", "control file", "controls-file")
        out["hidden"] = hidden
        yield out


def test_where_no_path_reaches_the_run_the_buttons_are_disabled_with_the_reason(file_path):
    hidden = file_path["hidden"]
    assert hidden["stop"]["disabled"] and hidden["checkpoint"]["disabled"]
    assert "only between cells" in hidden["stop"]["title"] and "not served for a control file" in hidden["note"]


def test_where_messages_wait_the_buttons_write_the_control_file_and_the_run_obeys(file_path):
    p = file_path["passport"]
    assert p["status"] == "stopped" and p["stopped_by"] == "control-file"
    assert [c["path"] for c in p["checkpoints"]] == [f"checkpoints/{file_path['files'][0].name}"]
    assert (file_path["run"] / "control.json").is_file()
