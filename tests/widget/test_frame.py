from __future__ import annotations

import json
import math
import struct
from array import array
from pathlib import Path

import pytest

from tests.widget.wire_types import decode_frame
from trainmeter.widget.frame import FrameError, SeriesColumns, encode_frame

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _same_floats(a: list[float], b: list[float | None]) -> bool:
    if len(a) != len(b):
        return False
    return all((y is None and math.isnan(x)) or x == y for x, y in zip(a, b, strict=True))


def test_round_trip_keeps_names_kinds_and_values() -> None:
    series = [
        SeriesColumns(name="loss/train", x_kind="step", xs=[1, 2, 3], ys=[3.5, 2.25, 1.0]),
        SeriesColumns(name="mem/rss", x_kind="time", xs=[0.1, 0.2], ys=[1e9, 2.5e9]),
    ]
    frame = decode_frame(encode_frame(42, series))
    assert frame.v == 2
    assert frame.seq == 42
    assert [(s.name, s.x_kind) for s in frame.series] == [
        ("loss/train", "step"),
        ("mem/rss", "time"),
    ]
    assert list(frame.series[0].xs) == [1.0, 2.0, 3.0]
    assert list(frame.series[0].ys) == [3.5, 2.25, 1.0]
    assert list(frame.series[1].ys) == [1e9, 2.5e9]
    assert isinstance(frame.series[0].xs, array)


def test_round_trip_preserves_nan_as_nan() -> None:
    series = [SeriesColumns(name="loss", x_kind="step", xs=[1, 2, 3], ys=[1.0, math.nan, 0.5])]
    ys = decode_frame(encode_frame(0, series)).series[0].ys
    assert ys[0] == 1.0 and math.isnan(ys[1]) and ys[2] == 0.5


def test_round_trip_of_empty_frame_and_empty_series() -> None:
    assert decode_frame(encode_frame(3, [])).series == ()
    frame = decode_frame(encode_frame(4, [SeriesColumns(name="a", x_kind="step", xs=[], ys=[])]))
    assert len(frame.series) == 1 and len(frame.series[0].xs) == 0


@pytest.mark.parametrize("name_len", range(1, 17))
def test_data_section_starts_at_multiple_of_8_with_zero_padding(name_len: int) -> None:
    series = [SeriesColumns(name="x" * name_len, x_kind="step", xs=[1.0], ys=[2.0])]
    data = encode_frame(5, series)
    (header_len,) = struct.unpack_from("<I", data, 4)
    data_offset = len(data) - 16
    assert data_offset % 8 == 0
    assert 8 + header_len <= data_offset < 8 + header_len + 8
    assert set(data[8 + header_len : data_offset]) <= {0}
    assert struct.unpack_from("<dd", data, data_offset) == (1.0, 2.0)


def test_header_len_counts_utf8_bytes_of_non_ascii_names() -> None:
    data = encode_frame(1, [SeriesColumns(name="µ·ε", x_kind="time", xs=[0.5], ys=[1.0])])
    assert decode_frame(data).series[0].name == "µ·ε"
    (header_len,) = struct.unpack_from("<I", data, 4)
    assert json.loads(data[8 : 8 + header_len].decode("utf-8"))["series"][0]["name"] == "µ·ε"


def test_decode_accepts_memoryview_and_bytearray() -> None:
    data = encode_frame(9, [SeriesColumns(name="a", x_kind="step", xs=[1.0], ys=[2.0])])
    assert decode_frame(memoryview(data)).seq == 9
    assert decode_frame(bytearray(data)).series[0].ys[0] == 2.0


def test_encode_rejects_columns_of_different_lengths() -> None:
    with pytest.raises(FrameError, match="2 step xs but 1 ys"):
        encode_frame(0, [SeriesColumns(name="a", x_kind="step", xs=[1, 2], ys=[1])])


