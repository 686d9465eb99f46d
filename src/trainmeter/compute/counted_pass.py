"""The counted pass in two halves: the meta copy on the training thread, its forward and backward on another.

:func:`prepare_counted` (training thread, between steps) makes the meta copy and inputs; :meth:`PreparedCount.run`
runs them under the counter on the report worker, touching only the copy and thread-local torch state (docs/spec.md
section 20, "First report"). The copy (:func:`model_copy`) is on the meta device and never shares or changes the live
module: how its separate module tree is built, docs/spec.md section 5, "The counted pass".
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from trainmeter.compute.flop_count import (
    Call,
    CountedFlops,
    Unit,
    _copied,
    _counted_pass,
    _failure,
    _inputs,
    _result,
    counted_flops_per_token,
)


@contextlib.contextmanager
def _paused(probes: Any) -> Iterator[None]:
    """Our own forward/backward on the training thread must not count as training: the probes pause meanwhile."""
    probes.paused = True
    try:
        yield
    finally:
        probes.paused = False


def _compiled_anything() -> bool:
    """Whether Dynamo compiled a frame in this process (its counters; unreadable counters count as yes)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return False
    try:
        return bool(utils.counters["frames"]["total"] or utils.counters["stats"]["calls_captured"])
    except Exception:  # noqa: BLE001 - an unknown Dynamo: count on the training thread
        return True


def kept_from(model: Any) -> Call:
    """The call the run keeps the batch of (core/root_calls.py): a LightningModule's ``training_step``, else forward."""
    lightning = any(c.__name__ == "LightningModule" for c in type(model).__mro__)
    return "training_step" if lightning else "forward"


class PreparedCount:
    """The meta pass of :func:`prepare_counted`, ready to run: a meta copy of the model and meta inputs, ours only;
    :meth:`run` runs it once, on any thread (later calls return the first result), then lets the copy go;
    ``result``: its result once it returned, else ``None`` (any thread)."""

    def __init__(self, clone: Any, args: tuple[Any, ...], kwargs: dict[str, Any], unit: Unit, count: int | None,
                 call: Call = "forward") -> None:
        self._job: tuple[Any, ...] = (clone, args, kwargs, call)
        self._unit, self._count = unit, count
        self._lock = threading.Lock()
        self.result: CountedFlops | None = None

    def run(self) -> CountedFlops:
        """The meta pass's result, as ``counted_flops_per_token(..., method="meta")`` gives it. Never raises."""
        with self._lock:
            if self.result is not None:
                return self.result
            (clone, args, kwargs, call), self._job = self._job, ()  # the copy goes with this pass
            try:
                total, by_op = _counted_pass(clone, args, kwargs, None, call, on_training_thread=False)
                self.result = _result("meta", total, by_op, "meta copy", call, self._unit, self._count, [])
            except Exception as exc:  # noqa: BLE001 - never raise into training code
                self.result = CountedFlops(flops_per_unit=None, unit=self._unit, count=self._count,
                                           reason=f"meta pass failed: {_failure(exc, call)}")
            return self.result


def prepare_counted(model: Any, example_args: Any = (), example_kwargs: Mapping[str, Any] | None = None,
                    *, call: Call = "forward", tokens: int | None = None,
                    samples: int | None = None) -> PreparedCount | None:
    """The training thread's half of a meta count (of the forward, or of the method ``call`` the model is trained
    through): the meta copy and inputs; ``None`` where the count must run whole on the training thread (a
    ``training_step``, a process that compiled anything, a model with no meta copy, a batch that cannot be read).
    Never raises."""
    if call == "training_step" or _compiled_anything():
        return None
    found = _inputs(example_args, example_kwargs, tokens, samples, call, "meta")
    if isinstance(found, CountedFlops):
        return None
    args, kwargs, count, unit = found
    try:
        import torch._dynamo  # noqa: F401  (a meta kernel's dynamo guard imports it: here, not on the pass's thread)
        import torch.utils.flop_counter  # noqa: F401  (imported here: the pass's thread imports nothing of torch's)

        clone, args, kwargs, how = _copied(model, args, kwargs, meta=True)
    except Exception:  # noqa: BLE001 - the whole count on the training thread says why
        return None
    return PreparedCount(clone, args, kwargs, unit, count, call) if how == "meta copy" else None


