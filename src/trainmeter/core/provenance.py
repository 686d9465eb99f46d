"""Provenance: where a number came from, how a derived number was computed; a derived number is as good as its
weakest input (docs/spec.md, "Provenance"). Pure; any thread."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Provenance = Literal["declared", "detected", "counted", "measured", "assumed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """One input of a derivation: its symbol in the formula, value (``None``: missing) in ``unit`` (``"1"`` for
    counts), provenance and the concrete source (a config key, a datasheet)."""

    name: str
    value: float | int | str | None
    unit: str
    provenance: Provenance
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Derivation:
    """A derived number (``value`` in ``unit``, ``None`` when an input is missing) with its formula over the
    inputs' names and its inputs; ``missing`` names the input that would enable a ``None``."""

    name: str
    formula: str
    value: float | None
    unit: str
    inputs: tuple[Input, ...] = field(default_factory=tuple)
    missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The passport's ``derivations`` entry: ``dataclasses.asdict``'s, without its deep copies."""
        return {"name": self.name, "formula": self.formula, "value": self.value, "unit": self.unit,
                "inputs": tuple({f: getattr(i, f) for f in Input.__slots__} for i in self.inputs),
                "missing": self.missing}


WEAKEST_FIRST: tuple[str, ...] = ("assumed", "declared", "detected", "measured", "counted")
"""Provenances from the weakest to the strongest: a derived number is as good as its weakest input."""


def weakest(provenances: Any) -> str | None:
    """The weakest of ``provenances`` (by :data:`WEAKEST_FIRST`), or ``None`` when there is none."""
    found = set(provenances)
    return next((p for p in WEAKEST_FIRST if p in found), None)


def as_provenance(label: Any, default: Provenance = "detected") -> Provenance:
    """``label`` when it is one of the five (a label read back from a passport), else ``default``."""
    return label if label in WEAKEST_FIRST else default  # type: ignore[return-value]


def derived_provenance(derivation: Derivation, default: Provenance = "detected") -> Provenance:
    """The provenance of a derived number: the weakest of its inputs' (``default`` when it has none)."""
    return as_provenance(weakest(i.provenance for i in derivation.inputs), default)


Quantity = int | float | Input | Derivation | None  # a Derivation stands for its value


def as_input(symbol: str, quantity: Quantity, unit: str, provenance: Provenance, source: str = "") -> Input:
    """``quantity`` as an :class:`Input` named ``symbol``: an Input keeps its provenance, a Derivation gets
    :func:`derived_provenance` and its formula as source, a plain number gets ``provenance``."""
    if isinstance(quantity, Derivation):
        return Input(name=symbol, value=quantity.value, unit=quantity.unit or unit,
                     provenance=derived_provenance(quantity), source=f"{quantity.name} = {quantity.formula}")
    if isinstance(quantity, Input):
        return replace(quantity, name=symbol, unit=quantity.unit or unit, source=quantity.source or source)
    return Input(name=symbol, value=quantity, unit=unit, provenance=provenance, source=source)


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (missing, text, a bool, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def input_number(inp: Input) -> float | None:
    """The input's value as a finite float, or ``None`` (:func:`finite_number`)."""
    return finite_number(inp.value)
