"""The fastai adapter: ``Learner.fit`` (``fit_one_cycle`` and friends go through it) gets trainmeter's callback
(docs/spec.md section 11). Training thread.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from trainmeter.core import explicit_steps
from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl


class FastaiControl(FrameworkControl):
    """A fastai ``Learner``: the adapter's callback raises ``CancelFitException`` at the batch end."""

    name, saver, absolute = "fastai", "save", True


def torch_optimizer(opt: Any) -> bool:
    """Whether a fastai learner's optimizer is a torch one (``OptimWrapper``): its steps are hooked already."""
    torch = sys.modules.get("torch")
    return torch is not None and opt is not None and isinstance(getattr(opt, "opt", opt), torch.optim.Optimizer)


@functools.cache
def _callback_class() -> type:
    from fastai.callback.core import Callback, CancelFitException

    class TrainmeterFastaiCallback(Callback):
        """trainmeter's step source and stop in ``Learner.fit`` (removed with the fit)."""

        order = 100  # after the learner's own callbacks (Recorder is 50)
        run_valid = False

        def __init__(self, adapter: FastaiAdapter) -> None:
            self._adapter = adapter
            self._counts_steps = False

        def before_fit(self) -> None:  # the learner's optimizer exists now: is it fastai's own?
            self._counts_steps = not torch_optimizer(getattr(self.learn, "opt", None))
            monitor = self._adapter.wing.monitor
            if self._counts_steps and monitor is not None:  # the model watched from its first batch
                explicit_steps.stepper(monitor, "fastai", self.learn.model)

        def after_step(self) -> None:
            if self._counts_steps:
                hypers = getattr(getattr(self.learn, "opt", None), "hypers", None)  # its groups' rates this step
                rate = hypers[0].get("lr") if hypers else None
                explicit_steps.hold_rate(self._adapter.wing.monitor, "fastai", self.learn.model,
                                         rate if isinstance(rate, (int, float)) else None)
                self._adapter.wing.framework_step("fastai", self.learn.model)

        def after_batch(self) -> None:
            if self._adapter.wing.stop_requested("fastai"):
                raise CancelFitException()

        def after_epoch(self) -> None:  # the Recorder (order 50) has written the epoch's row
            recorder = getattr(self.learn, "recorder", None)
            names, row = getattr(recorder, "metric_names", None), getattr(recorder, "log", None)
            if names is not None and row is not None:
                self._adapter.wing.framework_logs("fastai", dict(zip(list(names), list(row), strict=False)))

    return TrainmeterFastaiCallback


class FastaiAdapter(Adapter):
    """``fastai.learner.Learner.fit``."""

    framework = "fastai"
    control = FastaiControl
    sites = (Site(module="fastai.learner", owner="Learner", attr="fit", callbacks_at=3, callbacks_name="cbs"),
             Site(module="fastai.learner", owner="Learner", attr="_do_epoch_validate", fit=False,
                  phase="eval"))
    steps_at = "train_iter"

    def callback(self) -> Any:
        """A fastai ``Callback``: ``after_step`` counts a step (unless a torch optimizer does), ``after_batch`` stops."""
        return _callback_class()(self)
