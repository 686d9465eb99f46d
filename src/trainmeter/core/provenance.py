"""Provenance: where a number came from, and how a derived number was computed.

Every number trainmeter shows is either an input with a provenance or a
:class:`Derivation` whose inputs have one. A user can redo each derivation by
hand from ``formula`` and ``inputs``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Provenance = Literal["declared", "detected", "counted", "measured", "assumed"]
"""How an input was obtained.

- ``declared``: the user said so (a flag or keyword).
- ``detected``: read from the model, its config, the device or the batch.
- ``counted``: counted by trainmeter (steps, tokens, FlopCounterMode).
- ``measured``: timed or sampled by trainmeter (seconds, NVML counters).
- ``assumed``: a default trainmeter chose; always named in the UI.
"""

PROVENANCES: tuple[str, ...] = ("declared", "detected", "counted", "measured", "assumed")


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """One input of a derivation.

    Attributes:
        name: Symbol used in the formula, e.g. ``"N"`` or ``"tokens_per_s"``.
        value: The value, in ``unit``; ``None`` when missing.
        unit: Unit of ``value`` (``"FLOP"``, ``"tokens/s"``, ``"1"`` for counts).
        provenance: Where the value came from.
        source: Free text naming the concrete source (a config key, a datasheet).
    """

    name: str
    value: float | int | str | None
    unit: str
    provenance: Provenance
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Derivation:
    """A derived number with the formula and inputs that produced it.

    Attributes:
        name: Key of the derived number, e.g. ``"mfu"``.
        formula: Human-readable formula over the inputs' names.
        value: The result in ``unit``; ``None`` when an input is missing.
        unit: Unit of ``value``.
        inputs: The inputs, each with its provenance.
        missing: When ``value`` is ``None``: which input would enable it
            (for example ``"--peak-tflops X --peak-source TEXT"``).
    """

    name: str
    formula: str
    value: float | None
    unit: str
    inputs: tuple[Input, ...] = field(default_factory=tuple)
    missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (the passport's ``derivations`` entry)."""
        return asdict(self)


WEAKEST_FIRST: tuple[str, ...] = ("assumed", "declared", "detected", "measured", "counted")
"""Provenances from the weakest to the strongest: a derived number is as good as its weakest input."""


def weakest(provenances: Any) -> str | None:
    """The weakest of ``provenances`` (by :data:`WEAKEST_FIRST`), or ``None`` when there is none.

    Examples:
        >>> weakest(["counted", "detected"])
        'detected'
    """
    found = set(provenances)
    return next((p for p in WEAKEST_FIRST if p in found), None)
