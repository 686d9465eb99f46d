"""Sizes and units: parsing ``20B`` or ``1e21`` for budgets and flags, and one formatter per unit.

The formatters are shared by the widget's tiles, popovers and static snapshot, the
text line, passport.md and ``%trainmeter runs`` (and mirrored by js/src/format.ts):

- counts and tokens: SI with B for billions (``950``, ``12.3k``, ``125k``, ``1.2M``, ``20.0B``);
- FLOPs: SI prefixes (``728 GFLOP``, ``312 TFLOP/s``);
- bytes: binary (``512 B``, ``369 MiB``, ``21.9 GiB``);
- shares (0-1 fractions): percentages (``42.3%``);
- durations: ``h:mm:ss``, seconds below a minute (``0.35 s``, ``12.5 s``).

A missing or non-finite value prints as :data:`MISSING` (``format_count(None)`` keeps
the text line's ``-``). Pure functions, any thread. tests/test_sizes.py and
js/tests/units.test.ts pin the same table of cases.
"""

from __future__ import annotations

import math
import re
from typing import Any

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


MISSING = "—"
_SI_COUNT = ("", "k", "M", "B", "T")
_SI_PREFIX = ("", "k", "M", "G", "T", "P", "E")
_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _mantissa(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _scaled(value: float, base: float, units: tuple[str, ...]) -> tuple[str, str]:
    v, i = value, 0
    while i < len(units) - 1 and abs(v) >= base:
        v /= base
        i += 1
    text = _mantissa(v)
    if abs(float(text)) >= base and i < len(units) - 1:  # 999.96k rounds to "1000": one unit up
        v /= base
        i += 1
        text = _mantissa(v)
    return text, units[i]


def format_number(value: Any) -> str:
    """A plain number, 4 significant figures (``2.346``, ``0.0123``, ``1.23e-05``, ``12.3k``)."""
    v = _num(value)
    if v is None:
        return MISSING
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 10_000:
        return format_count(v)
    if a < 1e-3:
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{float(f'{v:.4g}'):g}"


def format_count(value: Any) -> str:
    """SI counts: ``950``, ``12.3k``, ``125k``, ``1.2M``, ``2.0B``; integers below 1000 exactly.

    ``-`` for ``None`` (the text line's convention), :data:`MISSING` for other non-numbers.

    Examples:
        >>> format_count(125_000)
        '125k'
        >>> format_count(2_000_000_000)
        '2.0B'
    """
    if value is None:
        return "-"
    v = _num(value)
    if v is None:
        return MISSING
    if abs(v) < 1000:
        return str(int(v)) if v == int(v) else format_number(v)
    text, unit = _scaled(v, 1000.0, _SI_COUNT)
    return f"{text}{unit}"


def format_integer(value: Any) -> str:
    """An integer with thousands separators (``12,345``): the step."""
    v = _num(value)
    return MISSING if v is None else f"{round(v):,}"


def format_bytes(value: Any) -> str:
    """Binary bytes: ``512 B``, ``1.5 KiB``, ``23.4 GiB``."""
    v = _num(value)
    if v is None:
        return MISSING
    if abs(v) < 1024:
        return f"{round(v)} B"
    text, unit = _scaled(v, 1024.0, _IEC)
    return f"{text} {unit}"


def format_percent(fraction: Any) -> str:
    """A 0-1 share as a percentage: ``0.423`` -> ``42.3%``."""
    v = _num(fraction)
    if v is None:
        return MISSING
    pct = v * 100
    return f"{pct:.2f}%" if pct != 0 and abs(pct) < 0.1 else f"{pct:.1f}%"


def format_flops(value: Any, *, per_second: bool = False) -> str:
    """FLOPs with SI prefixes: ``728 GFLOP``, ``1.2 PFLOP``, ``312 TFLOP/s``."""
    v = _num(value)
    if v is None:
        return MISSING
    text, prefix = _scaled(v, 1000.0, _SI_PREFIX)
    return f"{text} {prefix}FLOP" + ("/s" if per_second else "")


def format_duration(seconds: Any) -> str:
    """``h:mm:ss`` (``0:02:05``); negative durations clamp to 0."""
    v = _num(seconds)
    if v is None:
        return MISSING
    total = max(0, round(v))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def format_seconds(seconds: Any) -> str:
    """Short spans in seconds (``0.35 s``, ``12.5 s``), ``h:mm:ss`` from a minute up."""
    v = _num(seconds)
    if v is None:
        return MISSING
    if abs(v) >= 60:
        return format_duration(v)
    if abs(v) >= 10:
        return f"{v:.1f} s"
    return f"{float(f'{v:.2g}'):g} s"


def format_rate(value: Any, label: str = "tok/s") -> str:
    """Per-second rates: ``850 tok/s``, ``12.3k tok/s``, ``4.5 samples/s``."""
    v = _num(value)
    if v is None:
        return MISSING
    a = abs(v)
    text = (f"{v:.0f}" if a >= 100 else f"{v:.1f}") if a < 1000 else format_count(v)
    return f"{text} {label}"


def format_value(value: Any, unit: str) -> str:
    """Format a value in one of the protocol's units (docs/protocol.md, ``tiles.unit``)."""
    if isinstance(value, str):
        return value
    if _num(value) is None:
        return MISSING
    if unit in ("count", "tokens", "1"):  # "1": a derivation's dimensionless count (devices, params)
        return format_count(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "s":
        return format_seconds(value)
    if unit == "tokens/s":
        return format_rate(value)
    if unit == "samples/s":
        return format_rate(value, "samples/s")
    if unit == "fraction":
        return format_percent(value)
    if unit in ("flop", "FLOP"):
        return format_flops(value)
    if unit in ("flop/s", "FLOP/s"):
        return format_flops(value, per_second=True)
    if unit == "FLOP/token":  # a derivation's unit: the same FLOPs formatter, never "728B FLOP/token"
        return format_flops(value) + "/token"
    if unit == "":
        return format_number(value)
    v = _num(value)
    return MISSING if v is None else f"{format_number(v)} {unit}"


def format_axis(value: float, unit: str) -> str:
    """A compact axis label in ``unit`` (no unit word where the chart title says it)."""
    if unit == "bytes":
        return format_bytes(value)
    if unit == "fraction":
        return format_percent(value)
    if unit == "s":
        return format_seconds(value)
    if unit in ("flop", "flop/s"):
        text, prefix = _scaled(value, 1000.0, _SI_PREFIX)
        return f"{text}{prefix}"
    if abs(value) >= 1000:
        return _compact(value)
    return format_number(value)


def _compact(value: float) -> str:
    v, i = value, 0
    while i < len(_SI_COUNT) - 1 and abs(float(f"{v:.3g}")) >= 1000:
        v /= 1000
        i += 1
    return f"{float(f'{v:.3g}'):g}{_SI_COUNT[i]}"


def axis_labels(ticks: list[float], unit: str) -> list[str]:
    """Labels for a chart axis: :func:`format_axis`, with more digits when two would read the same.

    Examples:
        >>> axis_labels([49000.0, 49050.0, 49100.0], "tokens/s")
        ['49.00k', '49.05k', '49.10k']
    """
    labels = [format_axis(t, unit) for t in ticks]
    if len(set(labels)) == len(labels) or not ticks:
        return labels
    top = max(abs(t) for t in ticks)
    if unit == "bytes":
        div, suffix = next(((2.0 ** (10 * i), f" {u}") for i, u in reversed(list(enumerate(_IEC)))
                            if top >= 2.0 ** (10 * i)), (1.0, " B"))
    else:
        div, suffix = next(((1000.0 ** i, u) for i, u in reversed(list(enumerate(_SI_COUNT)))
                            if top >= 1000.0 ** i), (1.0, ""))
    for decimals in range(1, 8):
        labels = [f"{t / div:.{decimals}f}{suffix}" for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return labels
