"""Real training stacks (Hugging Face, Lightning, accelerate, torch.compile) run with tiny models built from configs.

Nothing is downloaded. Each test runs the stack's own loop as a user would, under
``tm.monitor``, and checks what trainmeter records against what the stack itself
reports, against sleeps injected into eval and checkpoint, and against a bare run
(compiled graphs, printed output).
"""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

SLEEP_TOLERANCE = 0.10  # eval and checkpoint seconds within 10% of the injected sleeps ...
SLEEP_SLACK_S = 0.3  # ... or 0.3 s, the larger


class Sleeper:
    """Pickled inside a checkpoint (``torch.save``): sleeps while the checkpoint is written."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self):
        time.sleep(self.seconds)
        return (int, (0,))


def token_rows(n: int, seq: int) -> list[dict[str, Any]]:
    """``n`` rows of ``seq`` token ids under 64 (seeded), each its own labels: the HF Trainer's tiny dataset."""
    import torch

    ids = torch.randint(0, 64, (n, seq), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": row, "labels": row} for row in ids]


def passport(m: Any) -> dict[str, Any]:
    return json.loads((Path(m.run_dir) / "passport.json").read_text())


def logged(m: Any, name: str) -> list[tuple[int, float]]:
    """``(step, value)`` points of series ``name`` as written to the run log."""
    from trainmeter.record.runlog import read_events

    out: list[tuple[int, float]] = []
    for event in read_events(Path(m.run_dir) / "events.jsonl"):
        if event["kind"] == "series" and event["name"] == name:
            out += list(zip(event["step"], event["value"], strict=True))
    return out


def within(measured: float, injected: float, bare_s: float = 0.0) -> bool:
    """``injected <= measured <= injected + max(10% of it, 0.3 s, bare_s)``: the sleeps, plus the framework's own eval
    or save work, which a busy machine stretches (a tiny Keras model's two saves took 0.19 s beside two callgrind
    runs). ``bare_s``: the bare run's whole wall time, which holds that work and stretches with the same load (a
    fastai eval took 0.9 s past its sleeps beside a CI run and two callgrind runs). On an idle machine the slack stays
    under every injected sleep (0.4 s at least), so one sleep lost or swallowed from another span fails."""
    return injected <= measured <= injected + max(SLEEP_TOLERANCE * injected, SLEEP_SLACK_S, bare_s)


def _shape(text: str) -> set[str]:
    """Printed lines with numbers blanked (timings differ between runs)."""
    return {re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", line).strip() for line in text.splitlines() if line.strip()}


class Printed:
    """What a run printed (stdout, stderr at the file-descriptor level) and warned."""

    def __init__(self, capfd: Any) -> None:
        self._capfd = capfd
        self.lines: set[str] = set()
        self.warnings: list[str] = []

    def __enter__(self) -> Printed:
        self._capfd.readouterr()
        self._catch = warnings.catch_warnings(record=True)
        self._record = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)
        out, err = self._capfd.readouterr()
        self.lines = _shape(out + "\n" + err)
        self.warnings = [f"{w.category.__name__}: {w.message}" for w in self._record]


def printed_by_us(bare: Printed, monitored: Printed) -> list[str]:
    """Lines and warnings present only in the monitored run, other than trainmeter's closing line."""
    lines = sorted(line for line in monitored.lines - bare.lines if not line.startswith("trainmeter: run"))
    bare_warnings = {_shape(w).pop() if _shape(w) else w for w in bare.warnings}
    extra = [w for w in monitored.warnings if (_shape(w).pop() if _shape(w) else w) not in bare_warnings]
    return lines + extra


@pytest.fixture
def printed(capfd):
    return lambda: Printed(capfd)
