"""The adapters of Lightning, Lightning Fabric, accelerate, Ignite, skorch, fastai and stable-baselines3 (docs/spec.md
section 11; HF and Keras have their own modules). Training thread.

Fabric's and accelerate's steps are the torch optimizer's (``_FabricOptimizer`` and accelerate's wrapper step the
optimizer they wrap: one hook call); a step's loss is the core's rule, the sum of the values ``accelerator.backward``
(``Fabric.backward``) passed on, each divided by k, a short last accumulation step's too (section 2); ``Fabric.save``,
Ignite's ``Checkpoint``/``ModelCheckpoint`` and ``DiskSaver`` are savers of the time split (timesplit/savers.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

from trainmeter import api
from trainmeter.core import explicit_steps
from trainmeter.integrations.adapter import Adapter, Args, Kwargs, Site, method_dict

_LC = "trainer.connectors.logger_connector.logger_connector"


class LightningAdapter(Adapter):
    """``Trainer.fit`` (the control: ``trainer.should_stop``, read by its loop after each batch) and its logged
    metrics, read at ``_LoggerConnector.log_metrics`` (no callback hook sees them at their step), in both package
    names."""

    framework = "lightning"
    control = {"stop_flag": "should_stop", "saver": "save_checkpoint", "suffix": ".ckpt"}
    sites = tuple(site for package in ("lightning.pytorch", "pytorch_lightning") for site in (
        Site(module=f"{package}.trainer.trainer", owner="Trainer", attr="fit"),
        Site(module=f"{package}.loops.evaluation_loop", owner="_EvaluationLoop", attr="run", fit=False, phase="eval"),
        Site(module=f"{package}.trainer.connectors.checkpoint_connector", owner="_CheckpointConnector",
             attr="resume_end"),
        Site(tap="lightning", module=f"{package}.{_LC}", owner="_LoggerConnector", attr="log_metrics",
             extract=method_dict("metrics"))))
    steps_at = "global_step"

    def on_resume_end(self, original: Any, connector: Any, *args: Any, **kwargs: Any) -> Any:
        """The end of a ``fit(ckpt_path=...)``'s restore: ``trainer.global_step`` is the checkpoint's own, restored
        (docs/spec.md section 22)."""
        wing = self.wing
        with wing.guard("lightning", "resume not read"):
            trainer = connector.trainer
            if wing.depth and trainer.ckpt_path:
                wing.resumed("lightning", trainer.global_step, trainer.ckpt_path, "detected", "Lightning fit(ckpt_path"
                             f"=...): its trainer.global_step {trainer.global_step} once the checkpoint was restored")
        return original(connector, *args, **kwargs)


class FabricAdapter(Adapter):
    """``Fabric.setup`` (and ``setup_module``) publish its control, ``Fabric.load`` is checkpoint time, in both package
    names. The loop is the user's (no stop); ``Fabric.save`` needs the user's state, so trainmeter's own save writes
    the model."""

    framework = "fabric"
    control = {"can_stop": False}
    sites = tuple(site for module in ("lightning.fabric.fabric", "lightning_fabric.fabric") for site in (
        Site(module=module, owner="Fabric", attr="setup"),
        Site(module=module, owner="Fabric", attr="setup_module"),
        Site(module=module, owner="Fabric", attr="load", fit=False, phase="checkpoint")))
    on_setup = on_setup_module = Adapter.publish


class AccelerateAdapter(Adapter):
    """``Accelerator.prepare`` publishes its control (``save_state``; the user's loop owns its end, so no stop)."""

    framework = "accelerate"
    control = {"saver": "save_state", "can_stop": False}
    sites = (Site(module="accelerate.accelerator", owner="Accelerator", attr="prepare"),
             Site(module="accelerate.accelerator", owner="Accelerator", attr="load_state"))
    on_prepare = Adapter.publish

    def on_load_state(self, original: Any, accelerator: Any, *args: Any, **kwargs: Any) -> Any:
        """``load_state(input_dir)``: the folder it resumed from, matched to the parent's checkpoint records by the
        lineage wing (accelerate keeps no step count of the training: docs/spec.md section 22)."""
        result = original(accelerator, *args, **kwargs)
        path = args[0] if args else kwargs.get("input_dir")
        self.wing.resumed("accelerate", None, path, "detected", "accelerate load_state(" + ("input_dir)" if path else
                          ") with automatic checkpoint naming: its folder was not read"))
        return result


class IgniteAdapter(Adapter):
    """``ignite.engine.engine.Engine.run``: the outermost is the trainer's, which gets trainmeter's handler (a stop
    through ``engine.terminate()`` after the iteration; Ignite's savers need the user's objects, so trainmeter's own
    save writes the model); an engine run inside it (an evaluator's) is an eval span and its ``state.metrics``
    series (docs/spec.md sections 9 and 11)."""

    framework = "ignite"
    control: dict[str, Any] = {}
    sites = (Site(module="ignite.engine.engine", owner="Engine", attr="run", phase="eval",
                  when=lambda adapter, *call: bool(adapter.wing.depth)),)  # inside the trainer's run, the fit

    def wrap(self, site: Site, original: Any) -> Any:
        """The trainer's run as a fit; an evaluator's run inside it as an eval span whose metrics are recorded."""
        wing, fit = self.wing, self.fit(site, original)

        @functools.wraps(original)
        def run(engine: Any, *args: Any, **kwargs: Any) -> Any:
            if not wing.depth or not wing.gate.here():
                return fit(engine, *args, **kwargs)
            state = original(engine, *args, **kwargs)
            wing.framework_logs("ignite", getattr(state, "metrics", None))
            return state

        return self.span(site, run)

    def begin(self, site: Site, engine: Any, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs, Any]:
        from ignite.engine import Events

        engine.add_event_handler(Events.ITERATION_COMPLETED, self._iteration_completed)
        return args, kwargs, Events.ITERATION_COMPLETED

    def end(self, engine: Any, extra: Any) -> None:
        engine.remove_event_handler(self._iteration_completed, extra)

    def _iteration_completed(self, engine: Any) -> None:
        if self.wing.stop_requested("ignite"):
            engine.terminate()


SKORCH_NAME = "trainmeter"  # our entry's name in skorch's ``net.callbacks_``
SKORCH_NOT_SERIES = ("dur",)  # skorch's epoch time: trainmeter measures time itself


@functools.cache
def _skorch_callback() -> type:
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


class SkorchAdapter(Adapter):
    """``skorch.net.NeuralNet.fit_loop`` (``fit`` and ``partial_fit`` go through it) gets trainmeter's callback (each
    training batch's X counted, its epochs recorded, its stop: skorch's own, raised at the batch end;
    ``save_params``), and ``run_single_epoch`` over the validation set is an eval span."""

    framework = "skorch"
    control = {"saver": "save_params", "suffix": ".pt"}
    sites = (Site(module="skorch.net", owner="NeuralNet", attr="fit_loop"),
             Site(module="skorch.net", owner="NeuralNet", attr="run_single_epoch", fit=False, phase="eval",
                  when=lambda adapter, net, args, kwargs: bool(adapter.wing.depth) and not kwargs.get(
                      "training", args[1] if len(args) > 1 else True)))  # run_single_epoch(iterator, training=False)

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self._first_epoch = 0  # the fit's first row of net.history
        self._logged = 0  # rows of net.history recorded as series

    def begin(self, site: Site, target: Any, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs, Any]:
        """Our callback joins the net's initialized callbacks, last (a new list: the user's is unchanged); an
        uninitialized net is left to skorch's own error."""
        if not getattr(target, "initialized_", False):
            return args, kwargs, None
        self._first_epoch = self._logged = len(target.history)
        extra = _skorch_callback()(self)
        target.callbacks_ = [*target.callbacks_, (SKORCH_NAME, extra)]
        return args, kwargs, extra

    def end(self, target: Any, extra: Any) -> None:
        """Our callback leaves; an epoch whose end a callback before ours stopped (``EarlyStopping``) is recorded."""
        if extra is None:
            return
        self.wing.framework_batch("skorch", "on_batch_begin X", None)  # a batch a fault ended is over
        target.callbacks_ = [entry for entry in target.callbacks_ if entry[1] is not extra]
        self.epochs_ended(target)

    def epochs_ended(self, net: Any) -> None:
        """Record the rows of ``net.history`` not recorded yet, each epoch's values as series (``train_loss``,
        ``valid_loss``, ...: not ``dur`` nor the ``*_batch_count``; the wing leaves out ``epoch``, the ``batches``
        list and the ``*_best`` flags)."""
        rows, self._logged = net.history[self._logged:], len(net.history)
        for row in rows:
            self.wing.framework_logs("skorch", {k: v for k, v in row.items()
                                                if k not in SKORCH_NOT_SERIES and not k.endswith("_batch_count")})

    def own_steps(self, target: Any) -> int | None:
        """skorch's own count: the fit's training batches in ``net.history`` (each holds a ``train_loss``: one
        optimizer step each)."""
        with contextlib.suppress(Exception):
            return sum(1 for row in target.history[self._first_epoch:] for batch in row.get("batches", ())
                       if "train_loss" in batch)
        return None


def torch_optimizer(opt: Any) -> bool:
    """Whether a fastai learner's optimizer is a torch one (``OptimWrapper``): its steps are hooked already."""
    torch = sys.modules.get("torch")
    return torch is not None and opt is not None and isinstance(getattr(opt, "opt", opt), torch.optim.Optimizer)


@functools.cache
def _fastai_callback() -> type:
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
    """``fastai.learner.Learner.fit`` (``fit_one_cycle`` and friends go through it) gets trainmeter's callback
    (``after_step`` counts a step unless a torch optimizer does; ``after_batch`` stops by ``CancelFitException``)."""

    framework = "fastai"
    control = {"saver": "save", "absolute": True}
    sites = (Site(module="fastai.learner", owner="Learner", attr="fit", callbacks_at=3, callbacks_name="cbs"),
             Site(module="fastai.learner", owner="Learner", attr="_do_epoch_validate", fit=False,
                  phase="eval"))
    steps_at = "train_iter"
    callback_class = staticmethod(_fastai_callback)


ROLLOUT_PHASE = "rollout"


@functools.cache
def _sb3_callback() -> type:
    from stable_baselines3.common.callbacks import BaseCallback

    class TrainmeterSb3Callback(BaseCallback):
        """trainmeter's stop in ``learn``, and the policy named before the first step (it leaves with the call)."""

        def __init__(self, adapter: Sb3Adapter) -> None:
            super().__init__(verbose=0)
            self._adapter = adapter

        def _on_training_start(self) -> None:  # before the first rollout and the first optimizer step
            adapter = self._adapter
            policy = getattr(self.model, "policy", None)
            probes = adapter.wing.monitor.probes if adapter.wing.gate.here() else None
            if probes is not None and policy is not None:
                probes.watch_model(policy, "evaluate_actions" if hasattr(policy, "evaluate_actions") else None)

        def _on_step(self) -> bool:
            return not self._adapter.wing.stop_requested("stable-baselines")

    return TrainmeterSb3Callback


class Sb3Adapter(Adapter):
    """``OnPolicyAlgorithm.learn`` (PPO, A2C) and ``OffPolicyAlgorithm.learn`` (SAC, TD3, DQN, ...) get trainmeter's
    ``BaseCallback``; SB3's own ``_n_updates`` counts epochs for PPO, not optimizer steps, so it is not compared
    (``steps_at`` empty).

    Steps are the torch optimizer's (the step hook counts them). SB3 trains its policy through its methods
    (``evaluate_actions``, ...) and never calls it for training: the callback names the policy to the core before the
    first step, so the policy is the model and its batches are read from its parts (docs/spec.md section 2, "The
    model rule"), and the first training call of ``evaluate_actions`` (PPO's, A2C's) is handed to the core: the
    counted FLOPs are a pass of that method on a copy (section 5). Rollouts (the policy acting in the environment, in
    eval mode under ``no_grad``) are the ``rollout`` phase, not evaluation: ``collect_rollouts`` is the span, since it
    puts the policy in eval mode before its callbacks' ``on_rollout_start``; ``evaluate_policy`` (``EvalCallback``'s)
    is ``eval``."""

    framework = "stable-baselines"
    control = {"saver": "save", "suffix": ".zip"}  # the callback's _on_step returns False to stop
    sites = (Site(module="stable_baselines3.common.on_policy_algorithm", owner="OnPolicyAlgorithm", attr="learn",
                  callbacks_at=1, callbacks_name="callback"),
             Site(module="stable_baselines3.common.off_policy_algorithm", owner="OffPolicyAlgorithm", attr="learn",
                  callbacks_at=1, callbacks_name="callback"),
             *(Site(module=f"stable_baselines3.common.{kind}_policy_algorithm", owner=f"{kind.title()}PolicyAlgorithm",
                    attr="collect_rollouts") for kind in ("on", "off")),
             Site(module="stable_baselines3.common.callbacks", owner="", attr="evaluate_policy"),
             Site(module="stable_baselines3.common.policies", owner="ActorCriticPolicy", attr="evaluate_actions"))
    callback_class = staticmethod(_sb3_callback)

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self._phase: contextlib.ExitStack | None = None

    def enter(self, phase: str) -> None:
        """Open ``phase`` (``tm.phase``) until :meth:`leave`."""
        self.leave()
        self._phase = contextlib.ExitStack()
        self._phase.enter_context(api.phase(phase))

    def leave(self) -> None:
        """Close the phase :meth:`enter` opened, if one is open."""
        phase, self._phase = self._phase, None
        if phase is not None:
            phase.close()

    def on_collect_rollouts(self, original: Any, algorithm: Any, *args: Any, **kwargs: Any) -> Any:
        """One rollout: the ``rollout`` phase."""
        if not self.wing.gate.here():
            return original(algorithm, *args, **kwargs)
        self.enter(ROLLOUT_PHASE)
        try:
            return original(algorithm, *args, **kwargs)
        finally:
            self.leave()

    def on_evaluate_actions(self, original: Any, policy: Any, *args: Any, **kwargs: Any) -> Any:
        """A call of the policy's training method: the first with gradients enabled is kept for the counted pass
        (references to its arguments only)."""
        probes = self.wing.monitor.probes if self.wing.gate.here() else None
        if probes is not None and sys.modules["torch"].is_grad_enabled():  # torch: the policy's own
            probes.keep_call(policy, args, kwargs)
        return original(policy, *args, **kwargs)

    def on_evaluate_policy(self, original: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        """``EvalCallback``'s evaluation, inside a rollout: ``eval``, and the rollout goes on after it."""
        if not self.wing.gate.here():
            return original(model, *args, **kwargs)
        rollout = self._phase is not None
        self.leave()
        try:
            with api.phase("eval"):
                return original(model, *args, **kwargs)
        finally:
            if rollout:
                self.enter(ROLLOUT_PHASE)


FRAMEWORKS = (LightningAdapter, FastaiAdapter, AccelerateAdapter, FabricAdapter, IgniteAdapter, SkorchAdapter,
              Sb3Adapter)  # the wing's ADAPTERS (integrations/extension.py) after HF's and Keras'
