"""The text sink: one line per report in docs/spec.md section 7's format, and the closing line."""

from __future__ import annotations

from collections.abc import Mapping

from trainmeter.core.text import printable
from trainmeter.core.throughput import BATCH_CALL
from trainmeter.sizes import format_gib, format_number, format_percent, format_rate, format_scientific

LOSS_NAME = "train_loss"
SEED_ORDER = (LOSS_NAME, "lr", "grad_norm")  # then train_tok/s, mfu, mem, then other series and extras
# What frameworks log under other names, recorded by the taps: used when trainmeter's own series is absent.
SERIES_ALIASES: dict[str, tuple[str, ...]] = {
    LOSS_NAME: ("loss",),  # Hugging Face Trainer.log: the line's loss= is one field
    "lr": ("learning_rate",),  # Hugging Face Trainer.log
    "grad_norm": ("grad_2.0_norm_total",),  # Lightning: self.log_dict(grad_norm(self, norm_type=2))
}


def seed_values(latest: Mapping[str, float | None]) -> dict[str, float | None]:
    """Latest values with the step line's names (docs/spec.md section 7) filled from their aliases (dropped, with
    ``lr/<group>``).

    Examples:
        >>> seed_values({"train_loss": 2.0, "learning_rate": 1e-3, "epoch": 0.5})
        {'train_loss': 2.0, 'epoch': 0.5, 'lr': 0.001}
    """
    out = {name: value for name, value in latest.items()
           if not name.startswith("lr/") and not any(name in names for names in SERIES_ALIASES.values())}
    for name, aliases in SERIES_ALIASES.items():
        value = next((latest[a] for a in aliases if latest.get(a) is not None), None)
        if out.get(name) is None and value is not None:
            out[name] = value
    return out
MAX_TEXT_SERIES = 12  # a line stays a line; the widget and the run log have them all


def format_line(step: int, *, series: Mapping[str, float | None], loss_ema: tuple[float, int] | None = None,
                tokens_per_s: float | None = None, token_unit: str | None = "tok", mfu: float | None = None,
                mem_used_bytes: int | None = None, mem_total_bytes: int | None = None,
                extra: Mapping[str, str] | None = None) -> str:
    """Return ``[step N] loss=2.346 (ema~50 2.41) | lr=3.00e-04 | grad_norm=1.2 | train_tok/s=125k | mfu=52.3% |
    mem=71.2/80GiB`` (docs/spec.md section 7; absent fields left out; ``token_unit`` ``None``: no batch was read, the
    rate is ``—``). ``loss_ema``: the smoothed loss and its window in steps (optim/smoothing.py). The rate is the
    training-only one: ``train_`` says so.

    Examples:
        >>> format_line(1000, series={"train_loss": 2.34, "lr": 3e-4}, loss_ema=(2.41, 50), tokens_per_s=125_000)
        '[step 1000] loss=2.34 (ema~50 2.41) | lr=3.00e-04 | train_tok/s=125k'
    """
    fields: list[str] = []
    if (loss := series.get(LOSS_NAME)) is not None:
        ema = f" (ema~{loss_ema[1]:,} {format_number(loss_ema[0])})" if loss_ema is not None else ""
        fields.append(f"loss={format_number(loss)}{ema}")
    fields += [f"{name}={form(value)}" for name, form in (("lr", format_scientific), ("grad_norm", format_number))
               if (value := series.get(name)) is not None]
    if token_unit is None:  # no batch read: the rate is unknown, never 0 (docs/spec.md section 7)
        fields.append(f"rate=— (no batch read: {BATCH_CALL})")
    elif tokens_per_s is not None:
        fields.append(f"train_{token_unit}/s={format_rate(tokens_per_s, '')}")
    if mfu is not None:
        fields.append(f"mfu={format_percent(mfu)}")
    if mem_used_bytes is not None:
        total = f"/{format_gib(mem_total_bytes, whole=True)}" if mem_total_bytes else ""
        fields.append(f"mem={format_gib(mem_used_bytes)}{total}GiB")
    others = [(name, value) for name, value in series.items() if value is not None and name not in SEED_ORDER]
    fields += [f"{printable(name)[:40]}={format_number(value)}" for name, value in others[:MAX_TEXT_SERIES]]
    if len(others) > MAX_TEXT_SERIES:
        fields.append(f"+{len(others) - MAX_TEXT_SERIES} more series")
    fields += [f"{printable(key)}={printable(text)}" for key, text in (extra or {}).items()]
    return f"[step {step}] " + " | ".join(fields) if fields else f"[step {step}]"
