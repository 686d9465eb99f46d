"""The passport's ``compute`` section and its model-card markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmeter.compute.eta import pace_of
from trainmeter.compute.flops import flops_range
from trainmeter.core.provenance import Derivation
from trainmeter.core.text import markdown_text
from trainmeter.sizes import format_count, format_count_pair, format_flops, format_integer, format_percent, format_value

if TYPE_CHECKING:
    from trainmeter.compute.extension import ComputeExtension


def _values(derived: dict[str, Derivation], prefix: str) -> dict[str, float | None]:
    return {name[len(prefix) + 1:-1]: d.value for name, d in derived.items() if name.startswith(prefix + "[")}


def compute_section(ext: ComputeExtension, markdown: bool = True) -> dict[str, Any]:
    """Return ``passport.json["compute"]``; without its model-card ``markdown`` for the tiles (they do not show it)."""
    m = ext._m
    convention = m.options.convention if m is not None else None
    fpt_range = flops_range(ext.fpt)
    peak, derived, ceiling = ext.peak, ext.derived, ext.ceiling()
    section: dict[str, Any] = {
        "hardware": {"device": ext.device_name or "cpu", "devices": 1, "dtype": ext.dtype},
        "unit": getattr(m, "token_unit", "tokens") if m is not None else "tokens",
        "parameters": ext.params,
        "conventions_missing": ext.conventions_missing,
        "convention": convention,
        "flops_per_token": {conv: d.value for conv, d in ext.fpt.items()},
        "flops_per_token_range": list(fpt_range) if fpt_range and convention is None else None,
        "counted_flops_per_token": ext.counted.value if ext.counted is not None else None,
        "counted_missing": ext.counted.missing if ext.counted is not None else _no_count(m),
        "flops_spent": _values(derived, "flops_spent"),
        "flops_required": _values(derived, "flops_required"),
        "mfu": _values(derived, "mfu"),
        "mfu_session": _values(derived, "mfu.session"),
        "mfu_missing": next((d.missing for n, d in derived.items() if n.startswith("mfu[") and d.missing), None),
        "peak": None if peak is None else peak.to_dict(),
        "progress": derived["progress"].value if "progress" in derived else None,
        "eta_s": derived["eta_s"].value if "eta_s" in derived else None,
        # of_achievable: model FLOP/s over the tm.calibrate() ceiling, beside mfu over the datasheet peak
        "of_achievable": _values(derived, "of_achievable"),
        "ceiling": ceiling.to_dict() if ceiling is not None else None,
        "of_achievable_missing": None if ceiling is not None else
        "no measured ceiling for this device and dtype: call tm.calibrate() (before or during the run)",
    }
    if ceiling is None and section["mfu_missing"] and peak is None:
        section["mfu_missing"] += "; or call tm.calibrate() for a measured of-achievable"
    if markdown:
        section["markdown"] = render_compute_markdown(section, ext.derivations())
    return section


def _no_count(m: Any) -> str:
    """Why there is no counted F when the pass never ran: no batch at all, or no forward call with one."""
    missing = getattr(getattr(m, "probes", None), "example_missing", None)
    if missing:
        return missing
    if m is None or not getattr(m, "tokens", 0):
        return "no training batch was seen"
    return ("no batch of the trained model's own calls was kept (it was found as the trained model after its "
            "last training call): there is no example to count one step of")


def _flops(value: float | None, per: str = "") -> str:
    return "-" if value is None else format_flops(value) + per


def _derived_text(value: float, unit: str) -> str:
    if unit == "fraction":
        return f"{value:.4f}"
    if unit in ("FLOP", "FLOP/s", "FLOP/token", "FLOP/sample", "1"):
        return format_value(value, unit)  # "1": format_count
    return f"{format_count(value)} {unit}"


def _input_text(i: Any) -> str:
    if i.value is None:
        return f"{i.name} missing"
    if i.unit in ("FLOP", "FLOP/s", "FLOP/token", "FLOP/sample") and isinstance(i.value, (int, float)):
        return f"{i.name} = {format_value(i.value, i.unit)} ({i.provenance})"
    value = f"{i.value:.6g}" if isinstance(i.value, float) else str(i.value)
    unit = "" if i.unit in ("1", "") else f" {i.unit}"
    return f"{i.name} = {value}{unit} ({i.provenance})"


def _per(section: dict[str, Any]) -> str:
    """``token`` or ``sample``: what FLOPs are per in this section."""
    return "sample" if section.get("unit") == "samples" else "token"


def render_compute_markdown(s: dict[str, Any], derivations: list[Derivation]) -> str:
    """A compute section that pastes into a Hugging Face model card."""
    hw = s["hardware"]
    conv = s["convention"]
    per = _per(s)
    lines = ["### Compute", "", f"- Hardware: {hw['devices']} x {hw['device']}" + (f", {hw['dtype']}" if hw["dtype"] else "")]
    params = s.get("parameters")
    if params:
        lines.append(f"- Parameters: {format_integer(params['total'])} total; {format_integer(params['trained'])} "
                     f"trained; {format_integer(params['frozen'])} frozen")
    if s.get("conventions_missing"):
        lines.append(f"- FLOPs conventions not shown: {markdown_text(s['conventions_missing'])}")
    if conv is not None and conv in s["flops_per_token"] and not s.get("conventions_missing"):
        lines.append(f"- FLOPs convention: `{conv}`; FLOPs per token {_flops(s['flops_per_token'].get(conv), '/token')}")
    elif s["flops_per_token"] and not s.get("conventions_missing"):
        lines.append("- FLOPs per token by convention: " + ", ".join(
            f"`{k}` {_flops(v, '/token')}" for k, v in s["flops_per_token"].items()))
    if s["counted_flops_per_token"] is not None:
        lines.append(f"- Counted (FlopCounterMode, one step): {_flops(s['counted_flops_per_token'], '/' + per)}")
    spent = {k: v for k, v in s["flops_spent"].items() if v is not None}
    if spent:
        lines.append("- Total training FLOPs: " + ", ".join(f"`{k}` {_flops(v)}" for k, v in spent.items()))
    mfu = {k: v for k, v in s["mfu"].items() if v is not None}
    if mfu:
        lines.append("- MFU (training-only): " + ", ".join(f"`{k}` {format_percent(v)}" for k, v in mfu.items()))
    elif s["mfu_missing"]:
        shown = " (of achievable, measured, is below)" if any((s.get("of_achievable") or {}).values()) else ""
        lines.append(f"- MFU over a datasheet peak not shown{shown}: {s['mfu_missing']}")
    peak = s["peak"]
    if peak:
        lines.append(f"- Peak: {peak['tflops']:g} TFLOP/s dense {peak['dtype']} ({peak['card']}; "
                     f"{peak['provenance']}: {markdown_text(peak['source'])})")
    achievable = {k: v for k, v in (s.get("of_achievable") or {}).items() if v is not None}
    ceiling = s.get("ceiling")
    if achievable and ceiling:
        lines.append("- Of achievable (over the measured ceiling): " + ", ".join(
            f"`{k}` {format_percent(v)}" for k, v in achievable.items())
            + f"; ceiling {ceiling['flops_per_s'] / 1e12:.3g} TFLOP/s {ceiling['dtype']}, measured by tm.calibrate() "
              f"({ceiling['repeats']} x {'x'.join(str(n) for n in ceiling['shape'])} matmuls in "
              f"{ceiling['seconds']:.3g} s on {markdown_text(ceiling['device_name'])})")
    lines += ["", "<details><summary>Derivations</summary>", ""]
    for d in derivations:
        value = "not shown" if d.value is None else _derived_text(d.value, d.unit)
        inputs = "; ".join(_input_text(i) for i in d.inputs)
        lines.append(f"- `{d.name}` = {d.formula} = {value} — {inputs}"
                     + (f" — missing: {d.missing}" if d.missing else ""))
    lines += ["", "</details>"]
    return "\n".join(lines)


def _span(values: Any) -> str:
    """The percentages' range, ``"12%-15%"`` (one figure where both ends read the same), or ``""`` for none."""
    values = list(values)
    lo, hi = (format_percent(min(values)), format_percent(max(values))) if values else ("", "")
    return lo if lo == hi else f"{lo}-{hi}"


