"""Checkpoint spans: each outermost save is one ``checkpoint`` span and one passport.json ``checkpoints`` record.

An object the time split (:class:`~trainmeter.timesplit.extension.TimeSplit`) owns; the savers it wraps are
:mod:`~trainmeter.timesplit.savers`' table (docs/spec.md section 11, "Checkpoints"). A save inside an open eval span
pauses the span. Training thread (the split's gate).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainmeter.timesplit import savers

if TYPE_CHECKING:
    from trainmeter.timesplit.extension import TimeSplit


class CheckpointSpans:
    """The saver wrappers of the time split ``split`` and their records. Training thread."""

    def __init__(self, split: TimeSplit) -> None:
        self._split = split
        self.depth = 0  # nesting of saves in progress (the outermost one is the checkpoint)
        self.saves = 0
        self.records: list[dict[str, Any]] = []  # passport.json checkpoints (savers.record)

    def patch(self, sites: list[savers.SaverSite], module: ModuleType) -> None:
        """Wrap the savers of ``sites`` in ``module``, just imported."""
        split = self._split
        if not split.gate.active:
            return
        for site in sites:
            owner: Any = getattr(module, site.owner, None) if site.owner else module
            if owner is not None and (not site.owner or isinstance(owner, type)):
                label = f"{site.module}.{site.owner + '.' if site.owner else ''}{site.attr}"
                split.wrap(owner, site.attr, functools.partial(self.make_saver, site), label)

    def make_saver(self, site: savers.SaverSite, original: Any) -> Any:
        """The wrapper of ``site``'s saver ``original``: the outermost save is a checkpoint span and a record."""
        spans, split = self, self._split

        @functools.wraps(original)
        def saver(*args: Any, **kwargs: Any) -> Any:
            if spans.depth or not split.gate.here():
                return original(*args, **kwargs)
            in_eval = split.eval_open
            if in_eval:
                split.exit_span()  # the eval span pauses: the save is checkpoint time
            entered = split.enter_span("checkpoint")
            spans.depth += 1
            result = None
            monitor = split.monitor
            t0_s = monitor.clock() if monitor is not None else None
            try:
                result = original(*args, **kwargs)
                return result
            finally:
                spans.depth -= 1
                if entered:
                    seconds = monitor.clock() - t0_s if monitor is not None and t0_s is not None else None
                    spans.saves += 1
                    split.exit_span()
                    spans._note(site, args, kwargs, result, seconds)
                if in_eval and split.eval_open:
                    split.enter_span("eval")  # the same span goes on

        return saver

    def _note(self, site: savers.SaverSite, args: Any, kwargs: Any, result: Any, seconds: float | None) -> None:
        """One record per outermost save (after its span closed: the size is read outside the span)."""
        monitor = self._split.monitor
        try:
            if len(self.records) >= savers.MAX_RECORDS or monitor is None:
                return
            if getattr(getattr(monitor, "controls", None), "saving", False):
                return  # tm.checkpoint()'s own save: core/controls.py records it, with its final path
            self.records.append(savers.record(site.where(args, kwargs, result), monitor.steps, seconds, site.source))
        except Exception as exc:
            self._split.warn("time-checkpoint-record", f"checkpoint records disabled: {exc!r}")
