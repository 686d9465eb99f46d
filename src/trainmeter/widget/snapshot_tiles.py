"""The static snapshot's tiles (widget/snapshot.py), as the live tiles print and fold them (js/src/tiles.ts). Pure."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from trainmeter.sizes import MISSING, format_integer, format_value
from trainmeter.widget.look import MUTED


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def format_tile(tile: dict[str, Any]) -> str:
    """A tile's value as text (the same text the live tile shows)."""
    if tile.get("text"):
        return str(tile["text"])
    if tile.get("value") is None:
        return MISSING
    if tile.get("id") == "step":
        return format_integer(tile["value"])
    return format_value(tile["value"], str(tile.get("unit", "")))


def tiles_html(all_tiles: Sequence[dict[str, Any]], per_row: int = 4) -> str:
    """The tiles as a table, ``per_row`` a row, and one line for those folded: a tile whose value is missing for a
    reason about this machine (as js/src/tiles.ts folds and words them)."""
    folded = [t for t in all_tiles if t.get("not_here") and t.get("value") is None and not t.get("text")]
    tiles = [t for t in all_tiles if t not in folded]
    if not folded:
        return _tile_table(tiles, per_row)
    text = "Not on this machine: " + " · ".join(f"{t.get('label')}: {t.get('missing') or 'not available'}"
                                                for t in folded)
    line = f'<div data-tm="not-here" style="font-size:11px;color:{MUTED};margin:2px 0 6px">{_esc(text)}</div>'
    return _tile_table(tiles, per_row) + line


def _tile_table(tiles: Sequence[dict[str, Any]], per_row: int = 4) -> str:
    if not tiles:
        return ""
    rows = []
    for i in range(0, len(tiles), per_row):
        chunk = tiles[i:i + per_row]
        labels = "".join(f'<th style="text-align:left;font-weight:400;font-size:11px;color:{MUTED};'
                         f'padding:4px 12px 0 0">{_esc(t.get("label", ""))}</th>' for t in chunk)
        values = "".join(
            '<td style="text-align:left;font-size:16px;font-weight:600;padding:0 12px 0 0;white-space:nowrap"'
            + (' data-tm="step"' if t.get("id") == "step" else "") + f">{_esc(format_tile(t))}</td>"
            for t in chunk)
        subs = "".join(f'<td style="text-align:left;font-size:11px;color:{MUTED};padding:0 12px 2px 0">{_esc(_tile_note(t))}</td>'
                       for t in chunk)
        rows.append(f"<tr>{labels}</tr><tr>{values}</tr><tr>{subs}</tr>")
    return f'<table style="border-collapse:collapse;margin:4px 0">{"".join(rows)}</table>'


def _tile_note(tile: dict[str, Any]) -> str:
    if tile.get("value") is None and not tile.get("text"):
        return str(tile.get("missing") or "")  # the reason, or the input that would enable it, as the live tile says
    return str(tile.get("sub") or "")
