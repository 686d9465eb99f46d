"""Reads of run-folder files that survive any folder: regular files only, inside the run folder, bounded.

Every reader of a run folder opens its files through here (docs/spec.md section 18, "hostile run folders"); any
failure is a :class:`Damaged` naming the file and why. Pure; any thread.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from trainmeter.sizes import format_bytes

MAX_LINE_BYTES = 32 * 1024 * 1024  # longest run-log line kept: a longer one is skipped without being held
READ_BLOCK_BYTES = 1024 * 1024
MAX_JSON_BYTES = 64 * 1024 * 1024  # largest passport/dashboard/curves JSON read (100,000 series: ~15 MB)

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)

PASSPORT_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "status": (str,), "error": (str,), "started_at": (str,), "ended_at": (str,),
    "token_unit": (str,), "elapsed_s": (int, float), "steps": (int, float), "tokens": (int, float),
    "series": (dict,), "options": (dict,), "throughput": (dict,), "memory": (dict,), "phases_s": (dict,),
    "compute": (dict,), "energy": (dict,), "distributed": (dict,), "gpu": (dict,), "warnings": (list,),
    "verdicts": (list,), "derivations": (list,),
}
"""The passport fields readers use, and their JSON types (``None`` is allowed for each: a missing reading)."""

DASHBOARD_TYPES: dict[str, tuple[type, ...]] = {"tiles": (list,), "charts": (list,), "panels": (list,)}
"""The dashboard.json fields a replay reads."""


class Damaged(OSError):
    """A run-folder file that cannot be read as what it should be; ``str()`` names the file and why."""


def _inside(path: Path, within: Path) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(within)
    try:
        return os.path.commonpath([real, root]) == root
    except ValueError:  # other drives (Windows)
        return False


def open_regular(path: str | Path, *, within: str | Path | None = None) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file inside ``within`` (default: its own folder), else
    :class:`Damaged` (a FIFO, device, socket or folder, a symlink out, unopenable); ``FileNotFoundError``."""
    p = Path(path)
    if p.is_symlink() and not _inside(p, Path(within) if within is not None else p.parent):
        raise Damaged(f"{p.name} is a symlink out of its run folder (to {os.path.realpath(p)}); not read")
    try:
        fd = os.open(p, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Damaged(f"{p.name} cannot be opened ({exc.strerror or type(exc).__name__})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((word for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                                                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                                                 (stat.S_ISDIR, "a folder")) if test(mode)), "not a regular file")
            raise Damaged(f"{p.name} is {kind}, not a regular file; not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, max_bytes: int) -> bytes:
    """A regular file's bytes, at most ``max_bytes`` (``FileNotFoundError``; Damaged as open_regular, or larger)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        too_big = Damaged(f"{Path(path).name} is {format_bytes(size)}, over the {format_bytes(max_bytes)} "
                          "a reader takes; not read")
        if size > max_bytes:
            raise too_big
        data = f.read(size + 1)  # (read(n) allocates n bytes) it may have grown since fstat
        while len(data) <= max_bytes and (more := f.read(min(READ_BLOCK_BYTES, max_bytes + 1 - len(data)))):
            data += more
        if len(data) > max_bytes:
            raise too_big
        return data


def read_json(path: str | Path, *, types: dict[str, tuple[type, ...]] | None = None) -> dict[str, Any]:
    """The JSON object in a run-folder file, its ``types`` checked (see :data:`PASSPORT_TYPES`); ``FileNotFoundError``,
    or :class:`Damaged` for anything else (too large, not UTF-8 or JSON, too deep, not an object, a field's type)."""
    name = Path(path).name
    data = read_bytes(path, MAX_JSON_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Damaged(f"{name} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise Damaged(f"{name} is nested too deep to read") from None
    except ValueError as exc:
        raise Damaged(f"{name} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise Damaged(f"{name} holds a JSON {type(doc).__name__}, not an object")
    if has_lone_surrogate(text, doc):
        raise Damaged(f"{name} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff): not text")
    if (problem := wrong_type(doc, types or {})) is not None:
        raise Damaged(f"{name}: {problem}")
    return doc


NO_PASSPORT = "incomplete: passport.json missing"  # a log with its end record and no passport (section 6)


def read_passport(folder: str | Path) -> dict[str, Any]:
    """A run folder's ``passport.json`` (:func:`read_json`, :data:`PASSPORT_TYPES`). It is written last and lists
    the record's files in ``files`` (docs/spec.md section 6): one the folder lacks makes the status ``damaged`` and
    ``damaged`` say which (``incomplete: passport.md missing``). Raises as :func:`read_json`."""
    passport = read_json(Path(folder) / "passport.json", types=PASSPORT_TYPES)
    files = passport.get("files") if isinstance(passport.get("files"), list) else []
    if missing := [f for f in files if isinstance(f, str) and not os.path.lexists(Path(folder) / Path(f).name)]:
        passport = {**passport, "status": "damaged", "damaged": f"incomplete: {', '.join(missing)} missing"}
    return passport


def has_lone_surrogate(raw: str | bytes, doc: Any) -> bool:
    """Whether ``doc``, parsed from ``raw``, holds a string no UTF-8 sink can write (a lone ``\\udXXX`` escape); only
    a text holding a ``\\ud`` escape is walked (re-encoded)."""
    marks = (b"\\ud", b"\\uD") if isinstance(raw, bytes) else ("\\ud", "\\uD")
    if not any(m in raw for m in marks):  # type: ignore[operator]
        return False
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, RecursionError):
        return True
    return False


def wrong_type(doc: dict[str, Any], types: dict[str, tuple[type, ...]]) -> str | None:
    """The first field of ``doc`` whose value is not ``None`` nor of its type in ``types``, in words; else ``None``."""
    for key, allowed in types.items():
        value = doc.get(key)
        if value is not None and ((isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed)):
            want = " or ".join(_TYPE_WORDS[t] for t in allowed)
            return f"{key!r} holds {type(value).__name__} {clip(repr(value), 40)}, expected {want}"
    return None


_TYPE_WORDS = {str: "a string", int: "a whole number", float: "a number", dict: "an object", list: "a list"}


def clip(text: str, chars: int) -> str:
    """``text``, cut to at most ``chars`` characters (its end then ``...``)."""
    return text if len(text) <= chars else text[: chars - 3] + "..."


def iso_time(text: Any) -> datetime | None:
    """``datetime.fromisoformat(text)``, ``None`` for anything that is not an ISO time."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def iter_lines(f: BinaryIO, *, max_bytes: int | None = None, max_line_bytes: int = MAX_LINE_BYTES,
               block_bytes: int | None = None) -> Iterator[tuple[bytes, bool]]:
    """``(line, complete)`` for each line of ``f`` (with its newline; a torn last line not ``complete``; one over
    ``max_line_bytes`` as ``b"\\x00"``, never held), up to ``max_bytes`` (the piece cut there not yielded), read
    ``block_bytes`` (default :data:`READ_BLOCK_BYTES`) at a time."""
    rest: bytearray | None = bytearray()  # the line so far; None: one over max_line_bytes, skipped to its end
    left, block = math.inf if max_bytes is None else max_bytes, block_bytes or READ_BLOCK_BYTES
    while left > 0:
        if not (chunk := f.read(min(block, left))):
            break
        left -= len(chunk)
        *pieces, last = chunk.split(b"\n")
        for piece in pieces:
            yield (b"\x00" if rest is None else (bytes(rest) + piece if rest else piece) + b"\n"), True
            rest = bytearray()
        if rest is not None and len(rest) + len(last) > max_line_bytes:
            rest = None
        elif rest is not None:
            rest += last
    if left > 0 and (rest is None or rest):
        yield (b"\x00" if rest is None else bytes(rest)), False
