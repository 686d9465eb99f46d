"""The optimizer extension: ``lr`` and ``grad_norm`` series, the smoothed loss, rank-0 text (docs/spec.md section 2).

Reads every k-th primary optimizer step, k the larger of the rate's stride and the cost's (docs/spec.md section 17;
costs: ``benchmarks/optim_step_hook.py``). Thread safety: hooks and reports on the training thread (a steady report
on the report worker, which also folds the loss EMA ahead); ``panels``/``charts`` read series statistics only.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainmeter.core import host_patches
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.optim.grad_norm import CLIP_SOURCE, GRAD_NORM_SERIES, ClipTap
from trainmeter.optim.smoothing import EMA_BETA, EmaCursor, LossEma

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext
    from trainmeter.core.steps import StepRecorder

LR_SERIES = "lr"  # the first param group's rate; when the groups' rates differ, also lr/<group> (read_lrs)
MAX_POINTS_PER_S = 100.0
_FAR = 1 << 62  # a reader cursor past any point: the series it stands for is never held back
# The share of a step the rate read may take (its stride grows until the read costs no more, docs/spec.md section 2).
MAX_READ_SHARE = 2e-4
READ_EVERY_STEP_UNTIL = 100  # the first steps are read at every step whatever the cost (a short run: every rate)
LOSS_SERIES = "train_loss"
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


def read_lrs(param_groups: Sequence[Any]) -> dict[str, Any]:
    """Return ``{"lr": first group's rate}``, plus ``{"lr/<group>": rate}`` per group when they differ; rates as
    stored (tensor rates are never compared, so such groups are always listed).

    Examples:
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.1}])
        {'lr': 0.1}
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.01, "name": "head"}])
        {'lr': 0.1, 'lr/0': 0.1, 'lr/head': 0.01}
    """
    first = param_groups[0]["lr"]
    out: dict[str, Any] = {LR_SERIES: first}
    if len(param_groups) == 1:
        return out
    rates = [group["lr"] for group in param_groups]
    if all(type(rate) in (float, int) for rate in rates) and all(rate == first for rate in rates):
        return out
    for index, (group, rate) in enumerate(zip(param_groups, rates, strict=True)):
        out[f"{LR_SERIES}/{group_label(group, index)}"] = rate
    return out


class OptimExtension(ExtensionBase):
    """Learning rate, gradient norm and smoothed loss of one run (extension ``"optim"``); ``environ`` is read for
    ``RANK`` (tests pass their own)."""

    name = "optim"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, *, max_points_per_s: float = MAX_POINTS_PER_S, ema_beta: float = EMA_BETA,
                 environ: Any = None) -> None:
        self._m: RunContext | None = None
        self._hot: StepRecorder | None = None  # the run's step state (monitor.steps_state), read at each sampled step
        self._max_points_per_s = max_points_per_s
        self._environ = environ
        self.rank: int | None = None
        self.ema = LossEma(ema_beta)
        self.clip = ClipTap()
        self.stride = 1  # the stride in use: the larger of the rate's and the cost's
        self._rate_stride = 1  # from the last report's step rate (max_points_per_s)
        self._read_s: float | None = None  # the cheapest read timed so far (seconds on the run's clock)
        self._read_at = (0, 0.0)  # the last read's step and step time (seconds since the run's start)
        self._off = False  # disabled by a fault: no more reads
        self._primary: weakref.ReferenceType[Any] | None = None
        self.optimizer_class: str | None = None
        self.groups = 0
        self._handle: Any = None
        self._current: weakref.ReferenceType[Any] | None = None
        self._ema_cursor = EmaCursor(self.ema)
        self._cursor: dict[str, int] = {}  # the EMA's series reader (only train_loss held back)
        self.reason: str | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self, monitor: RunContext) -> None:
        """Install the step pre-hook and the clip wrappers; read ``RANK`` (the core calls :meth:`on_step`)."""
        self._m = monitor
        self._hot = monitor.steps_state
        monitor.worker.every(self.name, lambda: self._ema_cursor.fold_ahead(monitor.series.get(LOSS_SERIES)))
        self._cursor = monitor.add_reader(self._drain)
        self._release()
        self.rank = rank_from_env(self._environ)
        if self.rank not in (None, 0):
            monitor.set_text(False)
        torch = sys.modules.get("torch")
        if torch is None:
            self.reason = "torch is not imported"
            monitor.next_step_hook_at(sys.maxsize, self)  # no optimizer to read: the core never calls on_step
            return
        self._watch_steps()
        self.clip.counter = monitor.steps_state
        try:
            if host_patches.allow("clip-grad", monitor.warn_once):
                self.clip.install(torch)
        except Exception as exc:
            self.clip.remove()
            monitor.warn_once("optim-clip", f"gradient norm capture disabled: {exc!r}")

    def stop(self) -> None:
        """Remove the hook and the wrappers (the core calls no :meth:`on_step` after it). Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.remove()
        self.clip.remove()

    # -- per step ------------------------------------------------------------------
    def _watch_steps(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        if not host_patches.allow("step-hooks", getattr(self._m, "warn_once", None)):
            return
        self._handle = register_optimizer_step_pre_hook(self._before_step)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global step pre-hook until the first counted step: the optimizer whose step is running."""
        try:
            self._current = weakref.ref(optimizer)
        except Exception as exc:  # no stop() here: removing a hook while torch iterates them would raise
            self._current = None
            if self._m is not None:
                self._m.warn_once("optim-pre-step", f"optimizer not identified: {exc!r}")

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
        """Record the primary optimizer's rate (and a clipped norm) at this step, whose time is ``t_s``."""
        try:
            if self._primary is None:
                self._adopt_primary()
            m = self._m
            hot = self._hot
            optimizer = self._primary() if self._primary is not None else None
            if optimizer is None:  # collected: adopt the next one (from its second counted step)
                self._primary = self._current = None
                if self._handle is None:
                    self._watch_steps()
                return
            groups = optimizer.param_groups
            clip = self.clip
            norm = clip.take_at(hot.steps) if clip.pending is not None else None  # type: ignore[union-attr]
            if len(groups) == 1 and norm is None:
                # hot path (docs/spec.md section 17): one group's float rate into its existing series, at the step's time
                lr = groups[0]["lr"]
                series = m.series.get(LR_SERIES) if type(lr) is float else None  # type: ignore[union-attr]
                if series is not None:
                    series.append(hot.steps, t_s, lr)  # type: ignore[union-attr]
                    self.groups = 1
                    return
            values = read_lrs(groups)
            self.groups = len(groups)
            if norm is not None:
                values[GRAD_NORM_SERIES] = norm
            m.record(values)  # type: ignore[union-attr]
        except Exception as exc:
            self._disable(exc)

    def _adopt_primary(self) -> None:
        """The optimizer whose step the core just counted is the primary; its pre-hook goes (safe: called from the
        step post-hooks)."""
        self._primary = self._current
        optimizer = self._primary() if self._primary is not None else None
        if optimizer is None:
            return
        self.optimizer_class = type(optimizer).__name__
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def _disable(self, exc: BaseException) -> None:
        self._off = True
        self.stop()
        if self._m is not None:
            self._m.next_step_hook_at(sys.maxsize, self)  # no more on_step calls
            self._m.warn_once("optim-step", f"learning rate and gradient norm capture disabled: {exc!r}")

    def view(self) -> EmaCursor:
        """The loss EMA's fold, shared with the widget's ``train_loss.ema`` trace (widget/smoothed.py)."""
        return self._ema_cursor

    def _drain(self, ends: dict[str, int]) -> None:
        """Between reports, when the series hold many points: fold the loss up to ``ends`` (report worker)."""
        m = self._m
        series = m.series.get(LOSS_SERIES) if m is not None else None
        if series is not None:
            self._ema_cursor.settle(series, ends.get(LOSS_SERIES, 0))
        self._release()

    def _release(self) -> None:
        """Let the core trim every point the EMA no longer needs (the EMA reads train_loss only)."""
        m = self._m
        if m is None:
            return
        cursor = self._cursor
        for name in [m.step_series.name, *list(m.series)]:
            cursor[name] = self._ema_cursor.needed_from if name == LOSS_SERIES else _FAR

    # -- reports ---------------------------------------------------------------------
    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["optim"]``: folds the new ``train_loss`` points, sets the stride from the window's rate."""
        m = self._m
        if m is None:
            return {}
        series = m.series.get(LOSS_SERIES)
        if series is not None:
            # not a registered reader: the core trims only after this report's writes, so no point is missed;
            # the report worker folded most points already (smoothing.EmaCursor, docs/spec.md section 20)
            self._ema_cursor.fold_to_end(series, report.ends.get(LOSS_SERIES) if report.ends else None)
            m.worker.wake()  # from the first report on, the worker folds ahead
        self._release()
        interval = report.interval
        if interval is not None and interval.steps and interval.train_s > 0:
            rate = interval.steps / interval.train_s
            self._rate_stride = max(1, math.ceil(rate / self._max_points_per_s))
            if self._rate_stride > self.stride and not self._off:  # a smaller one is taken at the next read
                self.stride = self._rate_stride
                if not m.worker.on_worker_thread():  # the worker leaves the hook to the next read (section 20)
                    m.next_step_hook_at(report.steps + self.stride, self)
        return {"loss_ema": self.ema.value, "sample_every_steps": self.stride,
                "grad_norm_missing": self.grad_norm_missing()}

    def text_fields(self) -> dict[str, Any]:
        """``loss_ema`` (a float; placed beside ``loss``)."""
        return {"loss_ema": self.ema.value} if self.ema.value is not None else {}

    def grad_norm_missing(self) -> str | None:
        """Why ``grad_norm`` is absent, or ``None`` when it is recorded (or logged by the framework)."""
        m = self._m
        if m is not None and any(name in m.series for name in (GRAD_NORM_SERIES, *GRAD_NORM_ALIASES)):
            return None
        return self.reason if self.reason is not None else self.clip.missing_reason()

    def _lr_names(self) -> list[str]:
        names = list(self._m.series) if self._m is not None else []
        return [n for n in names if n == LR_SERIES or n.startswith(LR_SERIES + "/")]

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
                   "source": f"param_groups of the primary optimizer ({self.optimizer_class}) at its step"
                   if self.optimizer_class else None,
                   "groups": self.groups,
                   "missing": None if lr_names else (self.reason or "no optimizer step was seen")},
            "grad_norm": {"series": GRAD_NORM_SERIES if GRAD_NORM_SERIES in series else None,
                          "source": grad_source, "clip_norm_calls": self.clip.norm_calls,
                          "clip_value_calls": self.clip.value_calls, "missing": self.grad_norm_missing(),
                          "patched": list(self.clip.wrapped)},
            "sample_every_steps": self.stride,
            "max_points_per_s": self._max_points_per_s,
            "loss_ema": {"value": self.ema.value, "beta": self.ema.beta, "steps": self.ema.count},
            "rank": self.rank,
        }

    # -- widget ------------------------------------------------------------------------
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
             else (self.reason or "no optimizer step yet")},
            {"label": "gradient norm", "value": grad, "unit": "", "provenance": "measured",
             "note": f"{CLIP_SOURCE}, {every}" if grad is not None
             else self.grad_norm_missing()},
        ]
        ema = self.ema.value
        if ema is not None:
            rows.append({"label": "loss (EMA)", "value": ema, "unit": "", "provenance": "measured",
                         "note": f"bias-corrected EMA of train_loss, beta {self.ema.beta}"})
        return [{"id": "optim", "title": "Optimizer", "rows": rows,
                 "note": "read from what the loop computes; trainmeter adds no device work"}]


def _positive(m: Any, names: list[str]) -> bool:
    lows = [series.stats().min if (series := m.series.get(name)) is not None else None for name in names]
    return all(low is not None and low > 0 for low in lows)


def _last(m: Any, name: str, aliases: tuple[str, ...]) -> float | None:
    lasts = (series.stats().last for candidate in (name, *aliases) if (series := m.series.get(candidate)) is not None)
    return next((last for last in lasts if last is not None), None)
