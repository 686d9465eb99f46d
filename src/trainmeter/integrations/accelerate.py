"""The accelerate adapter: ``Accelerator.prepare`` publishes its control (save only), ``backward`` shows a short last
accumulation step's loss as its micro-batches' mean (docs/spec.md section 11). Training thread.
"""

from __future__ import annotations

from typing import Any

from trainmeter.core import explicit_steps
from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl


class AccelerateControl(FrameworkControl):
    """An ``accelerate.Accelerator``: ``save_state``; the user's loop owns its end, so no stop."""

    name, saver, can_stop = "accelerate", "save_state", False


class AccelerateAdapter(Adapter):
    """``accelerate.accelerator.Accelerator.prepare`` and ``backward``."""

    framework = "accelerate"
    control = AccelerateControl
    sites = (Site(module="accelerate.accelerator", owner="Accelerator", attr="prepare"),
             Site(module="accelerate.accelerator", owner="Accelerator", attr="backward"))

    def on_prepare(self, original: Any, accelerator: Any, *args: Any, **kwargs: Any) -> Any:
        """Its control is published (prepare is no fit: the accelerator stays the control)."""
        if not self.wing.depth and self.wing.gate.here():
            try:
                self.wing.begin(self, accelerator)
            except Exception as exc:
                self.wing.warn("accelerate", f"accelerate adapter disabled: {exc!r}")
        return original(accelerator, *args, **kwargs)

    def on_backward(self, original: Any, accelerator: Any, *args: Any, **kwargs: Any) -> Any:
        """A micro-batch's backward: after a short last accumulation step's (accelerate divided its p micro-batches
        by k, not p), their loss is shown as their mean."""
        result = original(accelerator, *args, **kwargs)
        monitor = self.wing.monitor
        if self.wing.depth or not self.wing.gate.here() or monitor is None:
            return result
        try:
            k = int(getattr(accelerator, "gradient_accumulation_steps", 1) or 1)
            deepspeed = "DEEPSPEED" in str(getattr(accelerator, "distributed_type", ""))  # scales in its own backward
            if k <= 1 or not accelerator.sync_gradients or deepspeed:
                return result
            parts = explicit_steps.pending_parts(monitor)
            if 0 < parts < k and explicit_steps.scale_pending(monitor, k / parts):
                self.wing.short_steps += 1
        except Exception as exc:
            self.wing.warn("accelerate", f"accelerate adapter's loss divisor disabled: {exc!r}")
        return result
