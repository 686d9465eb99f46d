"""The stable-baselines3 adapter: ``learn`` of on- and off-policy algorithms gets trainmeter's ``BaseCallback``
(docs/spec.md section 11). Training thread.

Steps are the torch optimizer's (the step hook counts them). SB3 trains its policy through its methods
(``evaluate_actions``, ...) and never calls it for training: the callback names the policy to the core before the
first step, so the policy is the model and its batches are read from its parts (docs/spec.md section 2, "The model
rule"), and the first training call of ``evaluate_actions`` (PPO's, A2C's) is handed to the core: the counted FLOPs
are a pass of that method on a copy (section 5). Rollouts (the policy acting in the environment, in eval mode under ``no_grad``) are the ``rollout`` phase,
not evaluation: ``collect_rollouts`` is the span, since it puts the policy in eval mode before its callbacks'
``on_rollout_start``; ``evaluate_policy`` (``EvalCallback``'s) is ``eval``.
"""

from __future__ import annotations

import functools
import sys
from contextlib import ExitStack
from typing import Any

from trainmeter import api
from trainmeter.integrations.adapter import Adapter, Site

ROLLOUT_PHASE = "rollout"


@functools.cache
def _callback_class() -> type:
    from stable_baselines3.common.callbacks import BaseCallback

    class TrainmeterSb3Callback(BaseCallback):
        """trainmeter's stop in ``learn``, and the policy named before the first step (it leaves with the call)."""

        def __init__(self, adapter: Sb3Adapter) -> None:
            super().__init__(verbose=0)
            self._adapter = adapter

        def _on_training_start(self) -> None:  # before the first rollout and the first optimizer step
            adapter = self._adapter
            monitor = adapter.wing.monitor
            policy = getattr(self.model, "policy", None)
            probes = getattr(monitor, "probes", None)
            if probes is not None and policy is not None and adapter.wing.gate.here():
                probes.watch_model(policy, "evaluate_actions" if hasattr(policy, "evaluate_actions") else None)

        def _on_step(self) -> bool:
            return not self._adapter.wing.stop_requested("stable-baselines")

    return TrainmeterSb3Callback


class Sb3Adapter(Adapter):
    """``OnPolicyAlgorithm.learn`` (PPO, A2C) and ``OffPolicyAlgorithm.learn`` (SAC, TD3, DQN, ...); SB3's own
    ``_n_updates`` counts epochs for PPO, not optimizer steps, so it is not compared (``steps_at`` empty)."""

    framework = "stable-baselines"
    control = {"saver": "save", "suffix": ".zip"}  # the callback's _on_step returns False to stop
    sites = (Site(module="stable_baselines3.common.on_policy_algorithm", owner="OnPolicyAlgorithm", attr="learn",
                  callbacks_at=1, callbacks_name="callback"),
             Site(module="stable_baselines3.common.off_policy_algorithm", owner="OffPolicyAlgorithm", attr="learn",
                  callbacks_at=1, callbacks_name="callback"),
             *(Site(module=f"stable_baselines3.common.{kind}_policy_algorithm", owner=f"{kind.title()}PolicyAlgorithm",
                    attr="collect_rollouts", fit=False) for kind in ("on", "off")),
             Site(module="stable_baselines3.common.callbacks", owner="", attr="evaluate_policy", fit=False),
             Site(module="stable_baselines3.common.policies", owner="ActorCriticPolicy", attr="evaluate_actions",
                  fit=False))

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self._phase: ExitStack | None = None

    def callback(self) -> Any:
        """An SB3 ``BaseCallback``: the policy named at the training start, ``_on_step`` stops."""
        return _callback_class()(self)

    def enter(self, phase: str) -> None:
        """Open ``phase`` (``tm.phase``) until :meth:`leave`."""
        self.leave()
        self._phase = ExitStack()
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
        if self.wing.gate.here() and sys.modules["torch"].is_grad_enabled():  # torch: the policy's own
            probes = getattr(self.wing.monitor, "probes", None)
            if probes is not None:
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
