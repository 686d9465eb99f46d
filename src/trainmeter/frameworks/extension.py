"""Framework adapters: each framework's own fit/train attaches trainmeter's callback and control, no code change.

Extension ``"frameworks"`` (docs/spec.md section 11). While the run is active, a post-import hook
wraps the entry points below (a library imported before the run is wrapped at once); the wrapper
calls the original with the same arguments, after adding the adapter's callback to the
framework's own list (a new list: the user's is not changed) and before removing it:

| framework | wrapped | steps from | control |
| --- | --- | --- | --- |
| Hugging Face / TRL | ``transformers.trainer.Trainer.train`` | torch.optim step hook | ``HfControl`` |
| Lightning | ``Trainer.fit`` (``lightning.pytorch``, ``pytorch_lightning``) | torch.optim hook | ``LightningControl`` |
| Keras 3 (torch) | ``TorchTrainer.fit`` (``keras.src.backend.torch``) | its callback's batch end | ``KerasControl`` |
| Keras 3 (torch) | ``TorchTrainer.train_on_batch`` | each call | |
| Keras 3 (torch) | ``BaseOptimizer.apply`` (``keras.src.optimizers``) | each update of the fitted model's optimizer | |
| fastai | ``fastai.learner.Learner.fit`` | its callback's ``after_step`` (a fastai optimizer) | ``FastaiControl`` |
| accelerate | ``accelerate.accelerator.Accelerator.prepare``, ``backward`` | torch.optim hook | ``AccelerateControl`` |

A Keras step is each update its fitted model's optimizer applies (``optimizer.iterations``: several per
``train_function`` call under ``steps_per_execution``, and a custom ``train_step``'s own), its batch end
counting one only where no update was seen (an optimizer whose ``apply`` is its own). The model a Keras
or fastai fit trains is watched as a candidate when the fit begins, so its batches are counted from the
first step. The framework's own step count (``global_step``,
``iterations``, ``train_iter``) is kept at the fit's end for the passport, beside ours. A run
whose backward calls came with no step trainmeter knows gets one warning, at the next report,
saying how to count them (``tm.step()``). accelerate's ``backward`` divides each micro-batch by
``gradient_accumulation_steps`` k, also on a short last step of p < k micro-batches: that step's
loss is multiplied by k / p after its last backward, so it is their mean like the full steps'.

Thread safety: the wrappers act on the training thread of the training process only (a
:class:`~trainmeter.core.patches.Gate`); :meth:`view` and ``control.request_stop`` from any thread.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainmeter.core import explicit_steps, host_patches
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.patches import Gate, Patches, PostImportHooks
from trainmeter.frameworks import callbacks, control, reads
from trainmeter.frameworks.view import FrameworksView

if TYPE_CHECKING:
    from trainmeter.core.monitor import Monitor

_LT = "trainer.trainer"


@dataclass(frozen=True, slots=True, kw_only=True)
class FitSite:
    """One framework entry point the wing wraps.

    Attributes:
        framework: The control's name.
        module: Module holding ``owner`` (wrapped once imported).
        owner: Class name in ``module``.
        attr: The method wrapped.
        callbacks_at: Position of the callbacks argument after ``self`` (``-1``: none).
        callbacks_name: Its keyword.
    """

    framework: str
    module: str
    owner: str
    attr: str
    callbacks_at: int = -1
    callbacks_name: str = ""


SITES: tuple[FitSite, ...] = (
    FitSite(framework="hf", module="transformers.trainer", owner="Trainer", attr="train"),
    FitSite(framework="lightning", module=f"lightning.pytorch.{_LT}", owner="Trainer", attr="fit"),
    FitSite(framework="lightning", module=f"pytorch_lightning.{_LT}", owner="Trainer", attr="fit"),
    FitSite(framework="keras", module="keras.src.backend.torch.trainer", owner="TorchTrainer", attr="fit",
            callbacks_at=5, callbacks_name="callbacks"),
    FitSite(framework="keras", module="keras.src.backend.torch.trainer", owner="TorchTrainer", attr="train_on_batch"),
    FitSite(framework="keras", module="keras.src.optimizers.base_optimizer", owner="BaseOptimizer", attr="apply"),
    FitSite(framework="keras", module="keras.src.optimizers.base_optimizer", owner="BaseOptimizer",
            attr="scale_loss"),
    FitSite(framework="keras", module="keras.src.optimizers.loss_scale_optimizer", owner="LossScaleOptimizer",
            attr="scale_loss"),
    FitSite(framework="fastai", module="fastai.learner", owner="Learner", attr="fit", callbacks_at=3,
            callbacks_name="cbs"),
    FitSite(framework="accelerate", module="accelerate.accelerator", owner="Accelerator", attr="prepare"),
    FitSite(framework="accelerate", module="accelerate.accelerator", owner="Accelerator", attr="backward"),
)
CONTROLS = {"hf": control.HfControl, "lightning": control.LightningControl, "keras": control.KerasControl,
            "fastai": control.FastaiControl, "accelerate": control.AccelerateControl}
OWN_SERIES = ("train_loss", "tokens_per_step")  # measured by trainmeter: a logged name of these is prefixed
STEPS_SOURCE = {"keras": "keras optimizer updates (BaseOptimizer.apply; else its callback's on_train_batch_end)",
                "fastai": "fastai callback (after_step)"}


def _with_callback(site: FitSite, args: tuple[Any, ...], kwargs: dict[str, Any], extra: Any) -> tuple[Any, Any]:
    """``args, kwargs`` with ``extra`` appended to the site's callbacks argument (a new list)."""
    at = site.callbacks_at
    if len(args) > at:
        given = args[at]
    else:
        given = kwargs.get(site.callbacks_name)
    if given is None:
        merged: Any = [extra]
    elif isinstance(given, (list, tuple)):
        merged = [*given, extra]
    elif site.framework == "keras":  # a keras CallbackList (or anything else): left as given
        return args, kwargs
    elif hasattr(type(given), "__iter__") and not isinstance(given, (str, bytes)):  # fastai's L (fit_one_cycle)
        merged = [*given, extra]
    else:  # one callback
        merged = [given, extra]
    if len(args) > at:
        return (*args[:at], merged, *args[at + 1:]), kwargs
    return args, {**kwargs, site.callbacks_name: merged}