class CountOnWorker:
    """The compute wing's counted pass across reports: begun at one, read at a later one (or the final one); training
    thread (the pass itself runs on the run's report worker)."""

    def __init__(self) -> None:
        self._prepared: PreparedCount | None = None
        self._whole: CountedFlops | None = None  # a count run whole on the training thread, until read
        self._example: Any = None  # a CPU model's kept batch, for its real pass should the meta pass fail
        self._real: tuple[CountedFlops, Any] | None = None  # a failed meta pass waiting for its real pass

    def begin(self, monitor: Any, model: Any, probes: Any) -> None:
        """Count the probes' kept batch (then released): its meta copy made here and its pass queued on
        ``monitor.worker``, or the whole count here where it must run on the training thread."""
        example = getattr(probes, "example", None)
        if not example or not example[0] and not example[1]:
            return
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        call = getattr(probes, "example_call", None) or kept_from(model)  # a method the model is trained through
        declared = getattr(probes, "example_declared", None) or {}  # its count, where tm.batch declared it
        example = (example[0], example[1], declared, call)
        prepared = prepare_counted(model, example[0], example[1], call=call, **declared)
        if prepared is not None:
            self._prepared, self._example = prepared, example if on_cpu else None
            monitor.worker.submit("compute", prepared.run)
        else:
            with _paused(probes):
                self._whole = counted_flops_per_token(model, example[0], example[1],
                                                      method="auto" if on_cpu else "meta", call=call, **declared)
        probes.release_example()

    def take(self, monitor: Any, final: bool) -> CountedFlops | None:
        """The result once the pass ran, else ``None``; ``final`` waits for it (or runs it here if the worker has
        not begun it). A failed meta pass of a CPU model is followed by its real pass, here (as ``method="auto"``)."""
        if self._whole is not None:
            whole, self._whole = self._whole, None
            return whole
        if self._real is not None:  # the real pass was asked of the training thread and has not run yet
            if final and not monitor.worker.on_worker_thread():
                real, self._real = self._real, None
                return self._real_pass(monitor, *real)
            return None
        if self._prepared is None:
            return None
        # final: the worker's result, or the end of its run if one is under way, or the pass run here if it has not
        # begun (its queued job then returns this result): never a wait for the worker's other jobs
        result = self._prepared.run() if final else self._prepared.result
        if result is None:
            return None
        self._prepared, example, self._example = None, self._example, None
        live = monitor.model_ref is not None and monitor.model_ref() is not None and monitor.probes is not None
        if result.method is None and example is not None and live:
            if monitor.worker.on_worker_thread():
                # the real pass draws from the process's random generator (dropout) under fork_rng, which saves
                # and restores it: beside the training thread that would rewind the training's own stream
                self._real = (result, example)
                if not monitor.controls.request_call("counted-pass", lambda: self._on_training(monitor)):
                    self._real = None  # the run ends: the final report's take runs it
                    return result
                return None
            return self._real_pass(monitor, result, example)
        return result

    def _on_training(self, monitor: Any) -> None:
        """The real pass, at a step boundary on the training thread; a later report reads it."""
        real, self._real = self._real, None
        if real is not None:
            self._whole = self._real_pass(monitor, *real)

    @staticmethod
    def _real_pass(monitor: Any, failed: CountedFlops, example: Any) -> CountedFlops:
        """The real pass of a CPU model after its failed meta pass (training thread): ``method="auto"``'s second
        pass, its reason led by the meta pass's failure, as :func:`counted_flops_per_token` gives it."""
        model = monitor.model_ref() if monitor.model_ref is not None else None
        if model is None or monitor.probes is None:
            return failed
        with _paused(monitor.probes):
            real = counted_flops_per_token(model, example[0], example[1], method="real", call=example[3], **example[2])
        return replace(real, reason="; ".join(r for r in (failed.reason, real.reason) if r) or None)


_DETACHED_KEYS = ("_trainer", "_fabric", "_device_mesh")  # a LightningModule's links to its run
_DETACHED_CLASSES = frozenset({"Trainer", "LightningDataModule", "Dataset", "IterableDataset", "DataLoader", "Fabric",
                               "Optimizer"})  # an optimizer a module holds (SB3's policy): its state is not copied


def _detached(key: str, value: Any) -> bool:
    """Whether an attribute is a link to the run (a trainer, the data, an optimizer) that the copy holds as ``None``."""
    if value is None or key in _DETACHED_KEYS:
        return value is not None
    try:
        return any(c.__name__ in _DETACHED_CLASSES for c in type(value).__mro__)
    except Exception:  # noqa: BLE001 - an odd class is copied as any other value
        return False


def unwrap(model: Any) -> Any:
    """The module whose forward does the work: through ``_orig_mod`` (compile) and ``.module`` (DDP, DP)."""
    root = model
    for _ in range(4):
        inner = getattr(root, "_orig_mod", None)
        if inner is None and type(root).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = getattr(root, "module", None)
        if inner is None:
            break
        root = inner
    return root


def is_sharded(root: Any) -> bool:
    """True when a parameter is a DTensor or a module is FSDP-managed (FSDP2 ``fully_shard`` or FSDP1)."""
    fsdp = {"FSDPModule", "FullyShardedDataParallel"}
    return any(fsdp & {c.__name__ for c in type(module).__mro__} for module in root.modules()) or any(
        type(p).__name__ == "DTensor" or hasattr(p, "_local_tensor") for p in root.parameters())


