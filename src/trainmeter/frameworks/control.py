"""Stop and save through a training framework's own mechanism: the ``FrameworkControl`` seam and one per framework.

The frameworks wing publishes the control of the framework training now in its view
(``monitor.extension("frameworks").control``); the controls wing calls it at a step boundary
(docs/spec.md section 11). ``request_stop`` only sets what the framework itself reads at its next
step boundary (nothing is interrupted); ``save_checkpoint`` calls the framework's saver, whose
files and time the checkpoint spans record like any other save.

Thread safety: ``request_stop`` may be called from any thread (it sets one flag);
``save_checkpoint`` runs the framework's saver and belongs on the training thread.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

SAVE_NAME = "trainmeter-checkpoint"  # the file or folder a control writes inside dir_path


@runtime_checkable
class FrameworkControl(Protocol):
    """Stop and save through the framework that is training.

    Attributes:
        name: ``"hf"``, ``"lightning"``, ``"keras"``, ``"fastai"`` or ``"accelerate"``.
    """

    name: str

    def request_stop(self) -> bool:
        """Ask the framework to end at its next step boundary through its own mechanism; ``False`` if it cannot."""
        ...

    def save_checkpoint(self, dir_path: str) -> str | None:
        """Save through the framework's saver into ``dir_path``; the path written, or ``None`` if it has none."""
        ...


class _Held:
    """Holds the framework object weakly: a control never keeps a trainer alive."""

    name = ""

    def __init__(self, target: Any) -> None:
        self._ref = weakref.ref(target)
        self.stop_requested = False

    def _target(self) -> Any:
        target = self._ref()
        if target is None:
            raise RuntimeError(f"the {self.name} object this control drove is gone")
        return target


class HfControl(_Held):
    """A ``transformers.Trainer``: the adapter's callback sets ``control.should_training_stop`` at the step end."""

    name = "hf"

    def request_stop(self) -> bool:
        self._target()
        self.stop_requested = True
        return True

    def save_checkpoint(self, dir_path: str) -> str | None:
        trainer = self._target()
        path = str(Path(dir_path) / SAVE_NAME)
        trainer.save_model(path)
        return path


class LightningControl(_Held):
    """A Lightning ``Trainer``: ``trainer.should_stop`` (read by its loop after each batch)."""

    name = "lightning"

    def request_stop(self) -> bool:
        self._target().should_stop = True
        self.stop_requested = True
        return True

    def save_checkpoint(self, dir_path: str) -> str | None:
        trainer = self._target()
        path = str(Path(dir_path) / f"{SAVE_NAME}.ckpt")
        trainer.save_checkpoint(path)
        return path


class KerasControl(_Held):
    """A Keras 3 model in ``fit``: ``model.stop_training`` (read after each batch)."""

    name = "keras"

    def request_stop(self) -> bool:
        self._target().stop_training = True
        self.stop_requested = True
        return True

    def save_checkpoint(self, dir_path: str) -> str | None:
        model = self._target()
        path = str(Path(dir_path) / f"{SAVE_NAME}.keras")
        model.save(path)
        return path


class FastaiControl(_Held):
    """A fastai ``Learner``: the adapter's callback raises ``CancelFitException`` at the batch end."""

    name = "fastai"

    def request_stop(self) -> bool:
        self._target()
        self.stop_requested = True
        return True

    def save_checkpoint(self, dir_path: str) -> str | None:
        learner = self._target()
        written = learner.save(Path(dir_path).absolute() / SAVE_NAME)
        return str(written) if written is not None else None


class AccelerateControl(_Held):
    """An ``accelerate.Accelerator``: ``save_state``; the user's loop owns its end, so no stop."""

    name = "accelerate"

    def request_stop(self) -> bool:
        return False

    def save_checkpoint(self, dir_path: str) -> str | None:
        accelerator = self._target()
        path = str(Path(dir_path) / SAVE_NAME)
        written = accelerator.save_state(path)
        return str(written) if written is not None else path
