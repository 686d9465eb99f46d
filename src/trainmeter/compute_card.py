"""The passport's ``compute`` section and its model-card markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmeter.provenance import Derivation
from trainmeter.sizes import format_count

if TYPE_CHECKING:
    from trainmeter.compute_ext import ComputeExtension


def _values(derived: dict[str, Derivation], prefix: str) -> dict[str, float | None]:
    out = {}
    for name, d in derived.items():
        if name.startswith(prefix + "["):
            out[name[len(prefix) + 1:-1]] = d.value
    return out


def all_derivations(ext: ComputeExtension) -> list[Derivation]:
    """FLOPs per token per convention, counted, and every derived figure."""
    out = list(ext.fpt.values())
    if ext.counted is not None:
        out.append(ext.counted)
    out.extend(ext.derived.values())
    return out


def compute_section(ext: ComputeExtension) -> dict[str, Any]:
    """Return ``passport.json["compute"]``."""
    m = ext._m
    convention = m.options.convention if m is not None else None
    fpt = {conv: d.value for conv, d in ext.fpt.items()}
    values = [v for v in fpt.values() if v is not None]
    peak = ext.peak
    derived = ext.derived
    mfu = _values(derived, "mfu")
    section: dict[str, Any] = {
        "hardware": {"device": ext.device_name or "cpu", "devices": 1, "dtype": ext.dtype},
        "convention": convention,
        "flops_per_token": fpt,
        "flops_per_token_range": [min(values), max(values)] if values and convention is None else None,
        "counted_flops_per_token": ext.counted.value if ext.counted is not None else None,
        "counted_missing": ext.counted.missing if ext.counted is not None else "no training batch was seen",
        "flops_spent": _values(derived, "flops_spent"),
        "flops_required": _values(derived, "flops_required"),
        "mfu": mfu,
        "mfu_session": _values(derived, "mfu.session"),
        "mfu_missing": next((d.missing for n, d in derived.items() if n.startswith("mfu[") and d.missing), None),
        "peak": None if peak is None else {"tflops": peak.tflops, "card": peak.card, "dtype": peak.dtype,
                                           "source": peak.source, "provenance": peak.provenance},
        "progress": derived["progress"].value if "progress" in derived else None,
        "eta_s": derived["eta_s"].value if "eta_s" in derived else None,
    }
    section["markdown"] = render_compute_markdown(section, all_derivations(ext))
    return section


def _flops(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_compute_markdown(s: dict[str, Any], derivations: list[Derivation]) -> str:
    """A compute section that pastes into a Hugging Face model card."""
    hw = s["hardware"]
    conv = s["convention"]
    lines = ["### Compute", "", f"- Hardware: {hw['devices']} x {hw['device']}" + (f", {hw['dtype']}" if hw["dtype"] else "")]
    if conv is not None:
        lines.append(f"- FLOPs convention: `{conv}`; FLOPs per token {_flops(s['flops_per_token'].get(conv))}")
    elif s["flops_per_token"]:
        lines.append("- FLOPs per token by convention: " + ", ".join(
            f"`{k}` {_flops(v)}" for k, v in s["flops_per_token"].items()))
    if s["counted_flops_per_token"] is not None:
        lines.append(f"- Counted (FlopCounterMode, one step): {_flops(s['counted_flops_per_token'])} FLOPs per token")
    spent = {k: v for k, v in s["flops_spent"].items() if v is not None}
    if spent:
        lines.append("- Total training FLOPs: " + ", ".join(f"`{k}` {_flops(v)}" for k, v in spent.items()))
    mfu = {k: v for k, v in s["mfu"].items() if v is not None}
    if mfu:
        lines.append("- MFU (training-only): " + ", ".join(f"`{k}` {v * 100:.1f}%" for k, v in mfu.items()))
    elif s["mfu_missing"]:
        lines.append(f"- MFU not shown: {s['mfu_missing']}")
    peak = s["peak"]
    if peak:
        lines.append(f"- Peak: {peak['tflops']:g} TFLOP/s dense {peak['dtype']} ({peak['card']}; "
                     f"{peak['provenance']}: {peak['source']})")
    lines += ["", "<details><summary>Derivations</summary>", ""]
    for d in derivations:
        value = "not shown" if d.value is None else format_count(d.value) if d.unit != "fraction" else f"{d.value:.4f}"
        inputs = "; ".join(f"{i.name} = {i.value} {i.unit} ({i.provenance})" for i in d.inputs)
        lines.append(f"- `{d.name}` = {d.formula} = {value} {d.unit} — {inputs}"
                     + (f" — missing: {d.missing}" if d.missing else ""))
    lines += ["", "</details>"]
    return "\n".join(lines)
