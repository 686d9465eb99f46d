"""Stragglers: which rank is slow, by how much, against the others and against itself (docs/spec.md section 19).

Each rank times its steps by its own clock (:class:`StepTiming`: step time, and the part outside backward; one
optimizer post-hook and a ``Tensor.backward`` wrapper: clock reads, no sync; training thread); the scores compare
those (pure).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
import weakref
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any

from trainmeter.core.patches import Patches

SLOW_RATIO = 1.2  # a rank this much slower than the median is named


@dataclass(frozen=True, slots=True, kw_only=True)
class RankScore:
    """One rank's (or seat's) scores: ``seconds_per_step`` (the compared figure) over the median rank's and over the
    fastest's (1.9 = 1.9x slower), and its latest window over its best (``None`` without windows)."""

    rank: int | str
    seconds_per_step: float
    vs_median: float
    vs_fastest: float
    vs_own_best: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StragglerReport:
    """Scores of every timed rank (slowest first), the ``figure`` compared, the named ``straggler`` (or ``None``) and
    the ``verdict`` sentence; ``named_windows``: report windows each rank was named in, of ``windows``."""

    figure: str
    scores: tuple[RankScore, ...]
    straggler: int | str | None
    verdict: str
    named_windows: dict[int | str, int] | None = None
    windows: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the passport's ``distributed.stragglers``)."""
        return {"figure": self.figure, "straggler": self.straggler, "verdict": self.verdict,
                "slow_ratio": SLOW_RATIO, "scores": [asdict(s) for s in self.scores],
                "named_windows": {str(k): v for k, v in (self.named_windows or {}).items()}, "windows": self.windows}


_FIGURES = {"outside_backward_s": "work outside backward (data loading, forward, optimizer)", "step_s": "step time"}


def score_ranks(timings: dict[int | str, dict[str, Any]], data_wait_share: dict[int | str, float] | None = None
                ) -> StragglerReport | None:
    """Score ranks from their timing summaries (``StepTiming.summary()``); ``None`` under two timed ranks.
    ``data_wait_share``: rank -> fraction of its session waiting for data (the highest straggler: check its loader)."""
    figure = "outside_backward_s"
    if sum(1 for t in timings.values() if t.get(figure) is not None) < 2:
        figure = "step_s"
    values = {r: t[figure] for r, t in timings.items() if t.get(figure) is not None}
    if len(values) < 2:
        return None
    median = statistics.median(values.values())
    fastest = min(values.values())
    scores = []
    for rank, value in values.items():
        best = timings[rank].get(f"best_window_{figure}")
        latest = (timings[rank].get("window") or {}).get(figure)  # its latest window, else its run's
        latest = latest if latest is not None else timings[rank].get(figure)
        own = latest / best if best and latest is not None and best > 0 else None
        scores.append(RankScore(rank=rank, seconds_per_step=value, vs_median=value / median if median > 0 else 1.0,
                                vs_fastest=value / fastest if fastest > 0 else 1.0, vs_own_best=own))
    scores.sort(key=lambda s: s.seconds_per_step, reverse=True)
    slow = scores[0]
    what = _FIGURES[figure]
    if slow.vs_median < SLOW_RATIO and slow.vs_fastest < SLOW_RATIO * SLOW_RATIO:
        return StragglerReport(figure=figure, scores=tuple(scores), straggler=None,
                               verdict=f"no straggler: every rank is within {SLOW_RATIO:.1f}x of the median in {what}")
    advice = "check its host, its data loader and what else runs on its device"
    shares = data_wait_share or {}
    if shares.get(slow.rank) is not None and shares[slow.rank] == max(shares.values()) and shares[slow.rank] > 0.1:
        what, advice = "data waits", "check its loader workers and storage"
    against = (f"{slow.vs_fastest:.1f}x slower than the fastest rank" if len(scores) == 2
               else f"{slow.vs_median:.1f}x slower than the median")
    verdict = f"rank {slow.rank} is {against} in {what}: {advice}"
    return StragglerReport(figure=figure, scores=tuple(scores), straggler=slow.rank, verdict=verdict)


