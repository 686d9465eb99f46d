"""Binary column frames: the widget's wire format for series (layout: docs/protocol.md section 3). Stdlib only; pure."""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmeter.widget.x_axis import X_MODES

FRAME_MAGIC = b"TMF1"
FRAME_VERSION = 2
XKind = Literal["step", "time"]
X_KINDS: tuple[str, ...] = ("step", "time")

_PREFIX = struct.Struct("<4sI")
_ALIGN = 8
_LITTLE = sys.byteorder == "little"


class FrameError(ValueError):
    """A byte string is not a valid v2 frame."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesColumns:
    """One series of a frame: ``xs`` of ``x_kind`` (``step``, or ``time``: seconds since the run began), ``ys`` (NaN: a
    gap) and ``mapped``, the same points' x on the other axes (widget/x_axis.py; NaN where unmapped)."""

    name: str
    x_kind: XKind
    xs: Sequence[float]
    ys: Sequence[float]
    mapped: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """A decoded frame: format version ``v`` (2), the message's ``seq`` and the series in wire order."""

    v: int
    seq: int
    series: tuple[SeriesColumns, ...]


def _padding_bytes(header_len: int) -> int:
    """Return how many zero bytes follow a header of ``header_len`` bytes."""
    return -(_PREFIX.size + header_len) % _ALIGN


def _to_le_bytes(values: Sequence[float]) -> bytes:
    column = values if isinstance(values, array) and values.typecode == "d" else array("d", values)
    if _LITTLE:
        return column.tobytes()
    swapped = array("d", column)
    swapped.byteswap()
    return swapped.tobytes()


def encode_frame(seq: int, series: Sequence[SeriesColumns]) -> bytes:
    """One v2 frame of ``series`` (in order) under ``seq``; ``FrameError`` for columns of different lengths, an
    unknown ``x_kind`` or mapped axis."""
    entries: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for s in series:
        if s.x_kind not in X_KINDS:
            raise FrameError(f"series {s.name!r}: unknown x kind {s.x_kind!r}")
        columns = [(s.x_kind, s.xs), *((k, v) for k, v in s.mapped.items() if k != s.x_kind)]
        for axis, column in columns:
            if axis not in X_MODES:
                raise FrameError(f"series {s.name!r}: unknown x axis {axis!r}")
            if len(column) != len(s.ys):
                raise FrameError(f"series {s.name!r}: {len(column)} {axis} xs but {len(s.ys)} ys")
        entry: dict[str, Any] = {"name": s.name, "x": s.x_kind, "n": len(s.ys)}
        if len(columns) > 1:
            entry["axes"] = [axis for axis, _ in columns]
        entries.append(entry)
        chunks.extend(_to_le_bytes(column) for _, column in columns)
        chunks.append(_to_le_bytes(s.ys))
    header = json.dumps(
        {"v": FRAME_VERSION, "seq": int(seq), "series": entries},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    parts = [_PREFIX.pack(FRAME_MAGIC, len(header)), header, b"\0" * _padding_bytes(len(header))]
    return b"".join(parts + chunks)


def _read_header(data: memoryview) -> tuple[dict[str, Any], int]:
    if len(data) < _PREFIX.size:
        raise FrameError(f"frame too short: {len(data)} bytes")
    magic, header_len = _PREFIX.unpack_from(data, 0)
    if magic != FRAME_MAGIC:
        raise FrameError(f"bad magic {bytes(magic)!r}")
    end = _PREFIX.size + header_len
    if len(data) < end:
        raise FrameError("frame truncated inside its header")
    try:
        header = json.loads(bytes(data[_PREFIX.size : end]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"bad header: {exc}") from exc
    if not isinstance(header, dict) or header.get("v") != FRAME_VERSION:
        raise FrameError(f"unsupported frame header {header!r:.80}")
    return header, end + _padding_bytes(header_len)


def _read_column(data: memoryview, offset: int, n: int) -> array[float]:
    column = array("d")
    column.frombytes(data[offset : offset + 8 * n])
    if not _LITTLE:
        column.byteswap()
    return column


def decode_frame(data: bytes | bytearray | memoryview) -> Frame:
    """Decode one v2 frame (columns as ``array("d")`` copies); ``FrameError`` for a bad magic, an unsupported version
    or a frame shorter than its header says."""
    view = memoryview(data).cast("B")
    header, offset = _read_header(view)
    series: list[SeriesColumns] = []
    for entry in header.get("series", []):
        n = int(entry["n"])
        axes = [str(a) for a in entry.get("axes") or [entry["x"]]]
        if n < 0 or offset + 8 * n * (len(axes) + 1) > len(view):
            raise FrameError(f"series {entry.get('name')!r}: data truncated")
        if entry["x"] not in X_KINDS or axes[0] != entry["x"] or not set(axes) <= set(X_MODES):
            raise FrameError(f"series {entry.get('name')!r}: unknown x kind {entry['x']!r} or axes {axes!r}")
        columns = [_read_column(view, offset + 8 * n * k, n) for k in range(len(axes) + 1)]  # the axes', then ys
        offset += 8 * n * len(columns)
        series.append(SeriesColumns(name=str(entry["name"]), x_kind=entry["x"], xs=columns[0], ys=columns[-1],
                                    mapped=dict(zip(axes[1:], columns[1:-1], strict=True))))
    return Frame(v=int(header["v"]), seq=int(header["seq"]), series=tuple(series))
