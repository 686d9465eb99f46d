"""The text sink: one line per report in seed 002's format, and the closing line."""

from __future__ import annotations

from collections.abc import Mapping

from trainmeter.core.text import printable
from trainmeter.sizes import format_count

MAX_TEXT_SERIES = 12  # a line stays a line; the widget and the run log have them all


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) < 1e-2 or abs(value) >= 1e4:
        return f"{value:.2e}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.4g}"


def format_line(
    step: int,
    *,
    series: Mapping[str, float | None],
    tokens_per_s: float | None = None,
    token_unit: str = "tok",
    mfu: float | None = None,
    mem_used_bytes: int | None = None,
    mem_total_bytes: int | None = None,
    extra: Mapping[str, str] | None = None,
) -> str:
    """Return ``[step N] loss=2.34 | lr=3.00e-04 | tok/s=125k | mfu=52.3% | mem=71.2/80.0GiB``.

    Memory is in binary units (GiB = 2**30 bytes), as nvidia-smi and the widget show it.

    Absent fields (``None``) are left out. ``train_loss`` is shown as ``loss``.

    Examples:
        >>> format_line(1000, series={"train_loss": 2.34, "lr": 3e-4}, tokens_per_s=125_000, mfu=0.523)
        '[step 1000] loss=2.34 | lr=3.00e-04 | tok/s=125k | mfu=52.3%'
    """
    parts = [f"[step {step}]"]
    fields: list[str] = []
    shown = [(name, value) for name, value in series.items() if value is not None]
    for name, value in shown[:MAX_TEXT_SERIES]:
        label = "loss" if name == "train_loss" else printable(name)[:40]
        fields.append(f"{label}={_num(float(value))}")
    if len(shown) > MAX_TEXT_SERIES:
        fields.append(f"+{len(shown) - MAX_TEXT_SERIES} more series")
    if tokens_per_s is not None:
        fields.append(f"{token_unit}/s={format_count(tokens_per_s)}")
    if mfu is not None:
        fields.append(f"mfu={mfu * 100:.1f}%")
    if mem_used_bytes is not None:
        used = mem_used_bytes / 2**30
        fields.append(f"mem={used:.1f}/{mem_total_bytes / 2**30:.1f}GiB" if mem_total_bytes else f"mem={used:.1f}GiB")
    for key, text in (extra or {}).items():
        fields.append(f"{printable(key)}={printable(text)}")
    if fields:
        parts.append(" | ".join(fields))
    return " ".join(parts)
