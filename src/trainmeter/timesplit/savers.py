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

from trainmeter.core.checkpoint_files import size_bytes

if TYPE_CHECKING:
    from trainmeter.timesplit.extension import TimeSplit

MAX_RECORDS = 1000  # checkpoint records kept (the count goes on)
STREAM_NOTE = ("the file its bytes reach later is not seen (open() is not patched); pass the save a path or an open "
               "file to record the file, its size and the write's time")

Where = Callable[[tuple[Any, ...], dict[str, Any], Any], Any]


def _arg(index: int, name: str) -> Where:
    return lambda args, kwargs, result: args[index] if len(args) > index else kwargs.get(name)


def _hf_checkpoint(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    trainer = args[0]
    return os.path.join(str(trainer.args.output_dir), f"checkpoint-{trainer.state.global_step}")


def _hf_save_model(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    given = args[1] if len(args) > 1 else kwargs.get("output_dir")
    return given if given is not None else args[0].args.output_dir


def _dcp(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    given = kwargs.get("checkpoint_id")
    return given if given is not None else getattr(kwargs.get("storage_writer"), "path", None)


def _accelerate_state(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    return result if isinstance(result, (str, os.PathLike)) else (args[1] if len(args) > 1
                                                                   else kwargs.get("output_dir"))


def _inner(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    return None  # the saver writes through savers nested in it: the record takes their files


def _sb3_zip(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    given = _arg(1, "path")(args, kwargs, result)  # stable-baselines3 adds ".zip" to a path with no suffix
    if isinstance(given, (str, os.PathLike)) and not os.path.splitext(os.fspath(given))[1]:
        return f"{os.fspath(given)}.zip"
    return given


def _ignite_disk(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    filename = _arg(2, "filename")(args, kwargs, result)
    return os.path.join(os.fspath(args[0].dirname), filename) if isinstance(filename, str) else None


@dataclass(frozen=True, slots=True)
class SaverSite:
    """One saver: ``attr`` of class ``owner`` (``""``: a function) in ``module`` (wrapped once imported); ``where`` is
    ``(args, kwargs, result) -> path`` (``args`` with ``self`` first for a method)."""

    module: str
    owner: str
    attr: str
    source: str
    where: Where


SITES: tuple[SaverSite, ...] = (  # module, owner ("": a function), attr, source, where
    SaverSite("safetensors.torch", "", "save_file", "safetensors", _arg(1, "filename")),
    SaverSite("safetensors.torch", "", "save_model", "safetensors", _arg(1, "filename")),
    SaverSite("transformers.modeling_utils", "PreTrainedModel", "save_pretrained", "transformers save_pretrained",
              _arg(1, "save_directory")),
    SaverSite("transformers.trainer", "Trainer", "_save_checkpoint", "transformers Trainer checkpoint", _hf_checkpoint),
    SaverSite("transformers.trainer", "Trainer", "save_model", "transformers Trainer.save_model", _hf_save_model),
    SaverSite("peft.peft_model", "PeftModel", "save_pretrained", "peft save_pretrained", _arg(1, "save_directory")),
    SaverSite("accelerate.accelerator", "Accelerator", "save_state", "accelerate save_state", _accelerate_state),
    SaverSite("accelerate.accelerator", "Accelerator", "save_model", "accelerate save_model", _arg(2, "save_directory")),
    *(SaverSite(module, "", attr, source, _dcp)
      for module in ("torch.distributed.checkpoint", "torch.distributed.checkpoint.state_dict_saver")
      for attr, source in (("save", "torch.distributed.checkpoint"),
                           ("async_save", "torch.distributed.checkpoint (async: the blocking part)"))),
    *(SaverSite(f"{package}.trainer.trainer", "Trainer", "save_checkpoint", "lightning save_checkpoint",
                _arg(1, "filepath")) for package in ("lightning.pytorch", "pytorch_lightning")),
    SaverSite("keras.src.models.model", "Model", "save", "keras Model.save", _arg(1, "filepath")),
    SaverSite("keras.src.models.model", "Model", "save_weights", "keras Model.save_weights", _arg(1, "filepath")),
    SaverSite("fastai.learner", "Learner", "save", "fastai Learner.save", lambda args, kwargs, result: result),
    SaverSite("lightning.fabric.fabric", "Fabric", "save", "lightning Fabric.save", _arg(1, "path")),
    SaverSite("skorch.net", "NeuralNet", "save_params", "skorch save_params", _inner),
    SaverSite("skorch.callbacks.training", "Checkpoint", "save_model", "skorch Checkpoint", _inner),
    SaverSite("skorch.history", "History", "to_file", "skorch History.to_file", _arg(1, "f")),
    SaverSite("stable_baselines3.common.base_class", "BaseAlgorithm", "save", "stable-baselines3 save", _sb3_zip),
    SaverSite("ignite.handlers.checkpoint", "Checkpoint", "__call__", "ignite Checkpoint", _inner),
    SaverSite("ignite.handlers.checkpoint", "DiskSaver", "__call__", "ignite DiskSaver", _ignite_disk),
)
TORCH_SAVE = SaverSite("torch.serialization", "", "save", "torch.save", _arg(1, "f"))
"""``torch.save``: wrapped at start (torch is imported by then), and bound as ``torch.save`` too."""


def path_of(where: Any) -> str | None:
    """The file a saver wrote: a path as given, a file object's ``name``; ``None`` for a stream (never its repr)."""
    name = where if isinstance(where, (str, bytes, os.PathLike)) else getattr(where, "name", None)
    if not isinstance(name, (str, bytes, os.PathLike)):
        return None  # a buffer, a temp file's descriptor, a zip member: no file of its own
    path = os.fspath(name)
    return path.decode(errors="replace") if isinstance(path, bytes) else path


def located(where: Any, written: tuple[Any, ...] = ()) -> tuple[str | None, int | None] | None:
    """``(path as given, bytes)`` of what a save wrote: the saver's own path, else the files its nested saves wrote and
    left (one file, or their folder with their sizes summed); ``None``: it wrote nothing seen."""
    path = path_of(where)
    files = [] if path is not None else list(dict.fromkeys(p for p in map(path_of, written) if p is not None))
    if not files:  # its own path or a stream; none for a saver that decided not to save (Ignite's Checkpoint)
        return None if path is None and where is None and not written else (path, size_bytes(path))
    files = [f for f in files if os.path.exists(f)] or files  # a temp file renamed to the final one is gone
    sizes = [size_bytes(f) for f in files]
    size = None if None in sizes else sum(sizes)  # type: ignore[arg-type]
    return files[0] if len(files) == 1 else os.path.commonpath([os.path.abspath(f) for f in files]), size


def entry(found: tuple[str | None, int | None], step: int, seconds: float | None, source: str,
          run_dir: Any = None) -> dict[str, Any]:
    """One ``checkpoints`` entry of ``found`` (:func:`located`), its path relative to ``run_dir`` when inside it; a
    stream's says why it has no file (docs/spec.md section 9)."""
    path, size = found
    if path is not None and run_dir is not None:
        full, root = os.path.abspath(path), os.path.abspath(os.fspath(run_dir))
        path = os.path.relpath(full, root) if os.path.commonpath([full, root]) == root else path
    out = {"path": path, "step": int(step), "bytes": size, "seconds": seconds, "source": source}
    return out if path is not None else {**out, "note": STREAM_NOTE}


def _log(monitor: Any, record: dict[str, Any], renamed_from: str | None = None) -> None:
    """``record`` into the run log now (the record sink's ``checkpoint`` record), for a killed run's resume."""
    write = getattr(monitor.record_sink, "write_checkpoint", None)
    if write is not None:
        write(record, renamed_from)


class CheckpointSpans:
    """The saver wrappers of the time split ``split`` and their records. Training thread."""

    def __init__(self, split: TimeSplit) -> None:
        self._split = split
        self.depth = 0  # nesting of saves in progress (the outermost one is the checkpoint)
        self.saves = 0
        self.records: list[dict[str, Any]] = []  # passport.json checkpoints (record)
        self._written: list[Any] = []  # where the saves nested in the outermost one wrote
        self._renamable: tuple[int, str, int] | None = None  # the last record's (index, absolute path, step)

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
        """The wrapper of ``site``'s saver ``original``: the outermost save is a checkpoint span and a record, the
        saves nested in it say which files it wrote."""
        spans, split = self, self._split

        @functools.wraps(original)
        def saver(*args: Any, **kwargs: Any) -> Any:
            if not split.gate.here():
                return original(*args, **kwargs)
            if spans.depth:
                result = original(*args, **kwargs)
                spans._nested(site, args, kwargs, result)
                return result
            return spans._span(original, args, kwargs, lambda _ok, result, seconds: spans._note(
                site, args, kwargs, result, seconds, tuple(spans._written)))

        return saver

    def make_renamer(self, original: Any) -> Any:
        """The wrapper of ``os.replace``/``os.rename`` (``Path.replace``/``rename`` call them): the file the last
        record wrote, renamed before the next optimizer step (a temp file, then a rename), moves that record to the
        final file, the rename's time added (docs/spec.md section 9); any other call costs one attribute read."""
        spans, split = self, self._split

        @functools.wraps(original)
        def rename(*args: Any, **kwargs: Any) -> Any:
            if (spans._renamable is None or spans.depth or kwargs or len(args) != 2 or not split.gate.here()
                    or not spans._renames(args[0])):
                return original(*args, **kwargs)
            return spans._span(original, args, kwargs,
                               lambda ok, _result, seconds: spans._moved(args[1], seconds) if ok else None)

        return rename

    def _span(self, original: Any, args: Any, kwargs: Any, done: Callable[[bool, Any, float], None]) -> Any:
        """``original(*args, **kwargs)`` as checkpoint time (an open span paused for it), then ``done(ok, result,
        seconds)`` once its span closed (``ok``: it returned; a save that raised is recorded too)."""
        split = self._split
        paused = split.pause_span()  # an eval (or other) span pauses: the save is checkpoint time
        entered = split.enter_span("checkpoint")
        self.depth += 1
        ok, result, clock = False, None, split.monitor.clock
        t0_s = clock()
        try:
            result = original(*args, **kwargs)
            ok = True
            return result
        finally:
            self.depth -= 1
            if entered:
                seconds = clock() - t0_s
                split.exit_span()
                done(ok, result, seconds)
            self._written = []  # never holds the user's buffers past the save
            split.resume_span(paused)  # the same span goes on

    def _nested(self, site: SaverSite, args: Any, kwargs: Any, result: Any) -> None:
        try:
            if len(self._written) < MAX_RECORDS:
                self._written.append(site.where(args, kwargs, result))
        except Exception as exc:
            self._split.monitor.warn_once("time-checkpoint-record", f"a nested save's path not read: {exc!r}")

    def _note(self, site: SaverSite, args: Any, kwargs: Any, result: Any, seconds: float | None,
              written: tuple[Any, ...]) -> None:
        """One record per outermost save that wrote something (after its span closed: sizes read outside it)."""
        monitor = self._split.monitor
        self._renamable = None
        try:
            if getattr(getattr(monitor, "controls", None), "saving", False):
                self.saves += 1
                return  # tm.checkpoint()'s own save: core/controls.py records it, with its final path
            found = located(site.where(args, kwargs, result), written)
            if found is None:
                return
            self.saves += 1
            record = entry(found, monitor.steps, seconds, site.source, monitor.run_dir)
            _log(monitor, record)
            if len(self.records) < MAX_RECORDS:
                self.records.append(record)
                if found[0] is not None:
                    self._renamable = (len(self.records) - 1, os.path.abspath(found[0]), monitor.steps)
        except Exception as exc:
            self._split.monitor.warn_once("time-checkpoint-record", f"checkpoint records disabled: {exc!r}")

    def _renames(self, source: Any) -> bool:
        """Whether renaming ``source`` now moves the last record's file (the step it was written at)."""
        try:
            _index, full, step = self._renamable or (0, None, None)
            if self._split.monitor.steps != step:
                self._renamable = None  # a step since: the next renames cost one attribute read
                return False
            return os.path.abspath(os.fsdecode(source)) == full
        except Exception:  # a descriptor, an odd path: not a recorded file
            return False

    def _moved(self, target: Any, seconds: float | None) -> None:
        """The last record now names ``target``, its size, and its time with the rename's ``seconds``."""
        monitor = self._split.monitor
        try:
            if self._renamable is None:
                return
            index, self._renamable = self._renamable[0], None
            old = self.records[index]
            path = os.fsdecode(target)
            spent = None if old["seconds"] is None or seconds is None else old["seconds"] + seconds
            self.records[index] = entry((path, size_bytes(path)), old["step"], spent, old["source"], monitor.run_dir)
            _log(monitor, self.records[index], old["path"])
        except Exception as exc:
            self._split.monitor.warn_once("time-checkpoint-record", f"a renamed checkpoint's final file not read: {exc!r}")
