"""safe_read: regular files only, bounded reads, damage named (docs/spec.md section 18, "hostile run folders")."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from trainmeter.record.safe_read import PASSPORT_TYPES, Damaged, iter_lines, open_regular, read_bytes, read_json


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_a_fifo_a_device_and_a_symlink_out_of_the_folder_are_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "passport.json")
    os.symlink("/dev/null", tmp_path / "events.jsonl")
    (tmp_path / "inside.json").write_text("{}")
    os.symlink(tmp_path / "inside.json", tmp_path / "curves.json")
    with pytest.raises(Damaged, match="passport.json is a FIFO, not a regular file"):
        open_regular(tmp_path / "passport.json")
    with pytest.raises(Damaged, match="symlink out of its run folder"):
        open_regular(tmp_path / "events.jsonl")
    with pytest.raises(Damaged, match="a character device"):
        open_regular(tmp_path / "events.jsonl", within="/")
    assert read_json(tmp_path / "curves.json") == {}  # a symlink inside the folder is read
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing.json")


def test_a_file_over_the_bound_is_refused_unread(tmp_path):
    path = tmp_path / "passport.json"
    with path.open("wb") as out:
        out.truncate(1024 ** 3)
    tracemalloc.start()
    try:
        with pytest.raises(Damaged, match=r"passport.json is 1.0 GiB, over the 64.0 MiB a reader takes"):
            read_json(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024
    path.write_bytes(b"x" * 10)
    assert read_bytes(path, 10) == b"x" * 10


def test_a_log_line_longer_than_the_bound_is_skipped_without_being_held(tmp_path):
    path = tmp_path / "events.jsonl"
    with path.open("wb") as out:
        out.write(b'{"kind": "start"}\n')
        out.truncate(40 * 1024 * 1024)  # 40 MiB of NUL bytes, no newline
    with path.open("ab") as out:
        out.write(b'\n{"kind": "end", "status": "completed"}\n')
    tracemalloc.start()
    try:
        with path.open("rb") as f:
            lines = list(iter_lines(f, max_line_bytes=4 * 1024 * 1024))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [line for line, _ in lines] == [b'{"kind": "start"}\n', b"\x00", b'{"kind": "end", "status": "completed"}\n']
    assert peak < 16 * 1024 * 1024


@pytest.mark.parametrize(("content", "needle"), [
    (b"\xff{}", "not UTF-8 (byte 0xff at offset 0)"),
    (b'{"a": ', "not JSON"),
    (b"[1]", "holds a JSON list, not an object"),
    (b'{"steps": true}', "'steps' holds bool True, expected a number"),
    (b'{"name": "\\ud800x"}', "lone UTF-16 surrogate"),
    (b"{" + b'"a":{' * 50_000 + b"}" * 50_001, "nested too deep"),
])
def test_read_json_names_the_damage(tmp_path, content, needle):
    path = tmp_path / "passport.json"
    path.write_bytes(content)
    with pytest.raises(Damaged, match="passport.json") as caught:
        read_json(path, types=PASSPORT_TYPES)
    assert needle in str(caught.value).replace("a whole number or a number", "a number")
