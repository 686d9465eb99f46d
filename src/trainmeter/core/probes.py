"""Torch probes: optimizer steps, tokens per step, the trained model, captured loss.

Installed for one monitored cell and removed at its end, without any global
module hook (those make Dynamo compile the model again, print torch's
"global hooks" warning and leave an entry in torch's hook dicts):

- a global optimizer step post-hook counts steps of the *primary* optimizer
  (the first that steps; a newer optimizer replaces it once it steps, as in a
  sweep that re-creates model and optimizer);
- the trained model is found from the optimizers' parameters: at the start and
  whenever an optimizer is constructed (``torch.optim.Optimizer.__init__`` is
  wrapped), the modules reachable from the calling frames (their locals, the
  attributes of the objects there, ``__main__``) that hold its parameters become
  *candidates*; at the primary optimizer's first step the outermost called one
  holding most of its parameters becomes the *root*;
- candidates' batches are read by wrapping ``__call__`` on their *class* (or
  ``training_step`` for a Lightning module), which acts only for the watched
  instances: the module's ``__dict__`` is never touched, so ``copy.deepcopy``,
  ``pickle`` and ``torch.save(model)`` carry nothing of ours and a copy computes
  with its own weights; under Dynamo tracing the wrapper is a plain pass-through;
- ``torch.autograd.backward`` (also behind ``Tensor.backward``) is wrapped to read
  the 0-d loss without a sync, and ``GradScaler.scale`` to know the scale that
  multiplied it (read with the loss, divided out on the host).

Loss semantics (docs/spec.md §2): the step's loss is the sum of the values passed
to backward since the previous optimizer step, each divided by the GradScaler scale
that multiplied it: the loss whose gradient the step applied. When the loop divided
each micro-batch loss by the accumulation count, that sum is the per-step loss.
Several backward calls without a division are recorded as their sum and marked
``ambiguous`` in ``series_info``. Losses before the step of a non-primary
optimizer go to ``train_loss.optimizerN``.

Hot path (docs/spec.md section 20, ``tests/core/test_hot_path.py``): in steady state a step costs the
root's ``__call__`` wrapper (a positional batch with the type, shape and dtype of the
last counted one counts the same, without ``count_batch``), the ``backward`` wrapper (torch's
own six parameters, so no tuple or dict per call; a 0-d CPU loss, not scaled, is read with
``tolist()``, item()'s number without its GIL release, and kept in place: no :class:`StepLoss`
object, and its ``grad_fn`` is read only when a second part comes before the step) and the step
hook, which hands the step to the run's one step rule (:class:`~trainmeter.core.steps.StepRecorder`).
Anything else (a CUDA loss, a GradScaler, an open eval span, a new shape, a second call of the root in a
step, a new optimizer) takes the general path, which ends in the same rule. What those wrappers read and
write is the probes' own :class:`~trainmeter.core.probe_state.ProbeState`, which they close over.

The parts, each in its module: :mod:`~trainmeter.core.discovery`, :mod:`~trainmeter.core.wrappers`,
:mod:`~trainmeter.core.root_calls`, :mod:`~trainmeter.core.loss_capture`,
:mod:`~trainmeter.core.optimizer_steps`, :mod:`~trainmeter.core.compile_watch`.

Every callback is guarded: a fault warns once and disables that probe.
Callbacks run on the training thread.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, Protocol

from trainmeter.core import host_patches
from trainmeter.core.compile_watch import CompileWatch
from trainmeter.core.discovery import Discovery, _Candidate
from trainmeter.core.probe_state import NO_ROOT, ProbeState
from trainmeter.core.lane_probes import LaneProbes
from trainmeter.core.lanes import Lane
from trainmeter.core.loss_capture import LossCapture
from trainmeter.core.optimizer_steps import OptimizerSteps
from trainmeter.core.patches import Patches, PostImportHooks
from trainmeter.core.root_calls import RootCalls
from trainmeter.core.scalars import StepLoss
from trainmeter.core.seq_weights import TokenWeightedSeq
from trainmeter.core.wrappers import Wrappers


class StepSink(Protocol):
    """What the probes call on the run (:class:`~trainmeter.core.monitor.Monitor`). Training thread."""

    steps: int
    steps_state: Any  # the step rule (core/steps.py StepRecorder): count(tokens, loss, value), add_loss, steps, now
    lanes: Any  # the other training threads' lanes (core/lane_steps.py Lanes): add, on_step, on_loss
    token_unit: str
    series_info: dict[str, dict[str, Any]]

    def at_step(self, step: int, fn: Any) -> None: ...

    def set_token_unit(self, unit: str) -> None: ...

    def set_model(self, module: Any, token_unit: str) -> None: ...

    def warn_once(self, key: str, message: str) -> None: ...

    @property
    def scalar_reader(self) -> Any: ...


class TorchProbes(Discovery, CompileWatch, Wrappers, RootCalls, LossCapture, OptimizerSteps, LaneProbes):
    """The in-process torch hooks of one run.

    Args:
        monitor: The run they report to.

    Attributes:
        on_training: Called (no arguments) at each training forward of the root, each
            backward and each optimizer step while set; set only by the extensions' dispatcher
            (``Dispatcher.watch_training``: the time split's open eval span), which turns it into
            ``on_phase("train", "begin", t_s)``.
        paused: Set while trainmeter itself runs the model (FLOP counting).
    """

    name = "torch"

    def __init__(self, monitor: StepSink) -> None:
        self._monitor = monitor
        self.hot = ProbeState()  # the fast flags, the last batch signature, the step's loss parts
        self._steps: Any = monitor.steps_state  # the step rule (StepRecorder): every counted step goes there
        self._handles: list[Any] = []
        self._patches = Patches()
        self._call_wrapper_on = True  # TRAINMETER_DISABLE=call-wrapper (core/host_patches.py), read at start
        self._compile_watch_on = False  # torch.compile wrapped (compile-watch), read at start
        self._direct_call: Any = None  # the root's Module._call_impl when the fast call may call it (_set_root)
        self._imports: PostImportHooks | None = None
        self._active = False
        self._torch: Any = None
        self._module_type: Any = None
        self._optimizer_type: Any = None
        self._candidates: dict[int, _Candidate] = {}
        self._patched_classes: set[tuple[type, str]] = set()
        self._root: weakref.ReferenceType[Any] | None = None
        self._declared: weakref.ReferenceType[Any] | None = None  # tm.monitor(model=...)
        self._root_id = 0
        self._keep_others_until_s = 0.0  # another optimizer's models stay watched until then (core/discovery.py)
        self._primary_last_event = 0
        self._events = 0
        self._created: dict[int, tuple[weakref.ReferenceType[Any], int]] = {}  # optimizer id -> (ref, event)
        self._others: dict[int, int] = {}  # non-primary optimizer id -> its number (2, 3, ...)
        self._max_calls = 0
        self._general_steps = 0  # lane 1's steps counted through _on_step (the others took the steady path)
        self._loss: StepLoss | None = None
        self._scaled: tuple[Any, Any, bool] | None = None  # (weakref to the scaled loss, scale tensor, divided)
        self._losses_info = {"steps": 0, "ambiguous": 0, "divided": 0, "scaled": 0, "max_parts": 0}
        self._first_step_missed = False
        self._roots_found = 0
        self._candidate_calls = False
        self._gave_up = False
        self._compiling = False  # something is or was compiled: torch's own classes are not patched
        self._set_aside: set[int] = set()  # candidates unwatched for that reason
        self._on_training: Any = None
        self.params: dict[str, Any] = {}
        self.root_name: str | None = None
        self.example: tuple[Any, Any] | None = None
        self.seq_weights = TokenWeightedSeq()  # the run's token-weighted S (docs/spec.md section 5, "S")
        self._paused = False
        self._paused_ident = 0  # the thread that paused (our FLOP count runs there)
        self.autocast_dtype: str | None = None
        # training threads (core/lane_probes.py): lane 1's thread, the others' lanes, threaded mode
        self._hot_ident = 0
        self._hot_thread = ""
        self._threads: dict[int, Lane] = {}
        self._threaded = False
        self._lanes_lock = threading.Lock()
        self._capture_on = False  # loss capture installed and not disabled by a fault
        self.unstepped_loss = False  # at stop: a loss was passed to backward after the last step (or with none)

    # -- the hot paths' flags ----------------------------------------------------------
    @property
    def _primary(self) -> weakref.ReferenceType[Any] | None:
        """A weak reference to the primary optimizer, or ``None`` (held on the hot state: the step hook reads it)."""
        return self.hot.primary

    @_primary.setter
    def _primary(self, ref: weakref.ReferenceType[Any] | None) -> None:
        self.hot.primary = ref

    @property
    def paused(self) -> bool:
        """Forward and backward calls are not counted (our own FLOP count; a probe fault). Training thread."""
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self._paused_ident = threading.get_ident()
        self._refresh_fast()

    @property
    def steady_steps(self) -> int:
        """Lane 1's steps that took the step hook's steady path (their loss read at backward). Training thread."""
        return self._steps.steps - self._general_steps

    @property
    def primary_optimizer(self) -> Any:
        """The primary optimizer (whose steps are counted), or ``None`` before its first step. Any thread."""
        return self._primary() if self._primary is not None else None

    @property
    def on_training(self) -> Any:
        """Called at each training forward, backward and step while set (an open eval span). Training thread."""
        return self._on_training

    @on_training.setter
    def on_training(self, value: Any) -> None:
        self._on_training = value
        self._refresh_fast()

    def _refresh_fast(self) -> None:
        """Recompute the hot paths' flags from their inputs (after any of them changed)."""
        # a second training thread switches the fast paths off for the run (core/lane_probes.py); the first
        # backward waits for lane 1's thread to be known
        plain = self._active and not self._paused and self._on_training is None and not self._threaded
        fast = plain and self.hot.fast_calls and self._root is not None
        self.hot.fast_ref = self._root if fast else NO_ROOT  # type: ignore[assignment]
        # the fast call calls torch's Module._call_impl itself (no bound method, no _compiled_call_impl read) while
        # nothing is compiled in the run and torch.compile is watched: module.compile() goes through it first
        self.hot.call_impl = self._direct_call if fast and not self._compiling else None
        self.hot.fast_backward = (plain and self.hot.backward_on and self._loss is None and self._scaled is None
                                  and self._hot_ident != 0)
        if not plain or self._root is None:
            self.hot.steady = False

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Install the hooks (torch is imported here, not at package import)."""
        import torch
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        self._torch = torch
        self._module_type = torch.nn.Module
        self._optimizer_type = Optimizer
        self._active = True
        allow, warn = host_patches.allow, self._monitor.warn_once  # each host patch checked once, here
        if allow("step-hooks", warn):
            self._handles.append(register_optimizer_step_post_hook(self._make_step_hook()))
        if allow("backward", warn):
            self._patches.wrap(torch.autograd, "backward", self._make_backward)
            self.hot.backward_on = self._capture_on = True
        self._refresh_fast()
        if allow("optimizer-init", warn):
            self._patches.wrap(Optimizer, "__init__", self._make_optimizer_init)
        try:
            from torch.amp.grad_scaler import GradScaler

            if allow("grad-scaler", warn):
                self._patches.wrap(GradScaler, "scale", self._make_scale)
        except Exception:
            pass
        self._call_wrapper_on = allow("call-wrapper", warn)
        if allow("compile-watch", warn):
            self._compile_watch_on = True
            self._patches.wrap(torch, "compile", self._make_compile)
            self._imports = PostImportHooks({"torch._dynamo.eval_frame": self._patch_dynamo})
            self._imports.install()
        self._guarded("probe-discovery", self._scan_existing, sys._getframe(1))

    def stop(self) -> None:
        """Remove every hook and patch; write the loss and token provenance. Idempotent."""
        self._active = False
        self._refresh_fast()
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles.clear()
        if self._imports is not None:
            self._imports.remove()
            self._imports = None
        self._patches.restore_all()
        self._patched_classes.clear()
        self._candidates.clear()
        self._set_aside.clear()
        self._created.clear()
        self._scaled = None
        self.unstepped_loss = self.unstepped_loss or self._loss is not None or bool(self.hot.fast_parts)
        self._loss = None
        self.hot.clear_fast_loss()
        self.on_training = None
        self._guarded("probe-info", self._write_info)

    def reset_discovery(self) -> None:
        """Forget the root and the primary optimizer (a forked child may train another model). Training thread."""
        self._primary = None
        self._root = None
        self._root_id = 0
        self.hot.steady = False
        self._refresh_fast()
        self._gave_up = False
        self._others.clear()
        self._general_steps = 0
        self._lanes_lock = threading.Lock()  # the child's threads are not the parent's (nor its lock's holder)
        self._threads = {}
        self._hot_ident = 0
        self._threaded = False
        self.hot.backward_on = self._capture_on
        self.hot.pending_tokens = 0
        self.hot.calls = 0
        self._loss = None
        self.hot.clear_fast_loss()
        self._scaled = None
        self.params = {}
        self.root_name = None
        self.example = None
        self.seq_weights = TokenWeightedSeq()
        for candidate in self._candidates.values():
            candidate.tokens = candidate.calls = 0
            candidate.example = None
        self._refresh_fast()

    def _guarded(self, key: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            self._monitor.warn_once(key, f"{key} disabled: {exc!r}")
            return None

    # -- discovery -----------------------------------------------------------------
