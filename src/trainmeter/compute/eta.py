"""The one ETA rule: seconds left at the recent pace when the run has one, else at the training-only pace.

The progress bar, the run log's ``eta_s`` and the passport's all come from :func:`eta` (docs/spec.md section 5).
Pure; any thread; no clock is read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trainmeter.core.provenance import Derivation, Input, Quantity, as_input, finite_number, input_number

PaceName = Literal["recent", "training-only", "session"]
PACES: tuple[str, ...] = ("recent", "training-only", "session")  # last seconds (wall), inside steps, whole wall clock

NO_BUDGET = "no budget: pass --budget-tokens, --budget-steps, --budget-samples or --budget-flops"
REPORT_WINDOW = "the last report window's seconds inside training steps"
WHOLE_RUN = "the whole run's seconds inside training steps"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pace:
    """One pace an ETA can be worked out at: its name, tokens (or steps) per second (``None``: not measured yet) and
    the seconds it is over, in words."""

    name: PaceName
    per_s: float | None
    window: str


def recent_pace(recent: Any, unit: str = "tokens") -> Pace | None:
    """The recent pace from the publisher's recent figures (``tokens_per_s``, ``steps_per_s``, ``window_s``), or
    ``None`` without them (no widget, or before its first second)."""
    if recent is None:
        return None
    key = "steps_per_s" if unit == "steps" else "tokens_per_s"
    window_s = getattr(recent, "window_s", None)
    span = f"{window_s:.3g} s" if isinstance(window_s, (int, float)) else "seconds"
    if hasattr(recent, f"smoothed_{key}"):  # widget/live_rate.py: an exponential mean, so the ETA counts down steadily
        return Pace(name="recent", per_s=getattr(recent, f"smoothed_{key}"), window=f"the last {span} of steps after "
                    "the first (its startup), wall clock (every phase counts), smoothed over min(20 s, a quarter of the run)")
    return Pace(name="recent", per_s=getattr(recent, key, None),
                window=f"the last {span} of steps, wall clock (every phase counts)")


def eta_s(done: Quantity, budget: Quantity, pace: Pace, *, unit: str = "tokens") -> Derivation:
    """Seconds left at ``pace``: max(budget - done, 0) / pace, ``done`` and ``budget`` in ``unit`` (``tokens`` or
    ``steps``, naming the inputs); a Derivation named ``eta_s`` (``eta_s.session`` at the session pace), ``None`` with
    ``missing`` when an input is."""
    if pace.name not in PACES:
        raise ValueError(f"unknown pace {pace.name!r}; valid: {', '.join(PACES)}")
    seen_name, budget_name, rate_name = (("steps", "budget_steps", "steps_per_s") if unit == "steps"
                                         else ("tokens_seen", "budget_tokens", "tokens_per_s"))
    inputs = (
        as_input(seen_name, done, unit, "counted"),
        as_input(budget_name, budget, unit, "declared"),
        as_input(rate_name, pace.per_s, f"{unit}/s", "measured", f"{pace.name} {unit}/s over {pace.window}"),
        Input(name="pace", value=pace.name, unit="", provenance="declared" if pace.name == "session" else "assumed",
              source=f"which pace the ETA uses: {pace.window}"),
    )
    seen, total, rate = (input_number(i) for i in inputs[:3])
    formula = f"max({budget_name} - {seen_name}, 0) / {rate_name}"
    name = "eta_s.session" if pace.name == "session" else "eta_s"
    miss = (NO_BUDGET if total is None or total <= 0 else f"{unit} seen unknown" if seen is None else
            f"{pace.name} {unit}/s not measured yet" if rate is None or rate <= 0 else None)
    return Derivation(name=name, formula=formula, unit="s", inputs=inputs, missing=miss,
                      value=None if miss else max(total - seen, 0.0) / rate)  # type: ignore[operator]


def eta(done: Quantity, budget: Quantity, *, recent: Pace | None, training: Pace, unit: str = "tokens") -> Derivation:
    """The one ETA: :func:`eta_s` at the recent pace when the run has one (a rate above 0), else training-only."""
    pace = recent if recent is not None and (finite_number(recent.per_s) or 0) > 0 else training
    return eta_s(done, budget, pace, unit=unit)


def pace_of(derivation: Derivation | dict[str, Any] | None) -> str:
    """The pace an ETA derivation (or its dict) used; ``training-only`` when it does not say."""
    d = derivation.to_dict() if isinstance(derivation, Derivation) else derivation or {}
    return next((str(i["value"]) for i in d.get("inputs", ()) if i.get("name") == "pace" and i.get("value") in PACES),
                "training-only")
