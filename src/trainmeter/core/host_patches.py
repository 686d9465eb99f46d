"""Every place trainmeter patches or hooks code it does not own: the list, its checks and its kill switch.

The entries, ``TRAINMETER_DISABLE`` and the doctor's listing: docs/spec.md section 18, "Host patches". Each
entry's ``sites`` are checked against the source by tests/core/test_host_patches.py, so a new patch cannot land
unlisted. Each installer asks :func:`allow` at install time (never at call time). Thread safety: reads of
``os.environ`` and ``sys.modules``; the record of refusals is a dict written by installers (GIL-atomic).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainmeter.core.faults import quietly

DISABLE_ENV = "TRAINMETER_DISABLE"
COMPILE_FLAG = "torch.compiler._is_compiling_flag"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostPatch:
    """One patch or hook of something trainmeter does not own.

    Attributes:
        key: Name and kill-switch key (``TRAINMETER_DISABLE=<key>``).
        touches: What it patches or hooks, in words.
        private: Private (or version-dependent) names it relies on, dotted from a module.
        fallback: What is done instead when a private name is missing; ``None``: the entry is refused.
        uninstall: How it is undone (by default the original is put back at the run's end).
        sites: ``<file under src/trainmeter>:<site>`` where the code installs it.
    """

    key: str
    touches: str
    sites: tuple[str, ...]
    uninstall: str = "the original is put back at the run's end"
    private: tuple[str, ...] = ()
    fallback: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchCheck:
    """An entry's private names, looked up now: ``ok`` is ``True`` (all found), ``False`` (one is missing) or ``None``
    (its module is not imported here); ``detail`` says what was found."""

    ok: bool | None
    detail: str


PATCHES: tuple[HostPatch, ...] = (
    HostPatch(key="step-hooks", touches="torch.optim's global optimizer step post-hook (the probes' step count; "
              "the optimizer wing reads the rates there)", uninstall="its handle is removed at the run's end",
              sites=("core/probes.py:register_optimizer_step_post_hook",),
              private=("torch.optim.optimizer.register_optimizer_step_post_hook",)),
    HostPatch(key="nan-checkpoint", touches="a global optimizer step pre-hook, only with a nan:checkpoint-stop "
              "alert: a step whose loss read on the host is not finite is preceded by a checkpoint of the weights "
              "it changes", uninstall="its handle is removed at the run's end",
              sites=("core/probes.py:register_optimizer_step_pre_hook",),
              private=("torch.optim.optimizer.register_optimizer_step_pre_hook",)),
    HostPatch(key="optimizer-init", touches="torch.optim.Optimizer.__init__ (an optimizer built in the run is "
              "seen, to find the trained model)", sites=("core/probes.py:Optimizer.__init__",),
              private=("torch.optim.Optimizer.__init__",)),
    HostPatch(key="call-wrapper", touches="the watched model classes' __call__ (a LightningModule's training_step): "
              "batches and tokens", uninstall="the class attribute is deleted (or restored) when the model is "
              "unwatched and at the run's end", sites=("core/discovery.py:cls.attr", "core/patches.py:cls.__call__",
                                                         "core/wrappers.py:cls.__call__"),
              private=(COMPILE_FLAG,),
              fallback="torch.compiler.is_compiling() is read instead"),
    HostPatch(key="backward", touches="torch.autograd.backward (also behind Tensor.backward): the loss without a "
              "sync", sites=("core/probes.py:torch.autograd.backward",), private=("torch.autograd.backward",)),
    HostPatch(key="grad-scaler", touches="torch.amp.GradScaler.scale: the scale that multiplied the loss",
              sites=("core/probes.py:GradScaler.scale",), private=("torch.amp.grad_scaler.GradScaler.scale",)),
    HostPatch(key="compile-watch", touches="torch.compile and torch._dynamo's OptimizedModule.__init__ (a model "
              "compiled in the run is counted at its compiled wrapper)",
              uninstall="the originals are put back at the run's end",
              sites=("core/wrappers.py:torch.compile", "core/wrappers.py:owner.__init__"),
              private=("torch._dynamo.eval_frame.OptimizedModule",)),
    HostPatch(key="clip-grad", touches="torch.nn.utils.clip_grad_norm_/clip_grad_value_/clip_grads_with_norm_, "
              "FSDP's and accelerate's clip_grad_norm_ (the gradient norm the loop computed)",
              uninstall="the originals are put back and the import hook removed at the run's end",
              sites=("optim/grad_norm.py:owner.clip_grad_norm_", "optim/grad_norm.py:owner.clip_grad_value_",
                     "optim/grad_norm.py:torch.nn.utils.clip_grads_with_norm_",
                     "optim/grad_norm.py:fsdp_class.clip_grad_norm_",
                     "optim/grad_norm.py:accelerator.clip_grad_norm_"),
              private=("torch.nn.utils.clip_grad.clip_grad_norm_",),
              fallback="torch.nn.utils.clip_grad_norm_ is wrapped alone"),
    HostPatch(key="time-split", touches="the DataLoader iterator's __next__, torch.nn.Module.train, torch.save and "
              "the checkpoint savers of safetensors, transformers, peft, accelerate, torch.distributed.checkpoint, "
              "Lightning and Fabric, Keras, fastai, skorch, stable-baselines3 and Ignite (timesplit/savers.py: data "
              "waits, inference and checkpoint spans)",
              uninstall="the originals are put back at the run's end",
              sites=("timesplit/extension.py:owner.attr", "timesplit/extension.py:torch.save"),
              private=("torch.utils.data.dataloader._BaseDataLoaderIter.__next__",)),
    HostPatch(key="checkpoint-rename", touches="os.replace and os.rename (Path.replace and Path.rename call them), "
              "on the training thread: the file a checkpoint record just wrote, renamed before the next optimizer "
              "step (a temp file, then a rename), moves the record to the final file; any other rename goes "
              "straight through", uninstall="the originals are put back at the run's end",
              sites=("timesplit/extension.py:os.replace", "timesplit/extension.py:os.rename")),
    HostPatch(key="lineage", touches="torch.load, only in a run given --resume whose parent listed checkpoints (the "
              "path loaded is matched to them: the step resumed from, docs/spec.md section 22)",
              sites=("lineage/extension.py:torch.serialization.load", "lineage/extension.py:torch.load")),
    HostPatch(key="taps", touches="logging calls of W&B, TensorBoard and MLflow, Lightning's logger connector, and "
              "Hugging Face Trainer.train for its logs (the integration wing's callback reads them at on_log; "
              "read as series)", uninstall="the originals are put back at the run's end",
              sites=("integrations/extension.py:owner.site.attr", "integrations/adapter.py:wandb.log"),
              private=("lightning.pytorch.trainer.connectors.logger_connector.logger_connector._LoggerConnector",),
              fallback="a library whose logging class is missing is not tapped"),
    HostPatch(key="frameworks", touches="the fit/train entry points of Hugging Face Trainer, Lightning Trainer, "
              "Keras 3 (torch backend; its optimizers' apply and scale_loss), fastai Learner, accelerate's "
              "Accelerator.prepare, Lightning Fabric's setup/load, Ignite's Engine.run and skorch "
              "NeuralNet.fit_loop/run_single_epoch: trainmeter's callback is added to the framework's own list for "
              "that call (steps of optimizers outside torch.optim, stop and save); the framework's own evaluation "
              "(HF evaluate, Lightning's evaluation loop, Keras evaluate, fastai's validation, an Ignite run inside "
              "the trainer's, skorch's validation loop) is an eval span",
              uninstall="the originals are put back at the run's end; each callback leaves with its fit",
              sites=("integrations/extension.py:owner.site.attr",)),
    *(HostPatch(key=f"framework-{name}", touches=f"{what} only (one framework of the frameworks entry)",
                sites=("integrations/extension.py:owner.site.attr",))
      for name, what in (("hf", "transformers.Trainer.train"), ("lightning", "Lightning Trainer.fit"),
                         ("keras", "Keras 3 TorchTrainer.fit and train_on_batch, "
                                   "keras BaseOptimizer.apply/scale_loss, LossScaleOptimizer.scale_loss"),
                         ("fastai", "fastai Learner.fit"),
                         ("accelerate", "accelerate Accelerator.prepare"),
                         ("fabric", "Lightning Fabric setup, setup_module and load"),
                         ("ignite", "Ignite Engine.run"),
                         ("skorch", "skorch NeuralNet.fit_loop and run_single_epoch"),
                         ("stable-baselines", "stable-baselines3 OnPolicyAlgorithm.learn, OffPolicyAlgorithm.learn and "
                                 "EvalCallback's evaluate_policy"))),
    HostPatch(key="import-hooks", touches="sys.meta_path: one finder (for every hook of the process) that patches a "
              "library imported during the run (compile-watch, time-split, taps, frameworks, clip-grad, autostart)",
              uninstall="the finder is removed at the run's end",
              sites=("core/patches.py:sys.meta_path", "core/patches.py:module.__loader__",
                     "core/patches.py:module.__spec__.loader")),
    HostPatch(key="signals", touches="SIGINT (held back while the run starts and finishes) and SIGTERM (noted; the "
              "run saved at the next step boundary or by a watcher thread, then the signal re-delivered) handlers, "
              "the signal wakeup descriptor when no one holds it, an atexit hook, and a fork handler that gives a "
              "forked child the previous SIGTERM handler back",
              uninstall="the previous handler and wakeup descriptor are put back at the run's end",
              sites=("core/interrupts.py:signal.signal", "core/interrupts.py:register_at_fork")),
    HostPatch(key="thread-stop", touches="the _invoke_excepthook of a training thread that a stop ends with "
              "StopTraining (threading's excepthook is not called for it; any other exception is passed on)",
              uninstall="it lives on that thread object only and ends with the thread",
              sites=("core/controls.py:thread._invoke_excepthook",), private=("threading._make_invoke_excepthook",),
              fallback="the thread's uncaught StopTraining is printed by threading's excepthook (catch it)"),
    HostPatch(key="close-retry", touches="IPython's post_run_cell event: a widget whose close at the cell's end was "
              "cut before it completed is closed after the next cell (the static dashboard reaches its output)",
              uninstall="the callback unregisters itself once no shown widget waits",
              sites=("widget/attach.py:events.register",)),
    HostPatch(key="fork", touches="os.register_at_fork, multiprocessing's after-fork registry and an atexit "
              "handler (a forked child becomes a rank and finishes its run; our locks are not held across a fork)",
              uninstall="cannot be unregistered: the handlers do nothing while no run is active",
              sites=("ranks/fork.py:register_at_fork", "ranks/fork.py:register_after_fork",
                     "core/fork_locks.py:register_at_fork"),
              private=("multiprocessing.util.register_after_fork",)),
    HostPatch(key="rank-timing", touches="torch.Tensor.backward and a global optimizer step post-hook, in a rank "
              "(per-rank step timing)", uninstall="the hook is removed and Tensor.backward put back at the run's end",
              sites=("ranks/stragglers.py:register_optimizer_step_post_hook",
                     "ranks/stragglers.py:torch.Tensor.backward")),
    HostPatch(key="calibrate-matmul-mode", touches="torch.backends.cuda.matmul.allow_tf32, only inside tm.calibrate() "
              "(the user's explicit call) on CUDA: on for the tf32 matmul, off for the others",
              uninstall="the user's value is put back before tm.calibrate() returns (a finally block)",
              sites=("compute/calibrate.py:torch.backends.cuda.matmul.allow_tf32",)),
    HostPatch(key="spawn-count", touches="multiprocessing.popen_spawn_posix.Popen._launch (spawned children are "
              "counted)", sites=("ranks/extension.py:popen_spawn_posix.Popen._launch",),
              private=("multiprocessing.popen_spawn_posix.Popen._launch",)),
    HostPatch(key="autostart", touches="src/trainmeter-autostart.pth (imports ranks/site_hook.py at interpreter start "
              "in a child of a monitored run) and, there, torch.optim.Optimizer.__init__ and a global optimizer step "
              "pre-hook (the first optimizer built, or stepped, starts the rank's run)",
              uninstall="both go inert once the run started and are removed when the process ends; the .pth does "
              "nothing without TRAINMETER_RUN_DIR (pip uninstall removes it)",
              sites=("ranks/autostart.py:register_optimizer_step_pre_hook",
                     "ranks/autostart.py:module.Optimizer.__init__", "../trainmeter-autostart.pth:pth")),
    HostPatch(key="reload", touches="ipykernel 7's shell-channel routing and one comm subshell (a page reloaded "
              "mid-cell restores its widget), and the notebook model's outputs in JS (js/src/reattach.ts)",
              uninstall="the kernel's own callback is put back at the widget's close",
              sites=("widget/restore_route.py:on_recv", "widget/restore_route.py:kernel._trainmeter_restore_router",
                     "../../js/src/reattach.ts:outputs"),
              private=("ipykernel.kernelbase.Kernel.shell_channel_thread_main",
                       "ipykernel.subshell_manager.SubshellManager._create_subshell")),
    HostPatch(key="status", touches="the kernel's status publisher (ipykernel's Kernel._publish_status): while a "
              "run holds the main shell, an idle published from another thread is followed by busy for the cell",
              uninstall="the wrapper removes itself at the first status published after the run's end",
              sites=("widget/restore_route.py:kernel._publish_status",),
              private=("ipykernel.kernelbase.Kernel._publish_status",)),
)
KEYS: tuple[str, ...] = tuple(p.key for p in PATCHES)
_BY_KEY = {p.key: p for p in PATCHES}
_refused: dict[str, str] = {}  # key -> why the last install refused it (doctor)
_said_unknown: set[str] = set()


def unknown_keys(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The keys of ``TRAINMETER_DISABLE`` that name no entry."""
    return tuple(k for k in _keys(env)[1] if k not in _BY_KEY)


def disabled(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The keys switched off by ``TRAINMETER_DISABLE``; an unknown key is named in a warning (once per value)."""
    raw, keys = _keys(env)
    unknown = [k for k in keys if k not in _BY_KEY]
    if unknown and raw not in _said_unknown:
        _said_unknown.add(raw)
        names = ", ".join(repr(k) for k in unknown)
        warnings.warn(f"trainmeter: {DISABLE_ENV} names unknown key(s) {names}; the valid keys are: {', '.join(KEYS)}",
                      RuntimeWarning, stacklevel=2)
    return frozenset(k for k in keys if k in _BY_KEY)


STEP_SOURCES = ("step-hooks", "frameworks")  # what counts the steps: torch.optim's hook, the frameworks' callbacks


def blind_message(env: Mapping[str, str] | None = None) -> str | None:
    """Why a run that counted no step may be blind: the step sources ``TRAINMETER_DISABLE`` switched off (named),
    else ``None`` (docs/spec.md section 18, "Host patches")."""
    off = sorted(k for k in disabled(env) if k in STEP_SOURCES)
    if not off:
        return None
    return (f"no step was counted, and {DISABLE_ENV} switched off {', '.join(off)}, which count(s) the steps: the "
            f"run is blind to its training; remove it from {DISABLE_ENV}, or count steps with tm.step()")


def _keys(env: Mapping[str, str] | None) -> tuple[str, list[str]]:
    """``TRAINMETER_DISABLE``'s value and its keys, lower case."""
    raw = (os.environ if env is None else env).get(DISABLE_ENV, "")
    return raw, [k.strip().lower() for k in raw.split(",") if k.strip()]


def enabled(key: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``key`` is not switched off by ``TRAINMETER_DISABLE``."""
    _BY_KEY[key]  # KeyError for an unlisted key
    return key not in disabled(env)


def allow(key: str, warn: Callable[[str, str], None] | None = None) -> bool:
    """Whether the entry ``key`` may be installed now (at install time): not when it is switched off, or a private
    name of it is missing and it has no fallback (``warn``, a ``warn_once``, says why)."""
    if not enabled(key):
        _refused[key] = f"switched off by {DISABLE_ENV}"
        return False
    result = check(key)
    patch = _BY_KEY[key]
    if result.ok is False and patch.fallback is None:
        _refused[key] = result.detail
        quietly(warn, f"host-patch-{key}", f"{key} is not installed: {result.detail}")
        return False
    _refused.pop(key, None)
    if result.ok is False:
        quietly(warn, f"host-patch-{key}", f"{key}: {result.detail}; {patch.fallback}")
    return True


def check(key: str, modules: Mapping[str, Any] | None = None) -> PatchCheck:
    """Look up the entry's private names now (a private module not imported yet is left for later)."""
    private = _BY_KEY[key].private
    if not private:
        return PatchCheck(ok=True, detail="public API only")
    found = {dotted: resolve(dotted, sys.modules if modules is None else modules) for dotted in private}
    missing = [dotted for dotted, there in found.items() if there is False]
    if missing:
        return PatchCheck(ok=False, detail=f"{', '.join(missing)} not found in this version")
    if all(there is None for there in found.values()):
        return PatchCheck(ok=None, detail="checked when its library is imported")
    return PatchCheck(ok=True, detail="its private names are present")


def resolve(dotted: str, modules: Mapping[str, Any] | None = None) -> bool | None:
    """Whether ``dotted`` exists; ``None`` when its library (or a private submodule on the way, ``torch._dynamo``) is
    not imported. A public submodule of an imported package is imported here (``multiprocessing.popen_spawn_posix``)."""
    real = modules is None or modules is sys.modules
    modules = sys.modules if modules is None else modules
    name, *attrs = dotted.split(".")
    obj = modules.get(name)
    if obj is None:
        return None
    for attr in attrs:
        name = f"{name}.{attr}"
        if name in modules:
            obj = modules[name]
            continue
        if real and hasattr(obj, "__path__") and _is_submodule(name):
            if attr.startswith("_"):
                return None
            try:
                obj = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a submodule that fails to import: its names are missing
                return False
            continue
        try:
            obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - AttributeError, or a lazy attribute that fails
            return False
    return True


def _is_submodule(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:  # noqa: BLE001
        return False


class _PublicCompileFlag:
    """Stands in for ``torch.compiler`` where ``_is_compiling_flag`` is gone: reads the public check."""

    __slots__ = ("_is_compiling",)

    def __init__(self, is_compiling: Callable[[], bool]) -> None:
        self._is_compiling = is_compiling

    _is_compiling_flag = property(lambda self: bool(self._is_compiling()))


def compile_flag_owner(compiler: Any, warn: Callable[[str, str], None] | None = None) -> Any:
    """What the call wrapper reads ``_is_compiling_flag`` from, resolved at install time: ``torch.compiler`` while it
    has the private flag; else an object whose flag calls the public ``torch.compiler.is_compiling()`` (said once)."""
    if hasattr(compiler, "_is_compiling_flag"):
        _refused.pop("call-wrapper", None)
        return compiler
    public = getattr(compiler, "is_compiling", None)
    detail = f"{COMPILE_FLAG} not found in this version; {_BY_KEY['call-wrapper'].fallback}"
    _refused["call-wrapper"] = detail
    quietly(warn, "host-patch-call-wrapper", f"call-wrapper: {detail}")
    return _PublicCompileFlag(public if callable(public) else (lambda: False))


def report(env: Mapping[str, str] | None = None,
           modules: Mapping[str, Any] | None = None) -> list[tuple[HostPatch, bool, str, PatchCheck]]:
    """``(entry, enabled, why, check)`` for every entry, for the doctor."""
    off = set(_keys(env)[1])
    rows = []
    for patch in PATCHES:
        on = patch.key not in off
        why = "enabled" if on else f"switched off by {DISABLE_ENV}"
        last = _refused.get(patch.key)
        if on and last is not None:
            why = f"enabled; the last install said: {last}"
        rows.append((patch, on, why, check(patch.key, modules)))
    return rows
