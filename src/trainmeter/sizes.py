"""Sizes and units: parsing ``20B`` or ``1e21`` for budgets and flags, and the one number formatter.

The rules: docs/spec.md section 12, "Number formats" (js/src/format.ts follows them too). Pure; any thread.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

_SUFFIXES: dict[str, float] = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]?)\s*$")


def parse_size(text: str | int | float, *, flag: str, integer: bool = True) -> float:
    """The number a size denotes: a number, or text with an optional K, M, B (or G) or T suffix, any case;
    ``ValueError`` naming ``flag``, the value and what is valid.

    Examples:
        >>> parse_size("2B", flag="--budget-tokens")
        2000000000.0
        >>> parse_size("1.5k", flag="--budget-steps")
        1500.0
    """
    hint = "a positive number with an optional K, M, B or T suffix (e.g. 20B, 1.5M, 1e21)"
    match = None if isinstance(text, (int, float)) else _SIZE_RE.match(str(text))  # a bool is an int
    if match is not None and match.group(2).upper() in _SUFFIXES:
        value = float(match.group(1)) * _SUFFIXES[match.group(2).upper()]
    else:  # a number (never a bool), else no size
        value = float(text) if isinstance(text, (int, float)) and not isinstance(text, bool) else math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid value {text!r} for {flag}: expected {hint}")
    if integer and value != math.floor(value):
        raise ValueError(f"invalid value {text!r} for {flag}: expected a whole number, {hint}")
    return value


MISSING = "—"
COUNT_EXACT_BELOW = 10_000
"""Whole counts below this print exactly (``1,150``, never ``1.1k``); from it up, SI (docs/spec.md, "Number formats")."""
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


def _numeric(fn: Callable[..., str]) -> Callable[..., str]:
    """``fn`` on its first argument as a finite float; :data:`MISSING` for a missing or non-finite one."""
    @functools.wraps(fn)
    def formatted(value: Any, *args: Any, **kwargs: Any) -> str:
        v = _num(value)
        return MISSING if v is None else fn(v, *args, **kwargs)

    return formatted


def _mantissa(v: float) -> str:
    text = f"{v:.1f}"
    return f"{v:.0f}" if abs(float(text)) >= 100 else text  # 99.96 is "100", not "100.0"


def _scaled(value: float, base: float, units: tuple[str, ...], mantissa: Callable[[float], str] = _mantissa
            ) -> tuple[str, str]:
    v, i = value, 0
    while i < len(units) - 1 and abs(float(mantissa(v))) >= base:  # 999.96k rounds to "1000": one unit up
        v /= base
        i += 1
    return mantissa(v), units[i]


def _distinct(values: list[float], div: float, suffix: str, decimals: range) -> list[str]:
    """``values`` over ``div`` with the fewest ``decimals`` that tell them apart (the most when none do)."""
    for places in decimals:
        labels = [f"{x / div:.{places}f}{suffix}" for x in values]
        if len(set(labels)) == len(labels):
            break
    return labels


@_numeric
def format_number(v: float) -> str:
    """A scalar (loss, grad norm): 4 significant figures (``2.346``, ``0.0123``, ``1.23e-5``, ``12.3k``)."""
    if v == 0:
        return "0"
    if not 1e-3 <= abs(float(f"{v:.2e}")) < 1e15:  # exponent form outside 0.001 to 999T
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    rounded = float(f"{v:.4g}")
    if abs(rounded) >= 10_000:
        return "".join(_scaled(v, 1000.0, _SI_COUNT))
    return f"{rounded:g}"


@_numeric
def format_scientific(v: float) -> str:
    """A learning rate: always 3 significant figures in exponent form (``3.00e-04``)."""
    return f"{v:.2e}"


@_numeric
def format_count(v: float) -> str:
    """Counts (steps, tokens, parameters): whole ones below :data:`COUNT_EXACT_BELOW` exactly, SI above.

    Examples:
        >>> format_count(1150), format_count(125_000), format_count(2_000_000_000)
        ('1,150', '125k', '2.0B')
    """
    if abs(v) < COUNT_EXACT_BELOW and v == int(v):
        return f"{int(v):,}"
    if abs(v) < 1000:
        return format_number(v)
    return "".join(_scaled(v, 1000.0, _SI_COUNT))


def format_count_pair(done: Any, total: Any) -> tuple[str, str]:
    """Two counts on one scale (``12.30k``, ``12.35k``), with digits added where they would read the same."""
    a, b = format_count(done), format_count(total)
    x, y = _num(done), _num(total)
    if a != b or x is None or y is None or x == y:
        return a, b
    unit = b.lstrip("-0123456789.,")
    a, b = _distinct([x, y], 1000.0 ** _SI_COUNT.index(unit), unit, range(1, 4))
    return a, b


@_numeric
def format_integer(v: float) -> str:
    """An integer with thousands separators (``12,345``): the step."""
    return f"{round(v):,}"


@_numeric
def format_bytes(v: float) -> str:
    """Binary bytes: ``512 B``, ``1.5 KiB``, ``23.4 GiB``."""
    if abs(round(v)) < 1024:
        return f"{round(v)} B"
    return " ".join(_scaled(v, 1024.0, _IEC))


@_numeric
def format_gib(v: float, whole: bool = False) -> str:
    """Bytes as a bare GiB number for the text line (``71.2``; whole from 10 GiB with ``whole``: ``80``)."""
    gib = v / 2**30
    return f"{gib:.0f}" if whole and gib >= 10 else f"{gib:.1f}"


@_numeric
def format_percent(v: float) -> str:
    """A 0-1 share (MFU, goodput) as a percentage: ``0.423`` -> ``42.3%``; two decimals below 0.1%."""
    pct = v * 100
    return f"{pct:.2f}%" if pct != 0 and abs(pct) < 0.1 else f"{pct:.1f}%"


@_numeric
def format_flops(v: float, *, per_second: bool = False) -> str:
    """FLOPs with SI prefixes: ``728 GFLOP``, ``1.2 PFLOP``, ``312 TFLOP/s``."""
    return " ".join(_scaled(v, 1000.0, _SI_PREFIX)) + ("FLOP/s" if per_second else "FLOP")


@_numeric
def format_joules(v: float) -> str:
    """Energy with SI prefixes: ``512 J``, ``59.1 kJ``, ``1.2 MJ``."""
    return " ".join(_scaled(v, 1000.0, _SI_PREFIX)) + "J"


@_numeric
def format_watts(v: float) -> str:
    """Power in whole watts: ``312 W``."""
    return f"{v:.0f} W"


@_numeric
def format_duration(v: float) -> str:
    """A clock, ``h:mm:ss`` (``0:01:15``): elapsed time and ETAs everywhere; negative clamps to 0."""
    total = max(0, round(v))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


@_numeric
def format_seconds(v: float) -> str:
    """A span (phase time, seconds per step): ``0.35 s``, ``12.5 s``, the clock from a minute up."""
    v = max(0.0, v)
    if float(f"{v:.1f}") >= 60:
        return format_duration(v)
    short = float(f"{v:.2g}")
    if short >= 10:
        return f"{v:.1f} s"
    if 0 < short < 1e-3:  # a sub-millisecond step: 204 µs, never 2.04e-4 s
        return f"{float(f'{v * 1e6:.3g}'):g} µs"
    if 0 < short < 0.01:
        return f"{float(f'{v * 1e3:.3g}'):g} ms"
    return f"{short:g} s"


@_numeric
def format_rate(v: float, label: str = "tok/s") -> str:
    """Per-second rates: ``850 tok/s``, ``42.2 tok/s``, ``12.3k tok/s``; the bare number when ``label`` is ``""``."""
    text = "".join(_scaled(v, 1000.0, _SI_COUNT))
    return f"{text} {label}" if label else text


_BY_UNIT: dict[str, Callable[[Any], str]] = {
    **dict.fromkeys(("count", "tokens", "1"), format_count),  # "1": a derivation's dimensionless count
    "bytes": format_bytes, "s": format_seconds, "tokens/s": format_rate, "fraction": format_percent,
    "samples/s": lambda v: format_rate(v, "samples/s"), **dict.fromkeys(("flop", "FLOP"), format_flops),
    **dict.fromkeys(("flop/s", "FLOP/s"), lambda v: format_flops(v, per_second=True)),
    # a derivation's unit: the FLOPs formatter, never "728B FLOP/token"
    "FLOP/token": lambda v: format_flops(v) + "/token", "FLOP/sample": lambda v: format_flops(v) + "/sample",
    "J": format_joules, "W": format_watts, "lr": format_scientific,  # lr: the text line's 3.00e-04, wherever shown
    "": format_number}


def format_value(value: Any, unit: str) -> str:
    """Format a value in one of the protocol's units (docs/protocol.md, ``tiles.unit``)."""
    if isinstance(value, str):
        return value
    if _num(value) is None:
        return MISSING
    by_unit = _BY_UNIT.get(unit)
    return by_unit(value) if by_unit is not None else f"{format_number(value)} {unit}"


def format_axis(value: float, unit: str) -> str:
    """A compact axis label in ``unit`` (no unit word where the chart title says it)."""
    if unit in ("bytes", "fraction", "s"):
        return _BY_UNIT[unit](value)
    if unit in ("flop", "flop/s"):
        return "".join(_scaled(value, 1000.0, _SI_PREFIX))
    if abs(value) < 1000:
        return format_number(value)
    return "".join(_scaled(value, 1000.0, _SI_COUNT, lambda v: f"{float(f'{v:.3g}'):g}"))  # 3 significant figures


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
    base, units, space = (1024.0, _IEC, " ") if unit == "bytes" else (1000.0, _SI_COUNT, "")
    i = next((i for i in reversed(range(len(units))) if top >= base**i), 0)
    return _distinct(ticks, base**i, f"{space}{units[i]}", range(1, 8))