def with_repeats(report: StragglerReport, windows: dict[int | str, list[dict[str, Any]]]) -> StragglerReport:
    """``report`` with each rank's count of report windows it was named in (``windows``: each rank's windows in order,
    its interval records' ``timing.window``; the k-th windows of all ranks are compared: same ``interval_s``, about
    the same start; ranks never named are left out), and the straggler's count in its verdict."""
    depth = max((len(w) for w in windows.values()), default=0)
    reports = [score_ranks({rank: w[k] for rank, w in windows.items() if k < len(w) and w[k].get("steps")})
               for k in range(depth)]
    counts = dict(Counter(r.straggler for r in reports if r is not None and r.straggler is not None))
    compared, verdict = sum(r is not None for r in reports), report.verdict
    if report.straggler is not None and compared:
        verdict += f" (named in {counts.get(report.straggler, 0)} of {compared} report windows)"
    return replace(report, verdict=verdict, named_windows=counts, windows=compared)


class StepTiming:
    """Installs the timing hooks for one run and sums them per report window (``Tensor.backward`` is wrapped; the
    probes wrap ``torch.autograd.backward``, another function, so either may be removed first)."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._patches = Patches()
        self._primary: weakref.ReferenceType[Any] | None = None
        self._last_s: float | None = None
        self._backward_s = 0.0
        self.steps = 0  # timed steps (the first is not)
        self.step_s_sum = 0.0
        self.outside_s_sum = 0.0
        self._window_from = (0, 0.0, 0.0)  # the sums above when the report window began
        self.best_window_outside_s: float | None = None
        self.best_window_step_s: float | None = None
        self.last_window: dict[str, Any] = {}

    def start(self) -> None:
        """Install the optimizer post-hook and the backward wrapper (imports torch)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._on_step)
        self._patches.wrap(torch.Tensor, "backward", self._timed)

    def _timed(self, base: Any) -> Any:
        @functools.wraps(base)
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return base(tensor, *args, **kwargs)
            finally:
                self._backward_s += time.perf_counter() - t0

        return backward

    def stop(self) -> None:
        """Remove the hook and the wrapper (idempotent; another wrapper on top of ours: both are left)."""
        if self._handle is not None:
            with contextlib.suppress(Exception):
                self._handle.remove()
            self._handle = None
        self._patches.restore_all()

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        now = time.perf_counter()
        last, self._last_s = self._last_s, now
        backward_s, self._backward_s = self._backward_s, 0.0
        if last is not None:
            self.steps += 1
            self.step_s_sum += now - last
            self.outside_s_sum += max(0.0, now - last - backward_s)

    def take_window(self) -> dict[str, Any]:
        """The report window's means (seconds per step) and the run's so far; resets the window."""
        steps, step_s, outside_s = self._window_from
        n = self.steps - steps
        window: dict[str, Any] = {"steps": n, "step_s": None, "outside_backward_s": None}
        if n:
            window["step_s"] = step = (self.step_s_sum - step_s) / n
            window["outside_backward_s"] = outside = (self.outside_s_sum - outside_s) / n
            self.best_window_step_s = min(x for x in (step, self.best_window_step_s) if x is not None)
            self.best_window_outside_s = min(x for x in (outside, self.best_window_outside_s) if x is not None)
        self._window_from = (self.steps, self.step_s_sum, self.outside_s_sum)
        self.last_window = window
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Run means, best window means, and the last window."""
        n = self.steps
        return {"timed_steps": n, "step_s": self.step_s_sum / n if n else None,
                "outside_backward_s": self.outside_s_sum / n if n else None,
                "best_window_step_s": self.best_window_step_s,
                "best_window_outside_backward_s": self.best_window_outside_s, "window": dict(self.last_window)}
