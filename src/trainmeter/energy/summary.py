"""Energy figures of a run: each GPU's joules (NVML's counter differenced, else sampled power integrated), J per
token / sample / PFLOP, kWh, declared carbon; tile and card line.

From readings already taken; every figure a Derivation (sources and formulas: docs/spec.md section 13). Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trainmeter.core.provenance import Derivation, Input
from trainmeter.sizes import format_joules, format_number, format_watts

SOURCE_RAPL = "rapl"
J_PER_KWH = 3.6e6
SOURCE_COUNTER = "nvml_energy_counter"
SOURCE_POWER = "nvml_power_integrated"
MIN_POWER_SAMPLES = 2  # power samples needed in the window before integrating them (one is not an average)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceEnergy:
    """Energy one device used over a window of ``window_s`` seconds: ``joules`` (J) and ``avg_watts`` (W), ``None``
    when neither source worked; ``source`` (:data:`SOURCE_COUNTER`, :data:`SOURCE_POWER`) or ``None``; ``missing``:
    why ``joules`` is ``None`` (or why the counter was not used)."""

    index: int
    name: str
    window_s: float
    joules: float | None = None
    avg_watts: float | None = None
    source: str | None = None
    missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the passport's ``energy.devices`` entry), with ``kwh``."""
        return {**asdict(self), "kwh": None if self.joules is None else self.joules / J_PER_KWH}


def from_counter(index: int, name: str, start_mj: float, end_mj: float, window_s: float) -> DeviceEnergy:
    """Energy from two counter readings; a counter that went backwards (driver reload) is missing."""
    if end_mj < start_mj:
        return DeviceEnergy(index=index, name=name, window_s=window_s,
                            missing="the energy counter went backwards (driver reloaded?)")
    joules = (end_mj - start_mj) / 1000.0
    return DeviceEnergy(index=index, name=name, joules=joules, window_s=window_s, source=SOURCE_COUNTER,
                        avg_watts=joules / window_s if window_s > 0 else None)


def from_power(index: int, name: str, mean_power_w: float | None, n_samples: int, window_s: float,
               counter_missing: str | None) -> DeviceEnergy:
    """Energy as mean sampled power times the window; missing with fewer than two samples."""
    if mean_power_w is None or n_samples < MIN_POWER_SAMPLES or window_s <= 0:
        why = ("no power readings in the window" if mean_power_w is None
               else f"{n_samples} power sample(s) in the window; integrating needs {MIN_POWER_SAMPLES}")
        reason = f"{counter_missing}; {why}" if counter_missing else why
        return DeviceEnergy(index=index, name=name, window_s=window_s, missing=reason)
    return DeviceEnergy(index=index, name=name, joules=mean_power_w * window_s, avg_watts=mean_power_w,
                        window_s=window_s, source=SOURCE_POWER, missing=counter_missing)


def _ratio(name: str, formula: str, energy: Input, denom: Input, unit: str, scale: float = 1.0,
           missing: str | None = None) -> Derivation:
    value = None
    if missing is None and energy.value is not None and denom.value:
        value = float(energy.value) / (float(denom.value) / scale)  # type: ignore[arg-type]
    elif missing is None:
        missing = ("no energy reading (energy.missing says why)" if energy.value is None
                   else f"needs a non-zero {denom.name}")
    return Derivation(name=name, formula=formula, value=value, unit=unit, inputs=(energy, denom), missing=missing)


