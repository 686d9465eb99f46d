"""Alert rules ``CONDITION[:ACTION]``, comma-joined, parsed from ``--alert`` and ``tm.alert`` (docs/spec.md section 21).

Pure functions; any thread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

VERDICT_CONDITIONS = {"nan": "loss_nonfinite", "spike": "loss_spike", "throughput": "throughput_drop",
                      "starved": "data_starved"}
"""Conditions that are a verdict of the verdicts wing (verdicts/rules.py ``KINDS``)."""
CONDITIONS = (*VERDICT_CONDITIONS, "memory", "hang", "SERIES>X", "SERIES<X")
ACTIONS = ("show", "notify", "stop", "checkpoint-stop")
DEFAULT_HANG_S = 300.0
MIN_HANG_S = 5.0
DEFAULT_MEMORY_FRACTION = 0.95
MAX_RULES = 32
_SERIES = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]{0,127})\s*([<>])\s*(\S+)\Z")
_LIMITS = {"hang": ("hang seconds", DEFAULT_HANG_S, lambda s: s >= MIN_HANG_S, f"is under {MIN_HANG_S:g} seconds"),
           "memory": ("memory fraction", DEFAULT_MEMORY_FRACTION, lambda f: 0 < f <= 1, "is not a fraction in (0, 1]")}
_VALID = (f"conditions: {', '.join(CONDITIONS)} (memory=F with F in 0-1, hang=S seconds >= {MIN_HANG_S:g}); "
          f"actions: {', '.join(ACTIONS)}; e.g. nan:stop,hang=120:notify,val_loss>2.5")


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One parsed rule: ``threshold`` is the utilization (0-1) of ``memory``, the seconds of ``hang``, the value of
    ``series`` (named by ``series``; ``above``: fires above it); ``text`` the rule as written back (``nan:stop``)."""

    condition: str
    action: str
    threshold: float | None = None
    series: str | None = None
    above: bool = True
    text: str = ""


def _number(value: str, rule: str, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"invalid alert rule {rule!r}: {what} {value!r} is not a finite number; {_VALID}")
    return number


def parse_rule(text: str) -> AlertRule:
    """Parse one ``CONDITION[:ACTION]`` rule. Raises ValueError naming the bad rule and what is valid."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"invalid alert rule {text!r}: expected CONDITION[:ACTION]; {_VALID}")
    rule = text.strip()
    condition, sep, action = rule.rpartition(":")
    if not sep:
        condition, action = rule, "show"
    condition, action = condition.strip(), action.strip().lower()
    if action not in ACTIONS:
        raise ValueError(f"invalid alert rule {rule!r}: unknown action {action!r}; {_VALID}")
    name, eq, value = condition.partition("=")
    key = name.strip().lower()
    if key in VERDICT_CONDITIONS and not eq:
        return AlertRule(key, action, text=f"{key}:{action}")
    if key in _LIMITS:  # hang=S, memory=F
        what, default, valid, why = _LIMITS[key]
        number = _number(value, rule, what) if eq else default
        if not valid(number):
            raise ValueError(f"invalid alert rule {rule!r}: {key}={value} {why}; {_VALID}")
        return AlertRule(key, action, number, text=f"{key}={number:g}:{action}")
    match = _SERIES.match(condition)
    if match is not None:
        series, op, value = match.groups()
        threshold = _number(value, rule, "threshold")
        return AlertRule("series", action, threshold, series=series, above=op == ">",
                         text=f"{series}{op}{threshold:g}:{action}")
    raise ValueError(f"invalid alert rule {rule!r}: unknown condition {condition!r}; {_VALID}")


def parse_rules(value: str | Iterable[str] | None) -> tuple[AlertRule, ...]:
    """Parse ``--alert`` (comma-separated) or a list of rules; ``()`` for ``None``.
    Raises ValueError for a bad rule, too many rules, or a condition given twice."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    rules = tuple(item if isinstance(item, AlertRule) else parse_rule(item) for item in items)
    if len(rules) > MAX_RULES:
        raise ValueError(f"invalid --alert: {len(rules)} rules, at most {MAX_RULES}")
    keys = [(r.condition, r.series, r.above) for r in rules]
    twice = next((r for i, r in enumerate(rules) if keys[i] in keys[:i]), None)
    if twice is not None:
        raise ValueError(f"invalid --alert: the condition of {twice.text!r} is given twice; give each once")
    return rules
