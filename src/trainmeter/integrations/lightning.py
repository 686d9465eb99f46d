"""The Lightning adapter (``lightning.pytorch`` and ``pytorch_lightning``): ``Trainer.fit`` and its logged metrics,
read at ``_LoggerConnector.log_metrics`` (no callback hook sees them at their step: docs/spec.md section 11).
"""

from __future__ import annotations

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
        Site(tap="lightning", module=f"{package}.{_LC}", owner="_LoggerConnector", attr="log_metrics",
             extract=method_dict("metrics"))))
    steps_at = "global_step"