def energy_section(*, devices: Sequence[DeviceEnergy], gpu_missing: str | None, rapl_j: float | None,
                   rapl_missing: str | None, window_s: float, tokens: int, token_unit: str | None,
                   flops_spent: float | None, convention: str | None, flops_missing: str | None,
                   grid_gco2_per_kwh: float | None, grid_source: str | None) -> tuple[dict[str, Any], list[Derivation]]:
    """The passport's ``energy`` section and its derivations (see the module docstring)."""
    measured = [d for d in devices if d.joules is not None]
    if measured:
        joules: float | None = sum(d.joules for d in measured)  # type: ignore[misc]
        source: str | None = SOURCE_POWER if any(d.source == SOURCE_POWER for d in measured) else measured[0].source
        partial = [d for d in devices if d.joules is None]
        missing = (None if not partial else
                   "; ".join(f"GPU {d.index}: {d.missing}" for d in partial) + " (not in the total)")
        energy_src = ", ".join(f"GPU {d.index} {d.source}" for d in measured)
    elif rapl_j is not None and not devices:
        joules, source, missing, energy_src = rapl_j, SOURCE_RAPL, None, "RAPL package domains"
    else:
        joules, source = None, None
        reasons = [f"GPU {d.index}: {d.missing}" for d in devices] or [gpu_missing or "no GPU sampled"]
        if not devices:
            reasons.append(f"CPU: {rapl_missing}")
        missing = "; ".join(r for r in reasons if r)
        energy_src = ""
    energy_in = Input(name="energy_j", value=joules, unit="J", provenance="measured", source=energy_src)
    word = "token" if token_unit == "tokens" else "sample"  # the unit the batch counts: the other is not shown
    count_in = Input(name=f"{word}s", value=tokens, unit="1", provenance="counted",
                     source="root module batches" if word == "token" else "batch dim 0")
    per = {w: Derivation(name=f"j_per_{w}", formula=f"energy_j / {w}s", value=None, unit=f"J/{w}", missing=why)
           for w, why in (("token", "the batch has no token ids (a 2-D integer tensor); only samples are counted"),
                          ("sample", "the batch counts tokens here; samples are not counted"))}
    per[word] = _ratio(f"j_per_{word}", f"energy_j / {word}s", energy_in, count_in, f"J/{word}")
    j_tok, j_sample = per["token"], per["sample"]
    flops_in = Input(name="flops_spent", value=flops_spent, unit="FLOP", provenance="counted",
                     source=f"compute: flops_spent[{convention}]" if convention else "compute")
    pflop_missing = ("J/PFLOP needs a named FLOPs convention: pass --convention" if convention is None else
                     (flops_missing or "FLOPs spent are not known yet") if flops_spent is None else None)
    j_pflop = _ratio(f"j_per_pflop[{convention}]" if convention else "j_per_pflop",
                     "energy_j / (flops_spent / 1e15)", energy_in, flops_in, "J/PFLOP", scale=1e15,
                     missing=pflop_missing)
    kwh = None if joules is None else joules / J_PER_KWH
    derivations = [j_tok, j_sample, j_pflop]
    carbon: dict[str, Any] | None = None
    if grid_gco2_per_kwh is not None:
        grid_in = Input(name="grid_gco2_per_kwh", value=grid_gco2_per_kwh, unit="gCO2/kWh", provenance="declared",
                        source=grid_source or "")
        kwh_in = Input(name="kwh", value=kwh, unit="kWh", provenance="measured", source="energy_j / 3.6e6")
        gco2 = None if kwh is None else kwh * grid_gco2_per_kwh
        derivations.append(Derivation(name="gco2", formula="kwh * grid_gco2_per_kwh", value=gco2, unit="gCO2",
                                      inputs=(kwh_in, grid_in), missing=None if gco2 is not None else missing))
        carbon = {"gco2": gco2, "grid_gco2_per_kwh": grid_gco2_per_kwh, "grid_source": grid_source,
                  "provenance": "declared"}
    section: dict[str, Any] = {
        "source": source if joules is not None else None,
        "missing": missing,
        "window_s": window_s,
        "joules": joules,
        "kwh": kwh,
        "avg_watts": {str(d.index): d.avg_watts for d in devices} if devices else (
            {"cpu": joules / window_s} if joules is not None and window_s > 0 else {}),
        "devices": [d.to_dict() for d in devices],
        "cpu_rapl": {"joules": rapl_j, "missing": rapl_missing},
        "per": None if token_unit is None else "token" if token_unit == "tokens" else "sample",  # None: none read
        "j_per_token": j_tok.value,
        "j_per_sample": j_sample.value,
        "j_per_pflop": {"value": j_pflop.value, "convention": convention, "missing": j_pflop.missing},
        "carbon": carbon,
    }
    section["markdown"] = card_line(section)
    return section, derivations


def card_line(section: dict[str, Any]) -> str:
    """The passport.md compute-card line for energy."""
    if section.get("joules") is None:
        return f"- Energy: not measured ({section.get('missing')})"
    parts = [f"{format_number(section['kwh'])} kWh ({format_joules(section['joules'])}, {section['source']})"]
    pflop = section.get("j_per_pflop") or {}
    for value, unit in ((section.get("j_per_token"), "J/token"), (section.get("j_per_sample"), "J/sample"),
                        (pflop.get("value"), f"J/PFLOP ({pflop.get('convention')})")):
        if value is not None:
            parts.append(f"{format_number(value)} {unit}")
    watts = [w for w in (section.get("avg_watts") or {}).values() if w is not None]
    if watts:
        parts.append(f"avg {format_watts(sum(watts) / len(watts))} per device")
    carbon = section.get("carbon")
    if carbon and carbon.get("gco2") is not None:
        parts.append(f"{format_number(carbon['gco2'])} gCO2 at a declared "
                     f"{format_number(carbon['grid_gco2_per_kwh'])} gCO2/kWh ({carbon['grid_source']})")
    return "- Energy: " + "; ".join(parts)


def energy_tile(section: dict[str, Any], derivations: Iterable[Any] = ()) -> dict[str, Any]:
    """The widget's energy tile (docs/protocol.md tile), J per token (or per sample), with the derivation of that
    name among ``derivations`` (dicts, as Derivation.to_dict)."""
    per_sample = section.get("per") == "sample"
    chosen = "j_per_sample" if per_sample else "j_per_token"
    value = section.get(chosen)
    unit_word = "J/sample" if per_sample else "J/token" if section.get("per") is not None else "J/sample or token"
    derivation = next((dict(d) for d in derivations if isinstance(d, dict) and d.get("name") == chosen), None)
    tile: dict[str, Any] = {"id": "energy", "label": f"Energy ({unit_word})", "value": value, "unit": "",
                            "provenance": "measured", "derivation": derivation}
    if value is not None:
        tile["text"] = f"{format_number(value)} {unit_word}"
        watts = [w for w in (section.get("avg_watts") or {}).values() if w is not None]
        tile["sub"] = (f"{format_number(section.get('kwh'))} kWh; "
                       + (f"{format_watts(sum(watts) / len(watts))} avg/device; " if watts else "")
                       + str(section.get("source")))
    else:
        tile["missing"] = section.get("missing") or "energy per token needs an energy reading and tokens"
        # no energy reading at all (no GPU power counter, no RAPL) does not change during a run
        tile["not_here"] = (section.get("joules") is None and not section.get("devices")
                            and (section.get("cpu_rapl") or {}).get("joules") is None)
    return tile
