"""Verdicts on a run: one sentence each, with the step where the trouble began (thresholds: docs/spec.md section 14).

Each kind fires at most once; no statistical kind on one sample (:data:`CONSECUTIVE` points in a row). Thread safety:
feed from one thread; :attr:`VerdictEngine.verdicts` is replaced (never mutated), so other threads may read it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainmeter.sizes import format_bytes, format_number, format_rate

CONSECUTIVE = 3
SPIKE_WINDOW = 100
SPIKE_MIN_POINTS = 50
SPIKE_Z = 8.0
REF_EVERY = 32
"""Points between refreshes of the spike reference (median and MAD of the window): a window of 100
moves little in 32 points, and sorting it for every point would cost tens of microseconds each."""
DROP_FRACTION = 0.20
MIN_REPORTS = 5
MEDIAN_HISTORY = 2048
CREEP_REPORTS = 10
CREEP_MIN_RISE = 0.02
CREEP_R2 = 0.9
WARMUP_REPORTS = 2
DATA_WAIT_FRACTION = 0.20
PHASE_FRACTION = 0.15
UTIL_HIGH = 0.9
SM_LOW = 0.5
TENSOR_LOW = 0.05
MAD_TO_SIGMA = 1.4826
SIGMA_FLOOR = 1e-3  # the robust sigma is at least this fraction of the median (a flat loss has MAD 0)

KINDS = ("loss_nonfinite", "loss_spike", "throughput_drop", "memory_creep", "data_starved", "eval_heavy",
         "checkpoint_heavy", "gpu_util_misleading")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One finding (``dataclasses.asdict``: the passport's ``verdicts`` entry): its :data:`KINDS` entry, the optimizer
    step where it began, and a sentence with the numbers and the threshold."""

    kind: str
    step: int
    sentence: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportPoint:
    """What one report knows (units in the names; ``None`` where unmeasured): optimizer steps and session seconds so
    far, training-only ``token_unit``/s over the report window, allocator bytes (``mem_source`` ``"allocator"``) or
    RSS, cumulative seconds per phase, and per GPU index its ``util_gpu``/``sm_activity``/``tensor_activity``."""

    step: int
    elapsed_s: float
    tokens_per_s: float | None = None
    token_unit: str = "tokens"
    mem_bytes: float | None = None
    mem_source: str = "allocator"
    phases_s: Mapping[str, float] = field(default_factory=dict)
    gpus: Mapping[int, Mapping[str, float | None]] = field(default_factory=dict)


def _r2(ys: list[float]) -> float:
    """R^2 of the least-squares line through ``(i, ys[i])`` (0 for a flat line)."""
    try:
        return statistics.correlation(range(len(ys)), ys) ** 2
    except statistics.StatisticsError:
        return 0.0


def median_mad(ordered: list[float]) -> tuple[float, float]:
    """``statistics.median`` of a sorted list and that of its absolute deviations from it, bit for bit, in a few
    steps: the ``k`` smallest deviations are a block of neighbours (found by bisection), the ``k``-th the larger of
    its ends."""
    n = len(ordered)
    k = n // 2 + 1
    median = ordered[k - 1] if n % 2 else (ordered[k - 2] + ordered[k - 1]) / 2
    lo, hi = 0, n - k
    while lo < hi:
        mid = (lo + hi) // 2
        if median - ordered[mid] > ordered[mid + k] - median:
            lo = mid + 1
        else:
            hi = mid
    first, last = abs(ordered[lo] - median), abs(ordered[lo + k - 1] - median)
    if n % 2:
        return median, max(first, last)
    if first >= last:  # and the (k-1)-th: the block less its larger end
        return median, (first + max(abs(ordered[lo + 1] - median), last)) / 2
    return median, (max(first, abs(ordered[lo + k - 2] - median)) + last) / 2


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


@dataclass(slots=True)
class _Streak:
    """Consecutive points meeting a condition; remembers where the streak began."""

    n: int = 0
    first_step: int = 0
    first_value: float = 0.0

    def hit(self, ok: bool, step: int, value: float = 0.0) -> bool:
        """Count one point; True when the streak reaches :data:`CONSECUTIVE`."""
        if not ok:
            self.n = 0
            return False
        if self.n == 0:
            self.first_step, self.first_value = step, value
        self.n += 1
        return self.n >= CONSECUTIVE


