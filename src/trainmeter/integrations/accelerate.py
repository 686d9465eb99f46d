"""The accelerate adapter: ``Accelerator.prepare`` publishes its control (save only; docs/spec.md section 11). A step's
loss is the core's rule, the sum of the values ``accelerator.backward`` passed on (each divided by k), a short last
accumulation step's too (section 2). Training thread.
"""

from __future__ import annotations

from typing import Any

from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl


class AccelerateControl(FrameworkControl):
    """An ``accelerate.Accelerator``: ``save_state``; the user's loop owns its end, so no stop."""

    name, saver, can_stop = "accelerate", "save_state", False


class AccelerateAdapter(Adapter):
    """``accelerate.accelerator.Accelerator.prepare``."""

    framework = "accelerate"
    control = AccelerateControl
    sites = (Site(module="accelerate.accelerator", owner="Accelerator", attr="prepare"),
             Site(module="accelerate.accelerator", owner="Accelerator", attr="load_state"))

    def on_prepare(self, original: Any, accelerator: Any, *args: Any, **kwargs: Any) -> Any:
        """Its control is published (prepare is no fit: the accelerator stays the control)."""
        if not self.wing.depth and self.wing.gate.here():
            try:
                self.wing.begin(self, accelerator)
            except Exception as exc:
                self.wing.warn("accelerate", f"accelerate adapter disabled: {exc!r}")
        return original(accelerator, *args, **kwargs)

    def on_load_state(self, original: Any, accelerator: Any, *args: Any, **kwargs: Any) -> Any:
        """``load_state(input_dir)``: the folder it resumed from, matched to the parent's checkpoint records by the
        lineage wing (accelerate keeps no step count of the training: docs/spec.md section 22)."""
        result = original(accelerator, *args, **kwargs)
        path = args[0] if args else kwargs.get("input_dir")
        self.wing.resumed("accelerate", None, path, "detected", "accelerate load_state(" + ("input_dir)" if path else
                          ") with automatic checkpoint naming: its folder was not read"))
        return result
