"""Parsing of human sizes such as ``20B`` or ``1e21`` for budgets and flags."""

from __future__ import annotations

import math
import re

_SUFFIXES: dict[str, float] = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]?)\s*$")


def parse_size(text: str | int | float, *, flag: str, integer: bool = True) -> float:
    """Return the number a size string denotes.

    Accepts plain numbers (``20000``, ``1e21``, ``2.5``) and the suffixes K, M,
    B (or G) and T, case-insensitive (``20B`` is 20 x 1e9).

    Args:
        text: The value as typed, or a number.
        flag: The flag or keyword it came from, named in the error.
        integer: Whether the result must be a whole number (tokens, steps).

    Returns:
        The value as a float (a whole number when ``integer``).

    Raises:
        ValueError: Naming the bad value and what is valid.

    Examples:
        >>> parse_size("2B", flag="--budget-tokens")
        2000000000.0
        >>> parse_size("1.5k", flag="--budget-steps")
        1500.0
    """
    hint = "a positive number with an optional K, M, B or T suffix (e.g. 20B, 1.5M, 1e21)"
    if isinstance(text, bool):
        raise ValueError(f"invalid value {text!r} for {flag}: expected {hint}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _SIZE_RE.match(str(text))
        if match is None or match.group(2).upper() not in _SUFFIXES:
            raise ValueError(f"invalid value {text!r} for {flag}: expected {hint}")
        value = float(match.group(1)) * _SUFFIXES[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid value {text!r} for {flag}: expected {hint}")
    if integer:
        if value != math.floor(value):
            raise ValueError(f"invalid value {text!r} for {flag}: expected a whole number, {hint}")
    return value


def format_count(value: float | None) -> str:
    """Format a count compactly (``125k``, ``1.2M``, ``2.0B``); ``-`` for ``None``.

    The same text as the widget's tiles (:func:`trainmeter.units.format_count`), so
    the text line, passport.md and ``%trainmeter runs`` read like the dashboard.

    Examples:
        >>> format_count(125_000)
        '125k'
        >>> format_count(2_000_000_000)
        '2.0B'
    """
    if value is None:
        return "-"
    from trainmeter.units import format_count as shared

    return shared(value)