class VerdictEngine:
    """Streams a run's numbers into verdicts; see the module docstring."""

    def __init__(self) -> None:
        self.verdicts: tuple[Verdict, ...] = ()
        self._losses: deque[float] = deque(maxlen=SPIKE_WINDOW)
        self._spike = _Streak()
        self._spike_ref = (0.0, 0.0)
        self._since_ref = REF_EVERY
        self._tps: deque[float] = deque(maxlen=MEDIAN_HISTORY)
        self._drop = _Streak()
        self._mem: deque[tuple[int, float]] = deque(maxlen=CREEP_REPORTS)
        self._reports = 0
        self._prev: ReportPoint | None = None
        self._starved = _Streak()
        self._phase = {"eval": _Streak(), "checkpoint": _Streak()}
        self._gpu: dict[int, _Streak] = {}

    def fired(self, kind: str) -> bool:
        return any(v.kind == kind for v in self.verdicts)

    def _fire(self, kind: str, step: int, sentence: str) -> None:
        if not self.fired(kind):
            self.verdicts = (*self.verdicts, Verdict(kind=kind, step=step, sentence=sentence))

    # -- loss points --------------------------------------------------------------------
    def add_loss(self, step: int, value: float, name: str = "train_loss") -> None:
        """One loss point (training thread, at reports)."""
        if not math.isfinite(value):
            self._fire("loss_nonfinite", step, f"{name} became {value} at step {step}: training has diverged "
                       "(check the learning rate, loss scaling and the inputs of that step).")
            return
        if self.fired("loss_spike") or len(self._losses) < SPIKE_MIN_POINTS:
            self._losses.append(value)
            return
        self._since_ref += 1
        if self._spike.n == 0 and self._since_ref >= REF_EVERY:  # frozen during a streak: a spike cannot lift it
            self._since_ref = 0
            median, mad = median_mad(sorted(self._losses))
            self._spike_ref = (median, max(MAD_TO_SIGMA * mad, SIGMA_FLOOR * abs(median), 1e-12))
        median, sigma = self._spike_ref
        z = (value - median) / sigma
        if self._spike.hit(z > SPIKE_Z, step, value):
            self._fire("loss_spike", self._spike.first_step,
                       f"{name} spiked at step {self._spike.first_step}: {format_number(self._spike.first_value)} "
                       f"against a median of {format_number(median)} over the previous {len(self._losses)} points (robust z > {SPIKE_Z:g} "
                       f"on {CONSECUTIVE} points in a row).")
        if self._spike.n == 0:
            self._losses.append(value)

    def add_losses(self, steps: Sequence[int], values: Sequence[float], name: str = "train_loss") -> None:
        """A report's loss points in step order (the report worker): what :meth:`add_loss` on each does, with the
        points that only join the window (finite, below the spike threshold, no streak under way) taken a run at
        a time up to the next reference update, in C (docs/spec.md section 20)."""
        i, n = 0, len(values)
        losses = self._losses
        while i < n:
            fired = self.fired("loss_spike")
            if not fired and (self._spike.n or len(losses) < SPIKE_MIN_POINTS):
                self.add_loss(steps[i], values[i], name)
                i += 1
                continue
            end = n if fired else max(i, min(n, i + REF_EVERY - 1 - self._since_ref))  # the next point updates the reference
            run = values[i:end]
            if run and not math.isfinite(sum(run)):  # a NaN or inf in it (or a sum past 1e308): to the first one
                run = run[:next((k for k, v in enumerate(run) if not math.isfinite(v)), len(run))]
            if not fired and run:
                median, sigma = self._spike_ref
                if (max(run) - median) / sigma > SPIKE_Z:  # z rises with the value: the largest says if any is over
                    run = run[:next(k for k, v in enumerate(run) if (v - median) / sigma > SPIKE_Z)]
                self._since_ref += len(run)
            losses.extend(run)
            i += len(run)
            if i < n:
                self.add_loss(steps[i], values[i], name)
                i += 1

    # -- reports --------------------------------------------------------------------------
    def add_report(self, r: ReportPoint) -> None:
        """One report's numbers (training thread)."""
        self._reports += 1
        for check in (self._throughput, self._memory, self._data_wait, self._phases, self._gpus):
            check(r)
        self._prev = r

    def _throughput(self, r: ReportPoint) -> None:
        tps = r.tokens_per_s
        if tps is None or not math.isfinite(tps) or tps <= 0:
            return
        if len(self._tps) >= MIN_REPORTS:
            median = statistics.median(list(self._tps))
            if self._drop.hit(tps < (1 - DROP_FRACTION) * median, r.step, tps):
                rate = f"{r.token_unit}/s"
                self._fire("throughput_drop", self._drop.first_step,
                           f"throughput dropped at step {self._drop.first_step}: "
                           f"{format_rate(self._drop.first_value, rate)} against the run's median of "
                           f"{format_rate(median, rate)} (more than "
                           f"{_pct(DROP_FRACTION)} lower on {CONSECUTIVE} reports in a row).")
        self._tps.append(tps)

    def _memory(self, r: ReportPoint) -> None:
        if self._reports <= WARMUP_REPORTS or r.mem_bytes is None:
            return
        self._mem.append((r.step, float(r.mem_bytes)))
        if len(self._mem) < CREEP_REPORTS or self.fired("memory_creep"):
            return
        ys = [m for _, m in self._mem]
        rising = all(b > a for a, b in zip(ys, ys[1:], strict=False))
        if rising and ys[0] > 0 and (ys[-1] - ys[0]) / ys[0] >= CREEP_MIN_RISE and _r2(ys) >= CREEP_R2:
            per = (ys[-1] - ys[0]) / (len(ys) - 1)
            self._fire("memory_creep", self._mem[0][0],
                       f"memory ({r.mem_source}) has risen at every one of the last {CREEP_REPORTS} reports since "
                       f"step {self._mem[0][0]}, about {format_bytes(per)} per report, from "
                       f"{format_bytes(ys[0])} to {format_bytes(ys[-1])}: something is being kept (a tensor with "
                       "its graph, a growing list).")

    def _data_wait(self, r: ReportPoint) -> None:
        prev = self._prev
        if prev is None or r.elapsed_s <= prev.elapsed_s:
            return
        waited = r.phases_s.get("data_wait", 0.0) - prev.phases_s.get("data_wait", 0.0)
        share = waited / (r.elapsed_s - prev.elapsed_s)
        if self._starved.hit(share > DATA_WAIT_FRACTION, r.step, share):
            self._fire("data_starved", self._starved.first_step,
                       f"the model waits for data since step {self._starved.first_step}: "
                       f"{_pct(self._starved.first_value)} of the time goes to data waits (above "
                       f"{_pct(DATA_WAIT_FRACTION)} on {CONSECUTIVE} reports in a row); more DataLoader workers, "
                       "pinned memory or prefetching would help.")

    def _phases(self, r: ReportPoint) -> None:
        if r.elapsed_s <= 0:
            return
        for phase, streak in self._phase.items():
            share = r.phases_s.get(phase, 0.0) / r.elapsed_s
            if streak.hit(share > PHASE_FRACTION, r.step, share):
                self._fire(f"{phase}_heavy", streak.first_step,
                           f"{phase} takes {_pct(share)} of the session (above {_pct(PHASE_FRACTION)} since step "
                           f"{streak.first_step}): run it less often or on fewer batches.")

    def _gpus(self, r: ReportPoint) -> None:
        for index, g in r.gpus.items():
            util, sm, tensor = g.get("util_gpu"), g.get("sm_activity"), g.get("tensor_activity")
            busy = util is not None and sm is not None and util >= UTIL_HIGH
            low_sm = busy and sm < SM_LOW
            low_tensor = busy and sm >= SM_LOW and tensor is not None and tensor < TENSOR_LOW
            streak = self._gpu.setdefault(index, _Streak())
            if streak.hit(low_sm or low_tensor, r.step, sm if low_sm else (tensor or 0.0)):
                what = (f"SM activity is {_pct(sm or 0.0)} (below {_pct(SM_LOW)}): kernels are too small or the "
                        "GPU waits between them" if low_sm else
                        f"tensor activity is {_pct(tensor or 0.0)} (below {_pct(TENSOR_LOW)}): the math is not on "
                        "tensor cores (fp32 without TF32/AMP?)")
                self._fire("gpu_util_misleading", streak.first_step,
                           f"GPU {index} reads GPU-Util {_pct(util or 0.0)} since step {streak.first_step}, but {what}.")
