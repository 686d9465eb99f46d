"""The Hugging Face adapter (TRL's and sentence-transformers' trainers are subclasses): ``Trainer.train`` and
``Trainer.evaluate`` get two TrainerCallbacks, first and last of the list: the first records what ``Trainer.log`` was
given and holds the other taps off until the last (recorded once); the last carries out a stop. ``training_step``'s
``inputs`` are the step's batch. Training thread.
"""

from __future__ import annotations

import functools
from typing import Any

from trainmeter.integrations.adapter import Adapter, Args, Kwargs, Site, scalars


def as_passed(args: Any, logs: Any) -> dict[str, Any]:
    """The scalars of ``logs`` as ``Trainer.log`` was given them: it adds ``epoch`` before its callbacks see them
    (and with ``include_num_input_tokens_seen`` the token count, and to a step's log its speed)."""
    added = {"epoch"}
    if getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False, None):
        added.add("num_input_tokens_seen")
        if hasattr(logs, "__contains__") and "loss" in logs:
            added.update(("train_runtime", "train_tokens_per_second"))
    return {k: v for k, v in scalars(logs).items() if k not in added}


@functools.cache
def callback_class() -> type:
    """trainmeter's ``transformers.TrainerCallback``, made at the first train call: ``cls(adapter, last)``."""
    from transformers import TrainerCallback

    class TrainmeterTrainerCallback(TrainerCallback):
        """trainmeter's logs and stop in ``Trainer.train`` (removed with the train call)."""

        def __init__(self, adapter: HfAdapter, last: bool) -> None:
            self._adapter = adapter
            self._last = last

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if not self._last:
                self._adapter.began(args, state)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            self._adapter.logged(args, logs, self._last)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self._last and self._adapter.wing.stop_requested("hf"):
                control.should_training_stop = True
            return control

    return TrainmeterTrainerCallback


class HfAdapter(Adapter):
    """``transformers.Trainer.train``: its logs (for the taps), its stop (the last callback sets
    ``control.should_training_stop`` at the step end) and ``save_model``."""

    framework = "hf"
    control = {"saver": "save_model"}
    sites = (Site(module="transformers.trainer", owner="Trainer", attr="train", logs=True),
             Site(module="transformers.trainer", owner="Trainer", attr="evaluate", logs=True, fit=False,
                  phase="eval"),
             Site(module="transformers.trainer", owner="Trainer", attr="training_step"))
    steps_at = "state.global_step"

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self._held = 0  # taps held off by the first callback's on_log, until the last one's
        self._resume: Any = None  # the train call's resume_from_checkpoint

    def begin(self, site: Site, target: Any, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs, Any]:
        if site.attr == "train":
            self._resume = args[0] if args else kwargs.get("resume_from_checkpoint")
        pair = (callback_class()(self, False), callback_class()(self, True))  # the first and the last of the list
        listed = target.callback_handler.callbacks
        listed.insert(0, pair[0])
        listed.append(pair[1])
        return args, kwargs, pair

    def end(self, target: Any, extra: Any) -> None:
        self.wing.gate.depth -= self._held
        self._held = 0
        for one in extra:
            target.remove_callback(one)

    def began(self, args: Any, state: Any) -> None:
        """``on_train_begin`` of a ``train(resume_from_checkpoint=...)``: the Trainer loaded that folder's
        ``trainer_state.json``, so ``state.global_step`` is its own step resumed from (``True``: its output_dir's last
        checkpoint, found as it finds it)."""
        resume = self._resume
        if resume is None or resume is False:
            return
        with self.wing.guard("hf", "resume not read"):
            if resume is True:
                from transformers.trainer_utils import get_last_checkpoint

                resume = get_last_checkpoint(args.output_dir)
            self.wing.resumed("hf", state.global_step, resume, "detected", "HF Trainer train(resume_from_checkpoint="
                              f"...): its state.global_step {state.global_step} at on_train_begin")

    def on_training_step(self, original: Any, trainer: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.training_step(model, inputs)``: its ``inputs`` are the step's batch (a micro-batch of it), counted
        in the model's calls' stead (docs/spec.md section 2, "The batch rule")."""
        wing = self.wing
        if not wing.depth:  # outside a train call: the model's calls count
            return original(trainer, model, inputs, *args, **kwargs)
        wing.framework_batch("hf", "training_step inputs", inputs)
        try:
            return original(trainer, model, inputs, *args, **kwargs)
        finally:
            wing.framework_batch("hf", "training_step inputs", None)

    def logged(self, args: Any, logs: Any, last: bool) -> None:
        """One ``Trainer.log``: the first callback records it, the last lets the other taps record again."""
        gate = self.wing.gate
        if last:
            gate.depth -= self._held
            self._held = 0
        elif gate.here():
            if not gate.depth and self.wing.taps.on:
                self.wing.taps.record("transformers", as_passed(args, logs))
            gate.depth += 1
            self._held += 1
