"""The Lightning Fabric adapter (``lightning.fabric`` and ``lightning_fabric``): ``Fabric.setup`` publishes its control,
``Fabric.load`` is checkpoint time (docs/spec.md section 11). Its steps are the torch optimizer's (``_FabricOptimizer``
steps the optimizer it wraps: one hook call), its loss what ``Fabric.backward`` passes to torch's backward, and
``Fabric.save`` is a saver of the time split (timesplit/savers.py). Training thread.
"""

from __future__ import annotations

from typing import Any

from trainmeter.integrations.adapter import Adapter, Site
from trainmeter.integrations.view import FrameworkControl


class FabricControl(FrameworkControl):
    """A ``Fabric``: the loop is the user's (no stop); ``Fabric.save`` needs the user's state, so trainmeter's own
    save writes the model."""

    name, can_stop = "fabric", False


class FabricAdapter(Adapter):
    """``Fabric.setup`` (and ``setup_module``) and ``Fabric.load``, in both package names."""

    framework = "fabric"
    control = FabricControl
    sites = tuple(site for module in ("lightning.fabric.fabric", "lightning_fabric.fabric") for site in (
        Site(module=module, owner="Fabric", attr="setup"),
        Site(module=module, owner="Fabric", attr="setup_module"),
        Site(module=module, owner="Fabric", attr="load", fit=False, phase="checkpoint")))

    def on_setup(self, original: Any, fabric: Any, *args: Any, **kwargs: Any) -> Any:
        """Its control is published (setup is no fit: the Fabric stays the control)."""
        if not self.wing.depth and self.wing.gate.here():
            try:
                self.wing.begin(self, fabric)
            except Exception as exc:
                self.wing.warn("fabric", f"fabric adapter disabled: {exc!r}")
        return original(fabric, *args, **kwargs)

    on_setup_module = on_setup
