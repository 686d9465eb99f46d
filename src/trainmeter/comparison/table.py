"""The table beside the comparison: one row per run from its passport, and what differs (docs/spec.md section 15)."""

from __future__ import annotations

import html
from typing import Any

from trainmeter.sizes import format_count, format_number, format_percent, format_rate

DIFF_IGNORED = ("options.name", "options.run_root")
"""Keys that differ by design and are not worth a mention."""


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def differences(passports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: ``{key: value}`` of ``environment.*`` and ``options.*`` keys that differ from the first run."""
    flats = []
    for p in passports:
        flat: dict[str, Any] = {}
        _flat("environment", p.get("environment") or {}, flat)
        _flat("options", p.get("options") or {}, flat)
        flats.append(flat)
    keys = sorted({k for f in flats for k in f} - set(DIFF_IGNORED))
    varying = [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]
    base = flats[0] if flats else {}
    return [{k: f.get(k) for k in varying if i == 0 or f.get(k) != base.get(k)} for i, f in enumerate(flats)]


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return format_percent(value)
    if kind == "count":
        return format_count(value)
    if kind == "rate":
        return format_rate(value, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_number(value)
    return str(value)


def table_rows(names: list[str], passports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per run with the table's values (numbers, not text)."""
    diffs = differences(passports)
    rows = []
    for name, p, diff in zip(names, passports, diffs, strict=True):
        loss = (p.get("series") or {}).get("train_loss") or {}
        compute = p.get("compute") or {}
        conv = compute.get("convention")
        energy = p.get("energy") or {}
        rows.append({
            "run": name, "status": p.get("status", "unfinished"), "steps": p.get("steps"), "tokens": p.get("tokens"),
            "final_loss": loss.get("last"), "best_loss": loss.get("min"),
            "tokens_per_s": (p.get("throughput") or {}).get("train_tokens_per_s"),
            "mfu": (compute.get("mfu") or {}).get(conv) if conv else None, "convention": conv,
            "j_per_token": energy.get("j_per_token"), "goodput": p.get("goodput"), "differs": diff,
        })
    return rows


def table_html(rows: list[dict[str, Any]]) -> str:
    """The rows as an HTML table (class ``tm-compare-table``)."""
    head = ("run", "status", "steps", "tokens", "final loss", "best loss", "tokens/s", "MFU", "J/token", "goodput",
            "differs from the first run")
    out = ['<table class="tm-compare-table" style="border-collapse:collapse;font-size:12px">',
           "<tr>" + "".join(f'<th style="text-align:left;padding:2px 6px;white-space:nowrap">{h}</th>' for h in head) + "</tr>"]
    for r in rows:
        mfu = _fmt(r["mfu"], "pct") + (f" ({r['convention']})" if r["mfu"] is not None else "")
        differs = "; ".join(f"{k.split('.', 1)[1]}={v}" for k, v in r["differs"].items()) or "-"
        cells = (r["run"], r["status"], _fmt(r["steps"], "count"), _fmt(r["tokens"], "count"), _fmt(r["final_loss"]),
                 _fmt(r["best_loss"]), _fmt(r["tokens_per_s"], "rate"), mfu, _fmt(r["j_per_token"]),
                 _fmt(r["goodput"], "pct"), differs)
        out.append("<tr>" + "".join(f'<td style="padding:2px 6px;white-space:nowrap">{html.escape(str(c))}</td>' for c in cells)
                   + "</tr>")
    out.append("</table>")
    return "\n".join(out)
