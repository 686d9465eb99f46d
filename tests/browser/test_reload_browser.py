"""A page reloaded while a ``%%trainmeter`` cell runs: the live view comes back with its whole history.

One training cell per front end, which trains until the test has seen the reloaded page redraw the
history (or for at most 120 s on a slow machine). About 4 s after Run the notebook is saved
(the widget view is in the file) and at 5 s the page is reloaded; the page is
then read every 250 ms. The kernel answers the reloaded page's widget restore
on a subshell thread while the cell runs (widget/restore_route.py), so the step
shows and the charts redraw the history before the cell ends. After the cell
the reloaded page's output holds the static dashboard (the front end replaces
the widget view with the bundle the kernel sends at the end: the reloaded page
never gets the cell's display update), and the notebook saved from it keeps it.
A second run reloads without saving first: the front end adds the live view to
the running cell itself (the kernel tells it the cell id). Each notebook is signed
before it is opened, as one the user saved is; a third, unsigned one reloads
untrusted: the front end never changes a cell's trust, and JupyterLab draws no widget
view there, so the added output's sanitized HTML copy hosts the live view (its text
says the notebook is not trusted and how to trust it); the static dashboard replaces
it at the end (docs/protocol.md section 4).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import (
    ARTIFACTS,
    VIEWPORT,
    WIDGET_VIEW,
    JupyterServer,
    open_notebook,
    read_page,
    run_all_cells,
    save_notebook,
    screenshot,
    widget_outputs,
    write_notebook,
)
from tests.browser.test_widget_browser import SETUP_CELL, TRAIN_CELL

pytestmark = pytest.mark.browser

TRAIN_S = 120  # at most: the cell stops once the reloaded page has redrawn the history (its stop file)
STOP_AFTER_REDRAW_S = 2.0  # reads while the cell still runs after the redraw
RELOAD_AT_S = 5.0
REDRAW_WITHIN_S = 5.0
READ_EVERY_MS = 250
HTML = "text/html"


@dataclass
class ReloadRun:
    """What the page showed before and after a reload during the cell."""

    kind: str
    saved_first: bool
    server: JupyterServer
    nb_name: str
    before: dict[str, Any] | None = None
    after: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    reload_at_s: float = 0.0
    saved: dict[str, Any] | None = None
    trusted: bool = True
    note_seen_running: bool = False  # the untrusted view's text, while the cell still ran
    note_seen_after_s: float | None = None  # seconds after the reload

    def first_after(self, ok: Any) -> tuple[float, dict[str, Any]] | None:
        """The first read after the reload (seconds since the reload, read) for which ``ok(read)``."""
        return next(((t, s) for t, s in self.after if ok(s)), None)


def _loss_points(sample: dict[str, Any] | None) -> int:
    return int((sample or {}).get("points", {}).get("loss", 0))


def _shows_step(sample: dict[str, Any]) -> bool:
    return sample["widgets"] > 0 and (sample["step"] or 0) > 0


def _has_widget_view(nb: dict[str, Any]) -> bool:
    return any(WIDGET_VIEW in (o.get("data") or {}) for o in widget_outputs(nb))


def _has_snapshot(nb: dict[str, Any]) -> bool:
    outs = widget_outputs(nb)
    return bool(outs) and all(HTML in (o.get("data") or {}) and WIDGET_VIEW not in (o.get("data") or {})
                              for o in outs)


NOTE_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]
  .some((e) => (e.textContent || '').includes('this notebook is not trusted'))"""


SNAPSHOT_JS = "() => !!document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter-snapshot')"


def _sign(path: Path, server: JupyterServer) -> None:
    """Sign the notebook with the server's notary (its data dir), as saving it in the page would."""
    import nbformat
    from nbformat.sign import NotebookNotary

    nb = nbformat.read(str(path), as_version=4)
    NotebookNotary(data_dir=server.env["JUPYTER_DATA_DIR"]).sign(nb)


