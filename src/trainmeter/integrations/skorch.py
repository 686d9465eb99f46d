"""The skorch adapter: ``NeuralNet.fit_loop`` (``fit`` and ``partial_fit`` go through it) gets trainmeter's callback
(each training batch's X counted, its epochs recorded, its stop), and ``run_single_epoch`` over the validation set is
an eval span (docs/spec.md sections 9 and 11). Training thread.
"""

from __future__ import annotations

import functools
from typing import Any

from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl

NAME = "trainmeter"  # our entry's name in ``net.callbacks_``
NOT_SERIES = ("dur",)  # skorch's epoch time: trainmeter measures time itself


class SkorchControl(FrameworkControl):
    """A skorch ``NeuralNet``: the adapter's callback raises skorch's own stop at the batch end; ``save_params``."""

    name, saver, suffix = "skorch", "save_params", ".pt"


def epoch_values(row: Any) -> dict[str, Any]:
    """One row of skorch's ``net.history`` (``train_loss``, ``valid_loss``, ``valid_acc``, ...) without ``dur`` and
    the ``*_batch_count`` (the wing leaves out ``epoch``, the ``batches`` list and the ``*_best`` flags)."""
    return {k: v for k, v in row.items() if k not in NOT_SERIES and not k.endswith("_batch_count")}


def train_batches(rows: Any) -> int:
    """Training batches in ``rows`` of skorch's history: each holds a ``train_loss`` (one optimizer step each)."""
    return sum(1 for row in rows for batch in row.get("batches", ()) if "train_loss" in batch)


@functools.cache
def _callback_class() -> type:
    from skorch.callbacks import Callback

    class TrainmeterSkorchCallback(Callback):
        """trainmeter's epoch series and stop in ``NeuralNet.fit_loop`` (removed with it)."""

        def __init__(self, adapter: SkorchAdapter) -> None:
            self._adapter = adapter

        def __reduce__(self) -> Any:  # a net pickled mid-fit (Checkpoint's f_pickle) carries a plain callback
            return (Callback, ())

        def on_batch_begin(self, net: Any, batch: Any = None, training: Any = None, **kwargs: Any) -> None:
            if training:  # the batch's X, counted in the module's calls' stead (docs/spec.md section 2)
                X = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
                self._adapter.wing.framework_batch("skorch", "on_batch_begin X", X)

        def on_batch_end(self, net: Any, batch: Any = None, training: Any = None, **kwargs: Any) -> None:
            if training:
                self._adapter.wing.framework_batch("skorch", "on_batch_begin X", None)
                if self._adapter.wing.stop_requested("skorch"):
                    raise KeyboardInterrupt  # skorch's own stop (EarlyStopping's): partial_fit catches it

        def on_epoch_end(self, net: Any, **kwargs: Any) -> None:  # after the scoring callbacks wrote the row
            self._adapter.epochs_ended(net)

    return TrainmeterSkorchCallback


def _validation(adapter: Adapter, net: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """skorch's validation loop inside a fit: ``run_single_epoch(iterator, training=False, ...)``."""
    return bool(adapter.wing.depth) and not kwargs.get("training", args[1] if len(args) > 1 else True)


class SkorchAdapter(Adapter):
    """``skorch.net.NeuralNet.fit_loop`` and ``run_single_epoch``."""

    framework = "skorch"
    control = SkorchControl
    sites = (Site(module="skorch.net", owner="NeuralNet", attr="fit_loop"),
             Site(module="skorch.net", owner="NeuralNet", attr="run_single_epoch", fit=False, phase="eval",
                  when=_validation))

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self._first_epoch = 0  # the fit's first row of net.history
        self._logged = 0  # rows of net.history recorded as series

    def begin(self, site: Site, target: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        """Our callback joins the net's initialized callbacks, last (a new list: the user's is unchanged); an
        uninitialized net is left to skorch's own error."""
        if not getattr(target, "initialized_", False):
            return args, kwargs, None
        self._first_epoch = self._logged = len(target.history)
        extra = _callback_class()(self)
        target.callbacks_ = [*target.callbacks_, (NAME, extra)]
        return args, kwargs, extra

    def end(self, target: Any, extra: Any) -> None:
        """Our callback leaves; an epoch whose end a callback before ours stopped (``EarlyStopping``) is recorded."""
        if extra is None:
            return
        self.wing.framework_batch("skorch", "on_batch_begin X", None)  # a batch a fault ended is over
        target.callbacks_ = [entry for entry in target.callbacks_ if entry[1] is not extra]
        self.epochs_ended(target)

    def epochs_ended(self, net: Any) -> None:
        """Record the rows of ``net.history`` not recorded yet, each epoch's values as series."""
        rows, self._logged = net.history[self._logged:], len(net.history)
        for row in rows:
            self.wing.framework_logs("skorch", epoch_values(row))

    def own_steps(self, target: Any) -> int | None:
        """skorch's own count: the fit's training batches in ``net.history`` (each one optimizer step)."""
        try:
            return train_batches(target.history[self._first_epoch:])
        except Exception:
            return None
