"""What the compute wing publishes to the others: a frozen view of its figures (``monitor.extension("compute")``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainmeter.core.provenance import Derivation, input_number

if TYPE_CHECKING:
    from trainmeter.compute.peaks import PeakRow


@dataclass(frozen=True)
class ComputeView:
    """The compute wing's figures at the time of asking (any thread; the mappings are never changed in place): the
    ``--convention``, F by convention and ``counted``, the peak (or why none), every derived figure by name as of the
    last report, the ``unit`` (docs/spec.md section 5, "Units") and why the conventions are withheld, if they are."""

    convention: str | None = None
    flops_per_token: Mapping[str, Derivation] = field(default_factory=dict)
    counted: Derivation | None = None
    peak: PeakRow | None = None
    peak_missing: str | None = None
    derived: Mapping[str, Derivation] = field(default_factory=dict)
    unit: str = "tokens"
    conventions_missing: str | None = None

    def mfu(self, convention: str | None = None) -> Derivation | None:
        """Training-only MFU under ``convention`` (default: the chosen one), or ``None`` when not derived."""
        conv = convention or self.convention
        return self.derived.get(f"mfu[{conv}]") if conv else None

    def flop_per_s(self, convention: str | None = None) -> Derivation | None:
        """Model FLOP/s per device under ``convention`` (default: the chosen one) at the training-only pace: F x
        tokens/s, the numerator of its MFU (the GPU ladder's arithmetic intensity, docs/spec.md section 8), or
        ``None`` when that MFU is not derived; known without a peak."""
        inputs = {i.name: i for i in getattr(self.mfu(convention), "inputs", ())}
        f, rate = inputs.get("F"), inputs.get("tokens_per_s")
        if f is None or rate is None:
            return None
        value = (input_number(f) or 0.0) * (input_number(rate) or 0.0)
        return Derivation(name="flop_per_s", formula="F * tokens_per_s", value=value or None, unit="FLOP/s",
                          inputs=(f, rate), missing=None if value else "FLOPs per token or tokens/s not known yet")

    def flops_spent(self, convention: str | None = None) -> Derivation | None:
        """FLOPs spent so far under ``convention`` (default: the chosen one), or ``None``."""
        conv = convention or self.convention
        return self.derived.get(f"flops_spent[{conv}]") if conv else None

    def mfu_by_convention(self) -> dict[str, float | None]:
        """Training-only MFU (0-1) of every convention derived (``counted`` included)."""
        return {name[4:-1]: d.value for name, d in self.derived.items() if name.startswith("mfu[")}