def _run_and_reload(kind: str, saved_first: bool, server: JupyterServer, browser: Any, notebook_root: Path,
                    figures: dict[str, Any], trusted: bool = True) -> ReloadRun:
    tag = f"{kind}-{'saved' if saved_first else 'unsaved'}{'' if trusted else '-untrusted'}"
    nb_name = f"reload-{tag}.ipynb"
    stop = notebook_root / f"reload-{tag}.stop"
    stop.unlink(missing_ok=True)
    cell = TRAIN_CELL.format(kind=kind, train_s=TRAIN_S).replace(
        "while time.perf_counter() < t_end:",
        f"while time.perf_counter() < t_end and not __import__('os').path.exists({str(stop)!r}):")
    write_notebook(notebook_root / nb_name, [SETUP_CELL, cell])
    if trusted:
        _sign(notebook_root / nb_name, server)
    run = ReloadRun(kind=kind, saved_first=saved_first, server=server, nb_name=nb_name, trusted=trusted)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 2)
        t0 = time.monotonic()
        page.wait_for_function(
            """() => { const s = document.querySelector(
                 '.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot) [data-tm="step"]');
                 return s && Number(s.dataset.value) > 0; }""", timeout=60_000, polling=250)
        t0 = time.monotonic()  # the run's first step on screen
        if saved_first:
            page.wait_for_timeout(2500)
            save_notebook(page, server, nb_name, _has_widget_view)
        while time.monotonic() - t0 < RELOAD_AT_S:
            page.wait_for_timeout(100)
        run.before = read_page(page)
        screenshot(page, f"reload-{tag}-1-before")
        run.reload_at_s = time.monotonic() - t0
        t_reload = time.monotonic()
        page.reload(wait_until="domcontentloaded", timeout=90_000)
        deadline = t_reload + TRAIN_S + 30
        shot = mid_shot = False
        redrawn_at: float | None = None
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:300]))
        while time.monotonic() < deadline:
            page.wait_for_timeout(READ_EVERY_MS)
            sample = read_page(page)
            if sample is None:
                continue
            run.after.append((time.monotonic() - t_reload, sample))
            if not trusted and not run.note_seen_running and sample["status"] not in ("completed", "failed"):
                run.note_seen_running = bool(page.evaluate(NOTE_JS))  # replaced by the dashboard at the end
                if run.note_seen_running:
                    run.note_seen_after_s = time.monotonic() - t_reload
            if not shot and _redrawn(run, sample):
                shot = bool(screenshot(page, f"reload-{tag}-2-redrawn"))
            if redrawn_at is None and _redrawn(run, sample):
                redrawn_at = time.monotonic()
            if redrawn_at is not None and time.monotonic() - redrawn_at > STOP_AFTER_REDRAW_S:
                stop.touch()  # the cell ends at its next step
            if not shot and not mid_shot and time.monotonic() - t_reload > 12:
                mid_shot = bool(screenshot(page, f"reload-{tag}-2-not-redrawn"))
            if sample["status"] in ("completed", "failed", "interrupted"):
                break
            if not trusted and run.note_seen_running and page.evaluate(SNAPSHOT_JS):
                break  # the untrusted page shows no live status: the static dashboard marks the end
        trace = [{"t_s": round(t, 2), "widgets": s["widgets"], "step": s["step"], "status": s["status"],
                  "loss_points": _loss_points(s), "prompt": (s["prompts"] + ["", ""])[1]} for t, s in run.after]
        (ARTIFACTS / f"reload-{tag}-trace.json").write_text(json.dumps(
            {"before": run.before and {"step": run.before["step"], "loss_points": _loss_points(run.before)},
             "reload_at_s": round(run.reload_at_s, 2), "note_seen_after_s": run.note_seen_after_s, "after": trace,
             "console": [c for c in console if "trainmeter" in c or "rror" in c][:40]}, indent=1))
        try:
            page.wait_for_function(
                """() => !!document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter-snapshot')""",
                timeout=30_000, polling=250)
            page.wait_for_timeout(1000)
            screenshot(page, f"reload-{tag}-3-finished")
            run.saved = save_notebook(page, server, nb_name, _has_snapshot, timeout_s=20)
        except Exception:
            screenshot(page, f"reload-{tag}-3-finished")
            run.saved = server.read_notebook(nb_name)
        step = run.first_after(_shows_step)
        redrawn = run.first_after(lambda s: _redrawn(run, s))
        shown = run.first_after(lambda s: len(s["prompts"]) > 1 and s["prompts"][1] != "")
        figures[f"reload.{tag}.notebook_shown_after_s"] = round(shown[0], 2) if shown else None
        figures[f"reload.{tag}.step_shown_after_s"] = round(step[0], 2) if step else None
        figures[f"reload.{tag}.history_redrawn_after_s"] = round(redrawn[0], 2) if redrawn else None
        figures[f"reload.{tag}.loss_points_before"] = _loss_points(run.before)
        return run
    finally:
        stop.touch()
        context.close()
        server.shut_down(nb_name)