def compute_tiles(section: dict[str, Any], derivations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The MFU and FLOPs tiles (docs/protocol.md; docs/spec.md section 5) from a ``compute`` section and derivations
    by name, live and in replay alike (the badge: :func:`trainmeter.widget.view_model.badge_tiles`)."""
    withheld = section.get("conventions_missing")
    conv = "counted" if withheld else section.get("convention")  # not a language model: the counted pass only
    per = _per(section)
    mfu = section.get("mfu") or {}
    peak = section.get("peak")
    peak_text = (f"peak {format_flops(peak['tflops'] * 1e12, per_second=True)} {peak['dtype']} "
                 f"({peak['card']}: {peak['source']})") if peak else ""
    in_range = {k: v for k, v in mfu.items() if v is not None and k != "counted"}
    lo, range_text = min(in_range.values(), default=None), _span(in_range.values())
    if conv is not None:
        session = (section.get("mfu_session") or {}).get(conv)
        counted = mfu.get("counted")
        parts = [f"session {format_percent(session)}" if session is not None else "",
                 f"counted (FlopCounterMode) {format_percent(counted)}" if counted is not None and not withheld else "",
                 f"FLOPs conventions not shown: {withheld}" if withheld else "",
                 f"range over conventions {range_text}" if len(in_range) > 1 else "", peak_text]
        tile: dict[str, Any] = {
            "id": "mfu", "label": f"MFU ({conv})", "value": mfu.get(conv), "unit": "fraction",
            "derivation": derivations.get(f"mfu[{conv}]"), "sub": "; ".join(p for p in parts if p),
        }
    else:
        worked = [derivations[f"mfu[{c}]"] for c in mfu if c != "counted" and f"mfu[{c}]" in derivations]
        each = " · ".join(f"{c} {format_percent(v)}" for c, v in in_range.items())
        unknown = [c for c, v in mfu.items() if v is None and c != "counted"]
        without = f"not shown: {', '.join(unknown)}" if in_range and unknown else ""
        tile = {"id": "mfu", "label": "MFU (range over conventions)", "unit": "fraction", "value": lo,
                "derivation": worked[0] if worked else None, "derivations": worked,
                "sub": "; ".join(p for p in (each, without, "name one with --convention", peak_text) if p)}
        if in_range:
            tile["text"] = range_text
    _with_achievable(tile, section, derivations, conv)
    if tile["value"] is None:
        no_count = withheld and section.get("counted_flops_per_token") is None
        tile["missing"] = ((section.get("counted_missing") if no_count else section.get("mfu_missing"))
                           or f"MFU needs FLOPs per {per} and training-only {per}s/s")
        # on the CPU with no declared peak or measured ceiling, MFU does not apply here (the widget folds the tile)
        tile["not_here"] = (peak is None and not any((section.get("of_achievable") or {}).values())
                            and (section.get("hardware") or {}).get("device") == "cpu")
    key = conv or "hf"
    spent = (section.get("flops_spent") or {}).get(key)
    required = (section.get("flops_required") or {}).get(key)
    spent_d = derivations.get(f"flops_spent[{key}]")
    hint = "--budget-tokens N" if per == "token" else "--budget-samples N or --budget-steps N"
    flops: dict[str, Any] = {
        "id": "flops", "label": f"FLOPs spent ({key})", "value": spent, "unit": "flop", "derivation": spent_d,
        "sub": (f"of {format_flops(required)} required" if required is not None
                else f"FLOPs required: give a budget ({hint})"),
    }
    if spent is None:
        fpt = derivations.get(f"flops_per_token.{key}") or {}
        why = fpt.get("missing") or (spent_d or {}).get("missing")
        flops["missing"] = (f"FLOPs per {per} ({key}) unknown: {why}" if why else
                            f"FLOPs per {per}: the model is read at the first report after its first step")
    return [tile, flops]


def _with_achievable(tile: dict[str, Any], section: dict[str, Any], derivations: dict[str, dict[str, Any]],
                     conv: str | None) -> None:
    """Put the measured "of achievable" (``tm.calibrate()``'s ceiling) on the MFU tile: its text first in the second
    line and its derivation in the popover; the tile's value where no datasheet peak gives MFU (docs/spec.md section
    5, "The MFU and FLOPs tiles")."""
    ach = {k: v for k, v in (section.get("of_achievable") or {}).items()
           if v is not None and (k == conv if conv else k != "counted")}
    if not ach:
        return
    lo, text = min(ach.values()), _span(ach.values())
    ceiling = section.get("ceiling") or {}
    rate = format_flops(ceiling["flops_per_s"], per_second=True) if ceiling.get("flops_per_s") else "-"
    said = f"of achievable {text} (measured: tm.calibrate() ceiling {rate} {ceiling.get('dtype') or ''}".rstrip() + ")"
    worked = [derivations[f"of_achievable[{c}]"] for c in ach if f"of_achievable[{c}]" in derivations]
    if tile["value"] is None:  # no datasheet peak (the CPU): the measured figure is the tile's
        tile.update(label=f"of achievable ({conv or 'range over conventions'})", value=lo, text=text,
                    derivation=worked[0] if worked else None, derivations=worked,
                    sub=said + "; MFU over a datasheet peak: none for this device (--peak-tflops declares one)")
        return
    mfu_worked = tile.get("derivations") or ([tile["derivation"]] if tile.get("derivation") else [])
    tile.update(derivations=[*mfu_worked, *worked], sub="; ".join(p for p in (said, tile.get("sub")) if p))


def progress_bar(section: dict[str, Any], derivations: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The header's progress bar from the ``progress`` and ``eta_s`` derivations (its ETA and pace), or ``None``."""
    prog = derivations.get("progress")
    if prog is None or prog.get("value") is None:
        return None
    eta = derivations.get("eta_s") or {}
    inputs = {i["name"]: i["value"] for i in prog.get("inputs", [])}
    done, total, unit = ("steps", "budget_steps", "steps") if "budget_steps" in inputs else (
        "tokens_seen", "budget_tokens", section.get("unit") or "tokens")  # the run's unit: samples without token ids
    label = " / ".join(format_count_pair(inputs.get(done), inputs.get(total))) + f" {unit}"
    return {"fraction": prog["value"], "eta_s": eta.get("value"), "pace": pace_of(eta or None), "label": label}