class FrameworksExtension(ExtensionBase):
    """The framework adapters of one run (extension ``"frameworks"``).

    Args:
        sites: Entry points to wrap (tests pass their own).
    """

    name = "frameworks"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, sites: tuple[FitSite, ...] = SITES) -> None:
        self._sites = sites
        self._monitor: Monitor | None = None
        self._gate = Gate()
        self._patches = Patches()
        self._hooks: PostImportHooks | None = None
        self._control: Any = None
        self._framework: str | None = None
        self._depth = 0
        self.fits: dict[str, int] = {}
        self.framework_steps: dict[str, int] = {}
        self.explicit_steps: dict[str, int] = {}
        self.short_steps = 0  # accelerate's short accumulation steps shown as their mean
        self._keras: Any = None  # (model, rows of a train_on_batch batch) while a Keras fit or batch runs
        self._applied = 0  # updates of that model's optimizer counted since its last batch end
        self.patched: list[str] = []

    # -- lifecycle -----------------------------------------------------------------
    def start(self, monitor: Monitor) -> None:
        """Wrap the frameworks already imported and watch for the others."""
        self._monitor = monitor
        if not host_patches.allow("frameworks", monitor.warn_once):
            return
        self._gate.open()
        by_module: dict[str, list[FitSite]] = {}
        for site in self._sites:
            by_module.setdefault(site.module, []).append(site)
        self._hooks = PostImportHooks({name: functools.partial(self._patch_module, sites)
                                       for name, sites in by_module.items()})
        self._hooks.install()

    def stop(self) -> None:
        """Remove the hook and every wrapper (the callbacks leave with their fit). Idempotent."""
        self._gate.close()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self._patches.restore_all()
        self._control = None

    def view(self) -> FrameworksView:
        """The control of the framework in its fit now, and where steps come from (any thread)."""
        framework = self._framework
        return FrameworksView(control=self._control, framework=framework,
                              steps_source=STEPS_SOURCE.get(framework or "", "torch.optim step hook"))

    # -- wrapping ------------------------------------------------------------------
    def _patch_module(self, sites: list[FitSite], module: ModuleType) -> None:
        if not self._gate.active:
            return
        for site in sites:
            owner = getattr(module, site.owner, None)
            if not isinstance(owner, type) or not host_patches.allow(f"framework-{site.framework}", self._warn_key):
                continue
            try:
                if self._patches.wrap(owner, site.attr, functools.partial(self._make_fit, site)):
                    self.patched.append(f"{site.module}:{site.owner}.{site.attr}")
            except Exception as exc:
                self._warn(site.framework, f"{site.framework} adapter not installed: {exc!r}")

    def _make_fit(self, site: FitSite, original: Any) -> Any:
        wing = self

        @functools.wraps(original)
        def fit(target: Any, *args: Any, **kwargs: Any) -> Any:
            if site.attr == "backward":  # accelerate's: each micro-batch, divided by its accumulation count
                result = original(target, *args, **kwargs)
                if not wing._depth and wing._gate.here():
                    wing._after_backward(target)
                return result
            if site.attr == "apply":  # a keras optimizer's update: the fitted model's is one step
                return wing._keras_apply(original, target, args, kwargs)
            if site.attr == "scale_loss":  # its loss scaling, divided out of the recorded loss
                return wing._keras_scale(original, target, args, kwargs)
            if wing._depth or not wing._gate.here():
                return original(target, *args, **kwargs)
            if site.attr == "train_on_batch":  # one optimizer step of keras' own, outside fit
                if wing._monitor is not None:
                    explicit_steps.stepper(wing._monitor, "keras", target)  # its batch counted from the first call
                rows = reads.rows(args[0] if args else kwargs.get("x"))
                wing._keras, held = (target, rows), wing._keras
                try:
                    result = original(target, *args, **kwargs)
                finally:
                    wing._keras = held
                wing.framework_step("keras", target, rows)
                return result
            try:
                args, kwargs, extra = wing._begin(site, target, args, kwargs)
            except Exception as exc:
                wing._warn(site.framework, f"{site.framework} adapter disabled: {exc!r}")
                return original(target, *args, **kwargs)
            if site.framework == "accelerate":  # prepare is no fit: the accelerator stays the control
                return original(target, *args, **kwargs)
            wing._depth += 1
            try:
                return original(target, *args, **kwargs)
            finally:
                wing._depth -= 1
                wing._end(site, target, extra)

        return fit

    def _begin(self, site: FitSite, target: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        framework = site.framework
        self._control = CONTROLS[framework](target)
        self._framework = framework
        self.fits[framework] = self.fits.get(framework, 0) + 1
        extra: Any = None
        monitor = self._monitor
        if framework == "keras":
            self._keras, self._applied = (target, None), 0
            if monitor is not None:
                explicit_steps.stepper(monitor, "keras", target)  # the model watched from its first batch
            extra = callbacks.keras_callback(self)
        elif framework == "fastai":
            extra = callbacks.fastai_callback(self)
        elif framework == "hf":
            extra = callbacks.hf_callback(self)
            target.add_callback(extra)
            return args, kwargs, extra
        if extra is not None and site.callbacks_at >= 0:
            args, kwargs = _with_callback(site, args, kwargs, extra)
        return args, kwargs, extra

    def _end(self, site: FitSite, target: Any, extra: Any) -> None:
        try:
            if site.framework == "hf" and extra is not None:
                target.remove_callback(extra)
            steps = reads.framework_steps(site.framework, target)
            if steps is not None:
                self.framework_steps[site.framework] = steps
                self._compare_steps(site.framework, steps)
        except Exception as exc:
            self._warn(site.framework, f"{site.framework} adapter fault at the fit's end: {exc!r}")
        self._control = None
        self._keras = None

    def _keras_apply(self, original: Any, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One update of the fitted Keras model's optimizer (or of its loss-scale wrapper's inner one): a step."""
        held = self._keras
        result = original(optimizer, *args, **kwargs)
        if held is None or not self._gate.here():
            return result
        try:
            own = getattr(held[0], "optimizer", None)
            if optimizer is own or optimizer is getattr(own, "inner_optimizer", None):
                self.framework_step("keras", held[0], held[1], update=True)
        except Exception as exc:
            self._warn("keras", f"keras adapter's step count disabled: {exc!r}")
        return result

    def _keras_scale(self, original: Any, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The fitted model's optimizer scaled the loss before backward: the scale is divided out at backward."""
        out = original(optimizer, *args, **kwargs)
        held, loss = self._keras, args[0] if args else kwargs.get("loss")
        if held is None or out is loss or self._monitor is None or not self._gate.here():
            return out
        try:
            if optimizer is getattr(held[0], "optimizer", None):
                scale = reads.keras_loss_scale(optimizer)
                if scale is not None:
                    explicit_steps.scaled_loss(self._monitor, out, scale, loss)
        except Exception as exc:
            self._warn("keras", f"keras adapter's loss scale disabled: {exc!r}")
        return out

    def _compare_steps(self, framework: str, steps: int) -> None:
        """The framework's own count is the truth: a count of ours that differs after its one fit is said."""
        monitor = self._monitor
        if monitor is None or sum(self.fits.values()) != 1 or monitor.steps in (0, steps):
            return
        monitor.warn_once(f"framework-steps-{framework}",
                          f"{framework} counted {steps} optimizer steps, trainmeter {monitor.steps}: the step "
                          "series and rates follow trainmeter's count (passport frameworks.framework_steps)")

    def _after_backward(self, accelerator: Any) -> None:
        """A short last accumulation step: accelerate divided its p micro-batches by k, not p; shown as their mean."""
        monitor = self._monitor
        try:
            k = int(getattr(accelerator, "gradient_accumulation_steps", 1) or 1)
            if monitor is None or k <= 1 or not accelerator.sync_gradients:
                return
            if "DEEPSPEED" in str(getattr(accelerator, "distributed_type", "")):
                return  # deepspeed scales in its own backward
            parts = explicit_steps.pending_parts(monitor)
            if 0 < parts < k and explicit_steps.scale_pending(monitor, k / parts):
                self.short_steps += 1
        except Exception as exc:
            self._warn("accelerate", f"accelerate adapter's loss divisor disabled: {exc!r}")

    # -- the callbacks' calls ------------------------------------------------------
    def framework_step(self, framework: str, model: Any, samples: int | None = None, update: bool = False) -> None:
        """One optimizer step the framework made, invisible to torch's hooks (training thread).

        Keras: each ``update`` of its optimizer counts; a batch end counts one only when no update was seen since
        the last (its optimizer's ``apply`` is its own)."""
        monitor = self._monitor
        if monitor is None or not self._gate.here():
            return
        if framework == "keras":
            if update:
                self._applied += 1
            else:
                applied, self._applied = self._applied, 0
                if applied:
                    return  # the updates since the last batch end were its steps
        self.explicit_steps[framework] = self.explicit_steps.get(framework, 0) + 1
        explicit_steps.explicit_step(monitor, framework, model, samples)

    def framework_fit(self, framework: str, target: Any) -> bool:
        """A fastai fit begins (its optimizer made): whether its steps come from the callback (training thread)."""
        counts = not reads.torch_optimizer(getattr(target, "opt", None))
        monitor = self._monitor
        if counts and monitor is not None:
            explicit_steps.stepper(monitor, framework, target.model)  # the model watched from its first batch
        return counts

    def framework_logs(self, framework: str, logs: Any) -> None:
        """An epoch's logged figures (Keras' ``logs``, fastai's Recorder row) as series at this step (training thread).

        Numbers only; ``epoch`` and ``time`` are left out, and a name trainmeter measures itself (``train_loss``)
        is recorded as ``<framework>.<name>``.
        """
        monitor = self._monitor
        if monitor is None or not self._gate.here() or not hasattr(logs, "items"):
            return
        try:
            values = {(f"{framework}.{k}" if k in OWN_SERIES else str(k)): float(v) for k, v in logs.items()
                      if k not in ("epoch", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}
            info = monitor.series_info
            for name in values:
                info.setdefault(name, {"provenance": "measured",
                                       "source": f"logged by {framework} at each epoch's end"})
            if values:
                monitor.record(values)
        except Exception as exc:
            self._warn(framework, f"{framework} logs not recorded: {exc!r}")

    def stop_requested(self, framework: str) -> bool:
        """Whether the control was asked to stop (the callback ends the fit its framework's way)."""
        held = self._control
        return held is not None and held.name == framework and bool(getattr(held, "stop_requested", False))

    def _warn_key(self, key: str, message: str) -> None:
        if self._monitor is not None:
            self._monitor.warn_once(key, message)

    def _warn(self, framework: str, message: str) -> None:
        if self._monitor is not None:
            self._monitor.warn_once(f"framework-{framework}", message)

    # -- sinks ---------------------------------------------------------------------
    def on_report(self, report: Report) -> dict[str, Any] | None:
        """The one warning for backward calls with no step trainmeter knows (at the first report that sees it)."""
        monitor = self._monitor
        if monitor is not None and explicit_steps.steps_unknown(monitor):
            monitor.warn_once("steps-unseen", explicit_steps.unseen_message(monitor))
        return None

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["frameworks"]``: fits seen, where steps came from, the framework's own step count."""
        info = self._monitor.series_info.get("train_loss") if self._monitor is not None else None
        if self.short_steps and isinstance(info, dict):
            note = (f"{self.short_steps} short accumulation step(s) (fewer micro-batches than accelerate's "
                    "gradient_accumulation_steps, each divided by it) shown as the mean of their micro-batch losses")
            info["note"] = "; ".join(n for n in (info.get("note"), note) if n)
        return {"short_accumulation_steps": self.short_steps,"fits": dict(self.fits), "framework": self._framework,
                "steps_source": STEPS_SOURCE.get(self._framework or "", "torch.optim step hook"),
                "framework_steps": dict(self.framework_steps), "explicit_steps": dict(self.explicit_steps),
                "patched": sorted(set(self.patched))}
