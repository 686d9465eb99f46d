"""Checkpoints: the savers the time split wraps, where each writes, and a span and a record per outermost save.

Each :class:`SaverSite` is one saver, patched where callers look it up (docs/spec.md section 11, "Checkpoints"); a
save inside an open eval span pauses the span. Thread safety: the training thread (the split's gate).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainmeter.core.controls import size_bytes

if TYPE_CHECKING:
    from trainmeter.timesplit.extension import TimeSplit

MAX_RECORDS = 1000  # checkpoint records kept (the count goes on)

Where = Callable[[tuple[Any, ...], dict[str, Any], Any], Any]


def _arg(index: int, name: str) -> Where:
    return lambda args, kwargs, result: args[index] if len(args) > index else kwargs.get(name)


def _result(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    return result


def _hf_checkpoint(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    trainer = args[0]
    return os.path.join(str(trainer.args.output_dir), f"checkpoint-{trainer.state.global_step}")


def _hf_save_model(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    given = args[1] if len(args) > 1 else kwargs.get("output_dir")
    return given if given is not None else args[0].args.output_dir


def _dcp(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    given = kwargs.get("checkpoint_id")
    if given is None:
        given = getattr(kwargs.get("storage_writer"), "path", None)
    return given


def _accelerate_state(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    return result if isinstance(result, (str, os.PathLike)) else (args[1] if len(args) > 1
                                                                   else kwargs.get("output_dir"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SaverSite:
    """One saver: ``attr`` of class ``owner`` (``""``: a function) in ``module`` (wrapped once imported); ``where`` is
    ``(args, kwargs, result) -> path`` (``args`` with ``self`` first for a method)."""

    module: str
    owner: str
    attr: str
    source: str
    where: Where


SITES: tuple[SaverSite, ...] = (
    SaverSite(module="safetensors.torch", owner="", attr="save_file", source="safetensors", where=_arg(1, "filename")),
    SaverSite(module="safetensors.torch", owner="", attr="save_model", source="safetensors", where=_arg(1, "filename")),
    SaverSite(module="transformers.modeling_utils", owner="PreTrainedModel", attr="save_pretrained",
              source="transformers save_pretrained", where=_arg(1, "save_directory")),
    SaverSite(module="transformers.trainer", owner="Trainer", attr="_save_checkpoint",
              source="transformers Trainer checkpoint", where=_hf_checkpoint),
    SaverSite(module="transformers.trainer", owner="Trainer", attr="save_model",
              source="transformers Trainer.save_model", where=_hf_save_model),
    SaverSite(module="peft.peft_model", owner="PeftModel", attr="save_pretrained", source="peft save_pretrained",
              where=_arg(1, "save_directory")),
    SaverSite(module="accelerate.accelerator", owner="Accelerator", attr="save_state", source="accelerate save_state",
              where=_accelerate_state),
    SaverSite(module="accelerate.accelerator", owner="Accelerator", attr="save_model", source="accelerate save_model",
              where=_arg(2, "save_directory")),
    *(SaverSite(module=module, owner="", attr=attr, source=source, where=_dcp)
      for module in ("torch.distributed.checkpoint", "torch.distributed.checkpoint.state_dict_saver")
      for attr, source in (("save", "torch.distributed.checkpoint"),
                           ("async_save", "torch.distributed.checkpoint (async: the blocking part)"))),
    SaverSite(module="lightning.pytorch.trainer.trainer", owner="Trainer", attr="save_checkpoint",
              source="lightning save_checkpoint", where=_arg(1, "filepath")),
    SaverSite(module="pytorch_lightning.trainer.trainer", owner="Trainer", attr="save_checkpoint",
              source="lightning save_checkpoint", where=_arg(1, "filepath")),
    SaverSite(module="keras.src.models.model", owner="Model", attr="save", source="keras Model.save",
              where=_arg(1, "filepath")),
    SaverSite(module="keras.src.models.model", owner="Model", attr="save_weights", source="keras Model.save_weights",
              where=_arg(1, "filepath")),
    SaverSite(module="fastai.learner", owner="Learner", attr="save", source="fastai Learner.save", where=_result),
)
TORCH_SAVE = SaverSite(module="torch.serialization", owner="", attr="save", source="torch.save", where=_arg(1, "f"))
"""``torch.save``: wrapped at start (torch is imported by then), and bound as ``torch.save`` too."""


def describe(where: Any) -> str:
    """The record's ``path``: the path as given, or what a stream is (``<BytesIO>``)."""
    if isinstance(where, (str, bytes, os.PathLike)):
        path = os.fspath(where)
        return path.decode(errors="replace") if isinstance(path, bytes) else path
    if where is None:
        return "<unknown>"
    return f"<{type(where).__name__}>"


def record(where: Any, step: int, seconds: float | None, source: str) -> dict[str, Any]:
    """One ``checkpoints`` entry."""
    return {"path": describe(where), "step": int(step), "bytes": size_bytes(where), "seconds": seconds,
            "source": source}


class CheckpointSpans:
    """The saver wrappers of the time split ``split`` and their records. Training thread."""

    def __init__(self, split: TimeSplit) -> None:
        self._split = split
        self.depth = 0  # nesting of saves in progress (the outermost one is the checkpoint)
        self.saves = 0
        self.records: list[dict[str, Any]] = []  # passport.json checkpoints (record)

    def patch(self, sites: list[SaverSite], module: ModuleType) -> None:
        """Wrap the savers of ``sites`` in ``module``, just imported."""
        split = self._split
        if not split.gate.active:
            return
        for site in sites:
            owner: Any = getattr(module, site.owner, None) if site.owner else module
            if owner is not None and (not site.owner or isinstance(owner, type)):
                label = f"{site.module}.{site.owner + '.' if site.owner else ''}{site.attr}"
                split.wrap(owner, site.attr, functools.partial(self.make_saver, site), label)

    def make_saver(self, site: SaverSite, original: Any) -> Any:
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

    def _note(self, site: SaverSite, args: Any, kwargs: Any, result: Any, seconds: float | None) -> None:
        """One record per outermost save (after its span closed: the size is read outside the span)."""
        monitor = self._split.monitor
        try:
            if len(self.records) >= MAX_RECORDS or monitor is None:
                return
            if getattr(getattr(monitor, "controls", None), "saving", False):
                return  # tm.checkpoint()'s own save: core/controls.py records it, with its final path
            self.records.append(record(site.where(args, kwargs, result), monitor.steps, seconds, site.source))
        except Exception as exc:
            self._split.warn("time-checkpoint-record", f"checkpoint records disabled: {exc!r}")
