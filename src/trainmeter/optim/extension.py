"""The optimizer extension: ``lr`` and ``grad_norm`` series, the smoothed loss, rank-0 text (docs/spec.md section 2).

Reads every k-th primary optimizer step, k the larger of the rate's stride and the cost's (docs/spec.md section 17;
costs: ``benchmarks/optim_step_hook.py``). Thread safety: hooks and reports on the training thread (a steady report
on the report worker); the loss EMA is folded where the run's views are caught up (optim/smoothing.py), never on the
training thread but at the first and final reports; ``panels``/``charts`` read series statistics only.
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainmeter.core import host_patches
from trainmeter.core.explicit_steps import Stepper
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.optim.grad_norm import CLIP_SOURCE, GRAD_NORM_SERIES, ClipTap
from trainmeter.optim.smoothing import LOSS_SERIES, RULE, LossEma

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext
    from trainmeter.core.steps import StepRecorder

# The primary optimizer's first param group's rate; when the groups' rates differ, also lr/<group> (read_lrs); each
# other optimizer's as lr.optimizer<N> (N as in its train_loss.optimizer<N>: 2, 3, ... in the order they step)
LR_SERIES = "lr"
# The param-group key an optimizer documents as the rate its step applied, read instead of "lr" where present:
# schedule-free's "scheduled_lr" (its warmup times lr, set in step() "for logging purposes")
APPLIED_LR_KEYS = ("scheduled_lr",)
MAX_POINTS_PER_S = 100.0
# The share of a step the rate read may take (its stride grows until the read costs no more, docs/spec.md section 2).
MAX_READ_SHARE = 2e-4
READ_EVERY_STEP_UNTIL = 100  # the first steps are read at every step whatever the cost (a short run: every rate)
# Names the taps record from frameworks' own logs, read when trainmeter's own series is absent.
LR_ALIASES = ("learning_rate",)  # Hugging Face Trainer.log
GRAD_NORM_ALIASES = ("grad_2.0_norm_total", "grad_norm_total")  # Lightning's utilities.grad_norm(self, 2)


def rank_from_env(environ: Any = None) -> int | None:
    """The process rank from ``RANK`` (torchrun, accelerate, Lightning), or ``None`` when unset or not a number."""
    try:
        return int((os.environ if environ is None else environ).get("RANK", ""))
    except ValueError:
        return None


def group_label(group: Any, index: int) -> str:
    """``name`` of a param group when it is a non-empty string, else its index."""
    name = group.get("name") if hasattr(group, "get") else None
    return name if isinstance(name, str) and name else str(index)


def lr_key(group: Any) -> str | None:
    """The key of the rate a param group's step applied: an applied-rate key it holds (``APPLIED_LR_KEYS``), else
    ``"lr"``; ``None`` when it holds no rate (a framework's stand-in optimizer)."""
    return next((key for key in (*APPLIED_LR_KEYS, "lr") if key in group), None)


def read_lrs(param_groups: Sequence[Any], key: str = "lr", name: str = LR_SERIES) -> dict[str, Any]:
    """Return ``{name: first group's rate}``, plus ``{"<name>/<group>": rate}`` per group when they differ; rates
    (``group[key]``) as stored (tensor rates are never compared, so such groups are always listed).

    Examples:
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.1}])
        {'lr': 0.1}
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.01, "name": "head"}])
        {'lr': 0.1, 'lr/0': 0.1, 'lr/head': 0.01}
        >>> read_lrs([{"lr": 0.1, "scheduled_lr": 0.02}], "scheduled_lr", "lr.optimizer2")
        {'lr.optimizer2': 0.02}
    """
    first = param_groups[0][key]
    rates = [group[key] for group in param_groups]
    if len(rates) == 1 or all(type(rate) in (float, int) and rate == first for rate in rates):
        return {name: first}
    groups = enumerate(zip(param_groups, rates, strict=True))
    return {name: first, **{f"{name}/{group_label(group, i)}": rate for i, (group, rate) in groups}}


class OptimExtension(ExtensionBase):
    """Learning rate, gradient norm and smoothed loss of one run (extension ``"optim"``; ``environ``: for ``RANK``)."""

    name = "optim"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, *, max_points_per_s: float = MAX_POINTS_PER_S, environ: Any = None) -> None:
        self._m: RunContext | None = None
        self._hot: StepRecorder | None = None  # the run's step state (monitor.steps_state), read at each sampled step
        self._max_points_per_s = max_points_per_s
        self._environ = environ
        self.rank: int | None = None
        self.ema = LossEma()  # the run's one smoothed loss (optim/smoothing.py)
        self.clip = ClipTap()
        self.stride = 1  # the stride in use: the larger of the rate's and the cost's
        self._rate_stride = 1  # from the last report's step rate (max_points_per_s)
        self._read_s: float | None = None  # the cheapest read timed so far (seconds on the run's clock)
        self._read_at = (0, 0.0)  # the last read's step and step time (seconds since the run's start)
        self._off = False  # disabled by a fault: no more reads
        self._state: Any = None  # the probes' step state: its ``primary`` is the optimizer whose step was counted
        self._optimizers: Any = None  # the probes' optimizer steps: they call _read_other at another's step
        self._primary: weakref.ReferenceType[Any] | None = None
        self._key: str | None = None  # the primary's rate key (lr_key)
        self.optimizer_class: str | None = None
        self.optimizers: dict[str, str] = {}  # series -> the class of the optimizer whose rate it holds
        self.groups = 0
        self.lr_missing: str | None = None  # why the primary's rate is not read (a stand-in holding none)
        self.reason: str | None = None

    def start(self, monitor: RunContext) -> None:
        """Subscribe the smoothed loss's fold, install the clip wrappers, read ``RANK`` (the core calls on_step)."""
        self._m = monitor
        self._hot = monitor.steps_state
        # the one fold: the views' twin deriver, caught up by the publisher, drains, reports and, between reports,
        # the report worker's idle fold (docs/spec.md sections 2, 20)
        monitor.series_views.subscribe(self.name, (LOSS_SERIES,), twins=self.ema.twin)
        monitor.worker.every(self.name, monitor.series_views.catch_up)
        self.rank = rank_from_env(self._environ)
        if self.rank not in (None, 0):
            monitor.set_text(False)
        torch = sys.modules.get("torch")
        if torch is None:
            self.reason = "torch is not imported"
            monitor.next_step_hook_at(sys.maxsize, self)  # no optimizer to read: the core never calls on_step
            return
        self.clip.counter = monitor.steps_state
        try:
            if host_patches.allow("clip-grad", monitor.warn_once):
                self.clip.install(torch)
        except Exception as exc:
            self.clip.remove()
            monitor.warn_once("optim-clip", f"gradient norm capture disabled: {exc!r}")

    def stop(self) -> None:
        """Remove the wrappers and the other optimizers' callback (no :meth:`on_step` comes after it). Idempotent."""
        self.clip.remove()
        if self._optimizers is not None:
            self._optimizers.on_other_step = None

    def on_step(self) -> None:  # type: ignore[override]
        """The primary optimizer's step was counted (in its step post-hooks, before the scheduler's ``step()``): record
        its rate and norm, time the read and set the next sampled step from it."""
        hot = self._hot
        t_s = hot.step_t_s  # type: ignore[union-attr]  # the core's clock read of this step
        self._read(t_s)
        if self._off:
            return
        try:
            clock = hot.now  # type: ignore[union-attr]  # a slot read, then a call (a slot's method call is generic)
            read_s = clock() - hot.t0_s - t_s  # type: ignore[union-attr]
            if self._read_s is None or read_s < self._read_s:
                self._read_s = read_s
            step, last_t_s = self._read_at
            steps = hot.steps  # type: ignore[union-attr]
            cost_stride = 1
            if step >= READ_EVERY_STEP_UNTIL and steps > step and t_s > last_t_s and self._read_s > 0:
                cost_stride = math.ceil(self._read_s / (MAX_READ_SHARE * (t_s - last_t_s) / (steps - step)))
            self._read_at = (steps, t_s)
            stride = max(self._rate_stride, cost_stride)
            if stride > 1 or stride != self.stride:
                self.stride = stride
                self._m.next_step_hook_at(steps + stride, self)  # type: ignore[union-attr]
        except Exception as exc:
            self._disable(exc)

    def _read(self, t_s: float) -> None:
        """Record the rate of the optimizer whose step the core counted (the primary, the probes' own) and a clipped
        norm at this step, whose time is ``t_s``."""
        try:
            m = self._m
            hot = self._hot
            state = self._state
            if state is None:
                probes = m.probes  # type: ignore[union-attr]
                if probes is None:
                    return
                state = self._state = probes.hot
                self._optimizers = probes.optimizers
                self._optimizers.on_other_step = self._read_other
            ref = state.primary
            if ref is not self._primary:
                self._adopt(ref)
            optimizer = ref() if ref is not None else None
            key = self._key
            if optimizer is None or key is None:
                return
            groups = optimizer.param_groups
            clip = self.clip
            norm = clip.take_at(hot.steps) if clip.pending is not None else None  # type: ignore[union-attr]
            if len(groups) == 1 and norm is None:
                # hot path (docs/spec.md section 17): one group's float rate into its existing series, at the step's time
                lr = groups[0][key]
                series = m.series.get(LR_SERIES) if type(lr) is float else None  # type: ignore[union-attr]
                if series is not None:
                    series.append(hot.steps, t_s, lr)  # type: ignore[union-attr]
                    return
            values = read_lrs(groups, key)
            self.groups = len(groups)
            if norm is not None:
                values[GRAD_NORM_SERIES] = norm
            m.record(values)  # type: ignore[union-attr]
        except Exception as exc:
            self._disable(exc)

    def _read_other(self, number: int, optimizer: Any) -> None:
        """Another optimizer stepped (the core numbered it: 2, 3, ...): its rate as ``lr.optimizer<N>``, at the
        primary's step count, when that step was read (the same sampling)."""
        try:
            hot = self._hot
            if self._off or self._read_at[0] != hot.steps:  # type: ignore[union-attr]
                return
            key = lr_key(optimizer.param_groups[0])
            if key is not None:
                name = f"{LR_SERIES}.optimizer{number}"
                self.optimizers[name] = type(optimizer).__name__
                self._m.record(read_lrs(optimizer.param_groups, key, name))  # type: ignore[union-attr]
        except Exception as exc:
            self._disable(exc)

    def _adopt(self, ref: Any) -> None:
        """The core's primary optimizer changed (its first step, a sweep's new one, or none): read its rate key."""
        self._primary = ref
        optimizer = ref() if ref is not None else None
        if optimizer is None:
            return
        source = optimizer.source if isinstance(optimizer, Stepper) else None  # a framework's stand-in
        self.optimizer_class = f"{source}'s optimizer" if source else type(optimizer).__name__
        self._key = lr_key(optimizer.param_groups[0])
        self.groups = len(optimizer.param_groups)
        self.lr_missing = None if self._key is not None else (
            f"the steps are counted from {source}'s updates and its optimizer's rate is not read")
        if self._key is not None:
            self.optimizers[LR_SERIES] = self.optimizer_class

    def _disable(self, exc: BaseException) -> None:
        self._off = True
        self.stop()
        if self._m is not None:
            self._m.next_step_hook_at(sys.maxsize, self)  # no more on_step calls
            self._m.warn_once("optim-step", f"learning rate and gradient norm capture disabled: {exc!r}")

    def after_fork_in_child(self, monitor: RunContext) -> None:
        """In a forked child: the smoothed loss of the child's own run (docs/spec.md section 19)."""
        self.ema = LossEma()
        monitor.series_views.subscribe(self.name, (LOSS_SERIES,), twins=self.ema.twin)

    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["optim"]``: folds the new ``train_loss`` points, sets the stride from the window's rate."""
        m = self._m
        if m is None:
            return {}
        m.series_views.catch_up(report.ends)  # the loss up to this report folded (most of it was, ahead of it)
        m.worker.wake()  # from the first report on, the worker folds ahead
        interval = report.interval
        if interval is not None and interval.steps and interval.train_s > 0:
            self._rate_stride = max(1, math.ceil(interval.steps / interval.train_s / self._max_points_per_s))
            if self._rate_stride > self.stride and not self._off:  # a smaller one is taken at the next read
                self.stride = self._rate_stride
                if not m.worker.on_worker_thread():  # the worker leaves the hook to the next read (section 20)
                    m.next_step_hook_at(report.steps + self.stride, self)
        return {"loss_ema": self.ema.to_dict(), "sample_every_steps": self.stride,
                "grad_norm_missing": self.grad_norm_missing()}

    def text_fields(self) -> dict[str, Any]:
        """``loss_ema``: ``(value, window in steps)``, placed beside ``loss`` (docs/spec.md section 7)."""
        ema = self.ema.to_dict()
        return {"loss_ema": (ema["value"], ema["window_steps"])} if ema["value"] is not None else {}

    def grad_norm_missing(self) -> str | None:
        """Why ``grad_norm`` is absent, or ``None`` when it is recorded (or logged by the framework)."""
        m = self._m
        if m is not None and any(name in m.series for name in (GRAD_NORM_SERIES, *GRAD_NORM_ALIASES)):
            return None
        return self.reason if self.reason is not None else self.clip.missing_reason()

    def _lr_names(self) -> list[str]:
        names = list(self._m.series) if self._m is not None else []
        return [n for n in names if n == LR_SERIES or n.startswith((LR_SERIES + "/", LR_SERIES + ".optimizer"))]

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["optim"]``: sources, sampling, the missing reasons and the smoothed loss."""
        m = self._m
        series = m.series if m is not None else {}
        lr_names = self._lr_names()
        grad_source = CLIP_SOURCE if self.clip.norm_calls else None
        if not grad_source and any(name in series for name in (GRAD_NORM_SERIES, *GRAD_NORM_ALIASES)):
            grad_source = "logged by the training framework (taps)"
        return {
            "lr": {"series": lr_names,
                   "source": f"param_groups of the primary optimizer ({self.optimizer_class}) at its step, key "
                   f"{self._key!r}; each other optimizer's at the same step as lr.optimizer<N>" if self._key else None,
                   "optimizers": dict(self.optimizers), "groups": self.groups,
                   "missing": None if lr_names else (self.lr_missing or self.reason or "no optimizer step was seen")},
            "grad_norm": {"series": GRAD_NORM_SERIES if GRAD_NORM_SERIES in series else None,
                          "source": grad_source, "clip_norm_calls": self.clip.norm_calls,
                          "clip_value_calls": self.clip.value_calls, "missing": self.grad_norm_missing(),
                          "patched": list(self.clip.wrapped)},
            "sample_every_steps": self.stride,
            "max_points_per_s": self._max_points_per_s,
            "loss_ema": {**self.ema.to_dict(), "points": self.ema.count, "rule": RULE},
            "rank": self.rank,
        }

    def charts(self) -> list[dict[str, Any]]:
        """Learning rate (log axis while every value is positive) and gradient norm, against the step."""
        m = self._m
        if m is None:
            return []
        out: list[dict[str, Any]] = []
        lr_names = self._lr_names()
        if lr_names:
            out.append({"id": "lr", "title": "learning rate", "x": "step", "unit": "lr", "series": lr_names,
                        "log_y": _positive(m, lr_names)})
        if GRAD_NORM_SERIES in m.series:
            out.append({"id": "grad_norm", "title": "gradient norm", "x": "step", "unit": "",
                        "series": [GRAD_NORM_SERIES], "log_y": _positive(m, [GRAD_NORM_SERIES])})
        return out

    def panels(self) -> list[dict[str, Any]]:
        """An "Optimizer" panel: latest lr and grad_norm, or which input would enable them."""
        m = self._m
        if m is None:
            return []
        lr = _last(m, LR_SERIES, LR_ALIASES)
        grad = _last(m, GRAD_NORM_SERIES, GRAD_NORM_ALIASES)
        every = f"every {self.stride} steps" if self.stride > 1 else "every step"
        rows = [
            {"label": "learning rate", "value": lr, "unit": "lr", "provenance": "detected",
             "note": f"param_groups at the optimizer's step, {every}" if lr is not None
             else (self.lr_missing or self.reason or "no optimizer step yet")},
            {"label": "gradient norm", "value": grad, "unit": "", "provenance": "measured",
             "note": f"{CLIP_SOURCE}, {every}" if grad is not None
             else self.grad_norm_missing()},
        ]
        ema = self.ema.to_dict()
        if ema["value"] is not None:
            rows.append({"label": "loss (EMA)", "value": ema["value"], "unit": "", "provenance": "measured",
                         "note": f"EMA of train_loss over ~{ema['window_steps']:,} steps (5% of the run so far)"})
        return [{"id": "optim", "title": "Optimizer", "rows": rows,
                 "note": "read from what the loop computes; trainmeter adds no device work"}]


def _positive(m: Any, names: list[str]) -> bool:
    lows = [series.stats().min if (series := m.series.get(name)) is not None else None for name in names]
    return all(low is not None and low > 0 for low in lows)


def _last(m: Any, name: str, aliases: tuple[str, ...]) -> float | None:
    lasts = (series.stats().last for candidate in (name, *aliases) if (series := m.series.get(candidate)) is not None)
    return next((last for last in lasts if last is not None), None)
