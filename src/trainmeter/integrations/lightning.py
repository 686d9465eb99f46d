"""The Lightning adapter (``lightning.pytorch`` and ``pytorch_lightning``): ``Trainer.fit`` and its logged metrics,
read at ``_LoggerConnector.log_metrics`` (no callback hook sees them at their step: docs/spec.md section 11).
"""

from __future__ import annotations

from typing import Any

from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.loggers import method_dict
from trainmeter.integrations.view import FrameworkControl


class LightningControl(FrameworkControl):
    """A Lightning ``Trainer``: ``trainer.should_stop`` (read by its loop after each batch)."""

    name, stop_flag, saver, suffix = "lightning", "should_stop", "save_checkpoint", ".ckpt"


_LC = "trainer.connectors.logger_connector.logger_connector"


class LightningAdapter(Adapter):
    """``Trainer.fit`` (the control) and ``_LoggerConnector.log_metrics`` (the taps), in both package names."""

    framework = "lightning"
    control = LightningControl
    sites = tuple(site for package in ("lightning.pytorch", "pytorch_lightning") for site in (
        Site(module=f"{package}.trainer.trainer", owner="Trainer", attr="fit"),
        Site(module=f"{package}.loops.evaluation_loop", owner="_EvaluationLoop", attr="run", fit=False, phase="eval"),
        Site(module=f"{package}.trainer.connectors.checkpoint_connector", owner="_CheckpointConnector",
             attr="resume_end", fit=False),
        Site(tap="lightning", module=f"{package}.{_LC}", owner="_LoggerConnector", attr="log_metrics",
             extract=method_dict("metrics"))))
    steps_at = "global_step"

    def on_resume_end(self, original: Any, connector: Any, *args: Any, **kwargs: Any) -> Any:
        """The end of a ``fit(ckpt_path=...)``'s restore: ``trainer.global_step`` is the checkpoint's own, restored
        (docs/spec.md section 22)."""
        wing = self.wing
        try:
            trainer = connector.trainer
            if wing.depth and trainer.ckpt_path:
                wing.resumed("lightning", trainer.global_step, trainer.ckpt_path, "detected", "Lightning fit(ckpt_path"
                             f"=...): its trainer.global_step {trainer.global_step} once the checkpoint was restored")
        except Exception as exc:
            wing.warn("lightning", f"lightning resume not read: {exc!r}")
        return original(connector, *args, **kwargs)
