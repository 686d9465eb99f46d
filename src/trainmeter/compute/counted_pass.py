"""The counted pass in two halves: the meta copy on the training thread, its forward and backward on another.

:func:`prepare_counted` (training thread, between steps) makes the meta copy and inputs; :meth:`PreparedCount.run`
runs them under the counter on the report worker, touching only the copy and thread-local torch state (docs/spec.md
section 20, "First report").
"""

from __future__ import annotations

import contextlib
import sys
import threading
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
    kept_from,
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
        counters = utils.counters
        return bool(counters["frames"]["total"] or counters["stats"]["calls_captured"])
    except Exception:  # noqa: BLE001 - an unknown Dynamo: count on the training thread
        return True


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
            if self.result is None:
                self.result = self._pass()
            return self.result

    def _pass(self) -> CountedFlops:
        (clone, args, kwargs, call), self._job = self._job, ()  # the copy goes with this pass
        try:
            total, by_op = _counted_pass(clone, args, kwargs, None, call, on_training_thread=False)
            return _result("meta", total, by_op, "meta copy", call, self._unit, self._count, [])
        except Exception as exc:  # noqa: BLE001 - never raise into training code
            return CountedFlops(flops_per_unit=None, unit=self._unit, count=self._count,
                                reason=f"meta pass failed: {_failure(exc, call)}")


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

    @property
    def pending(self) -> bool:
        """Whether a pass was begun and its result not yet read."""
        return self._prepared is not None or self._whole is not None or self._real is not None

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