@pytest.fixture(scope="module", params=[("lab", True, True), ("lab", False, True), ("notebook", True, True),
                                        ("notebook", False, True), ("lab", False, False)],
                ids=["lab-saved", "lab-unsaved", "notebook-saved", "notebook-unsaved", "lab-unsaved-untrusted"])
def reload_run(request: pytest.FixtureRequest, servers: Any, browser: Any, notebook_root: Path,
               browser_figures: dict[str, Any]) -> ReloadRun:
    kind, saved_first, trusted = request.param
    return _run_and_reload(kind, saved_first, servers.get(kind), browser, notebook_root, browser_figures,
                           trusted=trusted)


def _redrawn(run: ReloadRun, sample: dict[str, Any]) -> bool:
    """The step shows and the loss chart holds the history (re-decimated: at least half the points seen before)."""
    return _shows_step(sample) and 2 * _loss_points(sample) >= _loss_points(run.before) > 0


def test_reload_while_running_redraws_history(reload_run: ReloadRun) -> None:
    run = reload_run
    assert run.before is not None and _shows_step(run.before) and _loss_points(run.before) > 0
    if not run.trusted:  # the cell's trust is the user's: the live view shows in its HTML copy, which says so
        assert run.note_seen_running, "the untrusted reloaded cell never said it is not trusted and how to trust it"
    redrawn = run.first_after(lambda s: _redrawn(run, s))
    assert redrawn is not None, f"history never redrawn after the reload: {run.after[-1:]}"
    t_s, sample = redrawn
    assert sample["status"] == "running"  # while the cell still runs, not from its end
    assert sample["step"] >= run.before["step"]
    # the bound, from the moment the reloaded page shows the notebook (JupyterLab itself takes
    # 2-6 s to boot on a 2-core CI machine, before any kernel message can be answered); on a busier machine,
    # no longer than the reloaded page took to show the notebook
    shown = run.first_after(lambda s: len(s["prompts"]) > 1 and s["prompts"][1] != "")
    assert shown is not None and t_s - shown[0] <= max(REDRAW_WITHIN_S, shown[0]), \
        f"history redrawn {t_s - shown[0]:.1f} s after the notebook showed ({shown[0]:.1f} s after the reload)"


def test_notebook_saved_after_the_reload_keeps_the_snapshot(reload_run: ReloadRun) -> None:
    assert reload_run.saved is not None
    outs = widget_outputs(reload_run.saved)
    assert len(outs) == 1, f"{len(outs)} dashboard outputs in the saved notebook"
    data = outs[0]["data"]
    assert WIDGET_VIEW not in data
    html = "".join(data[HTML]) if isinstance(data[HTML], list) else data[HTML]
    assert "trainmeter-snapshot" in html and "completed" in html
