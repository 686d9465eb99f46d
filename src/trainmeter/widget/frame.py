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


def _to_le_bytes(values: Sequence[float]) -> bytes:
    little = _LITTLE and isinstance(values, array) and values.typecode == "d"
    column = values if little else array("d", values)  # a copy where it is swapped: never the caller's
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


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
    header = json.dumps({"v": FRAME_VERSION, "seq": int(seq), "series": entries}, separators=(",", ":"),
                        ensure_ascii=False).encode("utf-8")
    parts = [_PREFIX.pack(FRAME_MAGIC, len(header)), header, b"\0" * (-(_PREFIX.size + len(header)) % _ALIGN)]
    return b"".join(parts + chunks)


def frame_seq(data: bytes) -> int:
    """The ``seq`` in a frame's header (tests/widget/wire_types.py ``decode_frame`` reads the whole frame)."""
    _, header_len = _PREFIX.unpack_from(data, 0)
    return int(json.loads(bytes(data[_PREFIX.size : _PREFIX.size + header_len]))["seq"])