def test_encode_rejects_unknown_x_kind() -> None:
    with pytest.raises(FrameError, match="unknown x kind"):
        encode_frame(0, [SeriesColumns(name="a", x_kind="epoch", xs=[1], ys=[1])])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"TMF", "too short"),
        (b"XXXX\x00\x00\x00\x00", "bad magic"),
        (b"TMF1\x10\x00\x00\x00{}", "truncated inside its header"),
        (b'TMF1\x08\x00\x00\x00{"v":3} ', "unsupported"),
    ],
)
def test_decode_rejects_malformed_frames(data: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_frame(data)


def test_mapped_x_columns_round_trip_after_the_native_x() -> None:
    series = [SeriesColumns(name="loss", x_kind="step", xs=[1, 2], ys=[3.0, 2.0],
                            mapped={"tokens": [10, 20], "time": [0.5, math.nan]}),
              SeriesColumns(name="rss", x_kind="time", xs=[0.5], ys=[1e9])]
    data = encode_frame(1, series)
    header = json.loads(data[8:8 + struct.unpack_from("<I", data, 4)[0]])
    assert [e.get("axes") for e in header["series"]] == [["step", "tokens", "time"], None]
    loss, rss = decode_frame(data).series
    assert list(loss.mapped["tokens"]) == [10.0, 20.0] and math.isnan(loss.mapped["time"][1])
    assert list(loss.xs) == [1.0, 2.0] and list(loss.ys) == [3.0, 2.0] and rss.mapped == {}
    assert len(data) % 8 == 0 and len(data) - (8 * 8 + 2 * 8) >= 8 + len(json.dumps(header, separators=(",", ":")))


def test_encode_rejects_a_mapped_column_of_another_length_or_axis() -> None:
    with pytest.raises(FrameError, match="tokens xs"):
        encode_frame(0, [SeriesColumns(name="a", x_kind="step", xs=[1], ys=[1], mapped={"tokens": []})])
    with pytest.raises(FrameError, match="unknown x axis"):
        encode_frame(0, [SeriesColumns(name="a", x_kind="step", xs=[1], ys=[1], mapped={"flops": [1]})])


def test_decode_rejects_truncated_data() -> None:
    data = encode_frame(0, [SeriesColumns(name="a", x_kind="step", xs=[1, 2], ys=[3, 4])])
    with pytest.raises(FrameError, match="data truncated"):
        decode_frame(data[:-8])


def test_golden_frame_decodes_to_its_json_form() -> None:
    data = (FIXTURES / "frame_v2.bin").read_bytes()
    expected = json.loads((FIXTURES / "frame_v2.json").read_text(encoding="utf-8"))
    frame = decode_frame(data)
    assert len(data) == expected["byte_length"]
    assert struct.unpack_from("<I", data, 4)[0] == expected["header_len"]
    assert expected["data_offset"] % 8 == 0
    assert (frame.v, frame.seq) == (expected["v"], expected["seq"])
    assert [s.name for s in frame.series] == [s["name"] for s in expected["series"]]
    for got, want in zip(frame.series, expected["series"], strict=True):
        assert got.x_kind == want["x"]
        assert _same_floats(list(got.xs), want["xs"])
        assert _same_floats(list(got.ys), want["ys"])
        assert list(got.mapped) == list(want["mapped"])
        for axis, column in got.mapped.items():
            assert _same_floats(list(column), want["mapped"][axis])
    assert any(math.isnan(y) for s in frame.series for y in s.ys)


def test_golden_frame_is_reproduced_byte_for_byte_by_the_encoder() -> None:
    expected = json.loads((FIXTURES / "frame_v2.json").read_text(encoding="utf-8"))
    series = [
        SeriesColumns(
            name=s["name"],
            x_kind=s["x"],
            xs=s["xs"],
            ys=[math.nan if y is None else y for y in s["ys"]],
            mapped={axis: [math.nan if v is None else v for v in column] for axis, column in s["mapped"].items()},
        )
        for s in expected["series"]
    ]
    assert encode_frame(expected["seq"], series) == (FIXTURES / "frame_v2.bin").read_bytes()
