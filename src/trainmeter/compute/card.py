"""The passport's ``compute`` section and its model-card markdown."""

from __future__ import annotations

from typing import Any, Protocol

from trainmeter.core.provenance import Derivation
from trainmeter.core.text import markdown_text
from trainmeter.sizes import format_count


class ComputeState(Protocol):
    """What the card reads of :class:`~trainmeter.compute.extension.ComputeExtension`."""

    _m: Any
    fpt: dict[str, Derivation]
    counted: Derivation | None
    derived: dict[str, Derivation]
    peak: Any
    device_name: str | None
    dtype: str | None


def _values(derived: dict[str, Derivation], prefix: str) -> dict[str, float | None]:
    out = {}
    for name, d in derived.items():
        if name.startswith(prefix + "["):
            out[name[len(prefix) + 1:-1]] = d.value
    return out


def all_derivations(ext: ComputeState) -> list[Derivation]:
    """FLOPs per token per convention, counted, and every derived figure."""
    out = list(ext.fpt.values())
    if ext.counted is not None:
        out.append(ext.counted)
    out.extend(ext.derived.values())
    return out


def compute_section(ext: ComputeState) -> dict[str, Any]:
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


def _input_text(i: Any) -> str:
    if i.value is None:
        return f"{i.name} missing"
    value = f"{i.value:.6g}" if isinstance(i.value, float) else str(i.value)
    unit = "" if i.unit in ("1", "") else f" {i.unit}"
    return f"{i.name} = {value}{unit} ({i.provenance})"


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
                     f"{peak['provenance']}: {markdown_text(peak['source'])})")
    lines += ["", "<details><summary>Derivations</summary>", ""]
    for d in derivations:
        value = "not shown" if d.value is None else format_count(d.value) if d.unit != "fraction" else f"{d.value:.4f}"
        value = value if d.value is None or d.unit in ("1", "fraction") else f"{value} {d.unit}"
        inputs = "; ".join(_input_text(i) for i in d.inputs)
        lines.append(f"- `{d.name}` = {d.formula} = {value} — {inputs}"
                     + (f" — missing: {d.missing}" if d.missing else ""))
    lines += ["", "</details>"]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def compute_tiles(section: dict[str, Any], derivations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The MFU and FLOPs tiles (docs/protocol.md), from a ``compute`` section and derivations by name.

    Used live (from the extension) and in replay (from the passport), so both show the same.
    """
    conv = section.get("convention")
    mfu = section.get("mfu") or {}
    peak = section.get("peak")
    peak_text = f"peak {peak['tflops']:g} TFLOP/s {peak['dtype']} ({peak['card']}: {peak['source']})" if peak else ""
    if conv is not None:
        tile: dict[str, Any] = {
            "id": "mfu", "label": f"MFU ({conv})", "value": mfu.get(conv), "unit": "fraction",
            "provenance": "measured", "derivation": derivations.get(f"mfu[{conv}]"),
            "sub": f"session {_pct((section.get('mfu_session') or {}).get(conv))}; {peak_text}".strip("; "),
        }
    else:
        values = {k: v for k, v in mfu.items() if v is not None and k != "counted"}
        tile = {"id": "mfu", "label": "MFU (range over conventions)", "unit": "fraction", "provenance": "measured",
                "value": min(values.values()) if values else None,
                "derivation": derivations.get("mfu[hf]"),
                "sub": "hf to embeddings; name one with --convention" + (f"; {peak_text}" if peak_text else "")}
        if values:
            lo, hi = min(values.values()), max(values.values())
            tile["text"] = f"{lo * 100:.1f}-{hi * 100:.1f}%"
    if tile["value"] is None:
        tile["missing"] = section.get("mfu_missing") or "MFU needs FLOPs per token and training-only tokens/s"
    key = conv or "hf"
    spent = (section.get("flops_spent") or {}).get(key)
    required = (section.get("flops_required") or {}).get(key)
    flops: dict[str, Any] = {
        "id": "flops", "label": f"FLOPs spent ({key})", "value": spent, "unit": "flop", "provenance": "counted",
        "derivation": derivations.get(f"flops_spent[{key}]"),
        "sub": f"of {_flops(required)} required" if required is not None else "no budget: FLOPs required unknown",
    }
    if spent is None:
        flops["missing"] = "FLOPs per token: the model is read at the first report after its first step"
    return [tile, flops]


def progress_bar(section: dict[str, Any], derivations: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The header's progress bar from the ``progress`` and ``eta_s`` derivations, or ``None``."""
    prog = derivations.get("progress")
    if prog is None or prog.get("value") is None:
        return None
    eta = derivations.get("eta_s") or {}
    inputs = {i["name"]: i["value"] for i in prog.get("inputs", [])}
    if "budget_steps" in inputs:
        label = f"{format_count(inputs.get('steps'))} / {format_count(inputs['budget_steps'])} steps"
    else:
        label = f"{format_count(inputs.get('tokens_seen'))} / {format_count(inputs.get('budget_tokens'))} tokens"
    return {"fraction": prog["value"], "eta_s": eta.get("value"), "pace": "training-only", "label": label}
