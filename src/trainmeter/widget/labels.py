"""Human labels for series names, with their units, in each chart spec's ``labels`` (docs/spec.md section 12). Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_FIXED: dict[str, str] = {
    "train_loss": "train loss",
    "val_loss": "validation loss",
    "train_loss.parent": "train loss, earlier runs",
    "eval_loss": "eval loss",
    "rss_bytes": "process RSS (bytes)",
    "cuda_allocated_bytes": "CUDA allocated (bytes)",
    "lr": "learning rate",
    "grad_norm": "gradient norm",
    "time.goodput": "goodput: training share (%)",
    "time.data_wait_share": "data-wait share (%)",
    "node.cpu": "node CPU (%)",
    "node.mem_used_bytes": "node memory used (bytes)",
    "node.disk_read_bytes_per_s": "disk read (bytes/s)",
    "node.disk_write_bytes_per_s": "disk write (bytes/s)",
    "node.net_rx_bytes_per_s": "network received (bytes/s)",
    "node.net_tx_bytes_per_s": "network sent (bytes/s)",
}
_RATES: dict[str, str] = {  # {u}: the run's token unit ("tokens" or "samples")
    "recent_tokens_per_s": "{u}/s, session (last 10 s, wall clock)",
    "recent_train_tokens_per_s": "{u}/s, training-only (same last 10 s)",
    "train_tokens_per_s": "{u}/s, training-only (per report window)",
    "session_tokens_per_s": "{u}/s (session, per report)",
}
_GPU = {"util": "GPU-Util (%)", "sm_activity": "SM activity (%)", "tensor_activity": "tensor activity (%)"}
_SUFFIXES = (("_bytes_per_s", "bytes/s"), ("_tokens_per_s", "tokens/s"), ("_samples_per_s", "samples/s"),
             ("_per_s", "/s"), ("_bytes", "bytes"), ("_fraction", "%"), ("_s", "s"), ("_w", "W"), ("_c", "C"))


def series_label(name: str, token_unit: str = "tokens") -> str:
    """The human label of series ``name`` (with its unit where it has one)."""
    if name in _FIXED:
        return _FIXED[name]
    if name in _RATES:
        return _RATES[name].format(u="tokens" if token_unit == "tokens" else "samples")
    head, _, reading = name.partition(".")  # gpu<index>.<reading> (string tests: no pattern compiled at import)
    if reading in _GPU and head.startswith("gpu") and head[3:].isdecimal():
        return f"GPU {head[3:]} {_GPU[reading]}"
    if name.startswith("lr/"):
        return f"learning rate, {name[3:]}"
    suffix, unit = next(((s, u) for s, u in _SUFFIXES if name.endswith(s) and len(name) > len(s)), ("", ""))
    stem = name[: len(name) - len(suffix)]
    text = re.sub(r"[_.]+", " ", stem).strip() or stem
    if unit == "/s":
        return f"{text} per second"
    return f"{text} ({unit})" if unit else text


def label_charts(charts: Iterable[Any], token_unit: str = "tokens") -> list[Any]:
    """Chart specs with ``labels`` for every series and smoothed twin (labels a spec already has are kept)."""
    out: list[Any] = []
    for spec in charts:
        if isinstance(spec, dict):
            have = spec.get("labels") if isinstance(spec.get("labels"), dict) else {}
            twins = spec.get("smoothed") if isinstance(spec.get("smoothed"), dict) else {}
            names = [*(spec.get("series") or ()), *twins.values()]
            spec = {**spec, "labels": {n: str(have.get(n) or series_label(str(n), token_unit)) for n in names}}
        out.append(spec)
    return out
