"""Checkpoint spans: each outermost save is one ``checkpoint`` span and one passport.json ``checkpoints`` record.

A part of the time split (:class:`~trainmeter.timesplit.extension.TimeSplit`); the savers it
wraps are :mod:`~trainmeter.timesplit.savers`' table (docs/spec.md section 11, "Checkpoints").
A save inside an open eval span pauses the span. Training thread (the split's gate).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from trainmeter.timesplit import savers


class CheckpointSpans:
    """The saver wrappers and the records (a part of the time split). Training thread."""

    _ckpt_depth: int
    _eval_open: bool
    checkpoint_saves: int
    checkpoints: list[dict[str, Any]]

    def _patch_savers(self, sites: list[savers.SaverSite], module: ModuleType) -> None:
        if not self._gate.active:
            return
        for site in sites:
            owner: Any = getattr(module, site.owner, None) if site.owner else module
            if owner is not None and (not site.owner or isinstance(owner, type)):
                label = f"{site.module}.{site.owner + '.' if site.owner else ''}{site.attr}"
                self._wrap(owner, site.attr, functools.partial(self._make_saver, site), label)

    def _make_saver(self, site: savers.SaverSite | None, original: Any) -> Any:
        split = self

        @functools.wraps(original)
        def saver(*args: Any, **kwargs: Any) -> Any:
            if split._ckpt_depth or not split._gate.here():
                return original(*args, **kwargs)
            in_eval = split._eval_open
            if in_eval:
                split._exit()  # the eval span pauses: the save is checkpoint time
            entered = split._enter("checkpoint")
            split._ckpt_depth += 1
            result = None
            t0_s = split._monitor.clock() if split._monitor is not None else None
            try:
                result = original(*args, **kwargs)
                return result
            finally:
                split._ckpt_depth -= 1
                if entered:
                    seconds = split._monitor.clock() - t0_s if split._monitor is not None and t0_s is not None else None
                    split.checkpoint_saves += 1
                    split._exit()
                    split._note_checkpoint(site, args, kwargs, result, seconds)
                if in_eval and split._eval_open:
                    split._enter("eval")  # the same span goes on

        return saver

    def _note_checkpoint(self, site: savers.SaverSite | None, args: Any, kwargs: Any, result: Any,
                         seconds: float | None) -> None:
        """One record per outermost save (after its span closed: the size is read outside the span)."""
        try:
            if len(self.checkpoints) >= savers.MAX_RECORDS or self._monitor is None:
                return
            if getattr(getattr(self._monitor, "controls", None), "saving", False):
                return  # tm.checkpoint()'s own save: core/controls.py records it, with its final path
            where = site.where(args, kwargs, result) if site is not None else savers.torch_save_path(args, kwargs)
            source = site.source if site is not None else savers.TORCH_SAVE_SOURCE
            self.checkpoints.append(savers.record(where, self._monitor.steps, seconds, source))
        except Exception as exc:
            self._warn("time-checkpoint-record", f"checkpoint records disabled: {exc!r}")