def _plain_class(module: Any) -> type:
    """The user's class of ``module``: ``FSDP<Class>`` (FSDP2's dynamic subclass) read as ``<Class>``."""
    return next(c for c in type(module).__mro__ if all(b.__name__ != "FSDPModule" for b in c.__mro__))


def _tensor_copy(t: Any, torch: Any, real: bool) -> Any:
    """A new tensor like ``t`` (same shape, dtype, ``requires_grad``): meta, or a detached clone for ``real``."""
    grad = bool(t.requires_grad)
    local = t.detach().clone() if real else torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(local, requires_grad=grad)
    return local.requires_grad_(grad) if grad and local.is_floating_point() else local


def _memo(root: Any, torch: Any, real: bool) -> dict[int, Any]:
    """The deepcopy memo: tensors (parameters, buffers, those in attributes) to new tensors, hook dictionaries and
    FSDP2 state to empty ones."""
    memo: dict[int, Any] = {}
    for module in root.modules():
        for key, value in vars(module).items():
            if key.startswith("__composable_api_state_key") or ("hooks" in key and isinstance(value, dict)):
                memo[id(value)] = type(value)() if isinstance(value, OrderedDict) else {}
            elif _detached(key, value):
                memo[id(value)] = None
            elif not isinstance(value, torch.nn.Module):
                _scan(value, memo, torch, real, 0)
    return memo


def _scan(value: Any, memo: dict[int, Any], torch: Any, real: bool, depth: int) -> None:
    """Map the tensors in an attribute (a rotary cache, a mask, a distribution's logits kept from the last forward;
    inside lists, tuples, dicts and plain objects, 4 levels deep) to new ones in ``memo``, like buffers: the deep copy
    of the rest then allocates nothing on a device and copies no autograd graph."""
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = _tensor_copy(value, torch, real)
    elif depth < 4 and isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            _scan(item, memo, torch, real, depth + 1)
    elif depth < 4 and isinstance(getattr(value, "__dict__", None), dict) and not isinstance(
            value, (type, types.ModuleType, torch.nn.Module)) and not _detached("", value):
        for item in vars(value).values():
            _scan(item, memo, torch, real, depth + 1)


def _clone_module(module: Any, memo: dict[int, Any], module_type: type) -> Any:
    """A new module of ``module``'s plain class whose attributes are deep copies (through ``memo``); children likewise,
    so a class's own ``__deepcopy__`` (FSDP2 refuses one) and ``__new__`` (FSDP2's re-runs ``__init__``) never run."""
    found = memo.get(id(module))
    if found is not None:
        return found
    new = object.__new__(_plain_class(module))
    memo[id(module)] = new
    state = new.__dict__
    for key, value in vars(module).items():
        if key == "_modules":
            state[key] = {name: None if child is None else _clone_module(child, memo, module_type)
                          for name, child in value.items()}
        elif isinstance(value, module_type):
            state[key] = _clone_module(value, memo, module_type)
        else:
            state[key] = copy.deepcopy(value, memo)
    return new


def _from_config(root: Any, torch: Any) -> Any:
    """Rebuild ``root`` from its Hugging Face style ``config`` on the meta device, or raise."""
    config = getattr(root, "config", None)
    if config is None:
        raise TypeError("it has no config to rebuild it from")
    cls = _plain_class(root)
    with torch.device("meta"):
        build = getattr(cls, "_from_config", None)
        rebuilt = build(config) if callable(build) else cls(config)
    live = {name: p.requires_grad for name, p in root.named_parameters()}
    for name, p in rebuilt.named_parameters():
        p.requires_grad_(live.get(name, True))
    rebuilt.train(root.training)
    return rebuilt


def model_copy(model: Any, *, real: bool = False) -> tuple[Any, str, str | None]:
    """A copy of ``model`` (wrappers read through) for the counted pass, ``real``: its data cloned (the CPU's real
    pass): ``(copy, how, None)``, ``how`` "meta copy", "real copy" or "rebuilt from its config on the meta device";
    or ``(None, "", reason)``. Never raises."""
    try:
        import torch

        root = unwrap(model)
        if real and is_sharded(root):
            return None, "", "the model is sharded (FSDP / DTensor parameters): only a meta copy is counted"
        try:
            clone = _clone_module(root, _memo(root, torch, real), torch.nn.Module)
            return clone, "real copy" if real else "meta copy", None
        except Exception as exc:  # noqa: BLE001 - an uncopyable model is counted from its config or skipped
            copy_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if real:
            return None, "", f"the model could not be copied ({copy_error})"
        try:
            return _from_config(root, torch), "rebuilt from its config on the meta device", None
        except Exception as exc:  # noqa: BLE001
            why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TypeError) else str(exc)
            return None, "", f"the model could not be copied ({copy_error}) and {why}"
    except Exception as exc:  # noqa: BLE001 - never raise into training code
        return None, "", f"the model could not be read: {type(exc).__name__}: {exc}"
