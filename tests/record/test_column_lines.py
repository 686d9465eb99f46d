"""Column lines encoded ahead in pieces are byte for byte the line RunLog.write writes for the whole record."""

from __future__ import annotations

import math
import random

from tests.fakes.series import step_append
from trainmeter.core.series import Series, StepSeries
from trainmeter.record.recorder import write_columns
from trainmeter.record.runlog import ColumnLines


class _Log:
    """RunLog's encoding without a file: the lines it would write."""

    def __init__(self) -> None:
        from trainmeter.record.runlog import RunLog

        self.lines: list[str] = []
        self.joined = 0
        self._encode = RunLog.write

    def write(self, kind, **fields) -> None:
        box = type("B", (), {"_fd": 0, "_lines": self.lines})()
        self._encode(box, kind, **fields)

    def append_line(self, line: str) -> None:
        self.joined += 1
        self.lines.append(line)


def _fill(series, rng, n, start_step):
    for i in range(n):
        step = start_step + i
        if isinstance(series, StepSeries):
            step_append(series, step, step * 0.01, 64 if step % 50 else 32)
        else:
            v = rng.choice((math.nan, math.inf, -math.inf)) if rng.random() < 0.02 else rng.lognormvariate(0, 2)
            series.append(step, step * 0.0123456789, v)


def test_pieces_joined_at_a_report_are_the_whole_records_bytes_nan_and_runs_included() -> None:
    for make, kind in ((lambda: Series("tr\u00e4in_loss"), "series"), (lambda: StepSeries("tokens_per_step"), "steps")):
        whole, pieced = make(), make()
        ahead, cursors_a, cursors_b = ColumnLines(), {}, {}
        log_a, log_b = _Log(), _Log()
        step = 1
        for _report in range(4):
            for chunk in (7, 1, 130, 0, 55):  # the worker's pieces between reports
                for s in (whole, pieced):
                    _fill(s, random.Random(step), chunk, step)
                step += chunk
                ahead.encode_ahead([pieced], cursors_b)
            for s in (whole, pieced):
                _fill(s, random.Random(step), 9, step)  # points the report encodes itself
            step += 9
            write_columns(log_a, cursors_a, kind, whole)
            write_columns(log_b, cursors_b, kind, pieced, ahead)
        assert log_b.lines == log_a.lines and len(log_a.lines) == 4 and log_b.joined == 4
        assert cursors_a == cursors_b


def test_a_piece_from_another_cursor_or_past_a_trim_is_not_used() -> None:
    s, ahead = Series("loss"), ColumnLines()
    for step in range(1, 11):
        s.append(step, float(step), 1.0 / step)
    ahead.encode_ahead([s], {"loss": 0})
    assert ahead.line("series", s, 3) is None  # the log's cursor moved: the piece starts elsewhere
    assert ahead.line("series", s, 0) is not None
    s.trim(5)  # trimmed past the cursor (the pending cap): the record is encoded whole, with its drop counted
    assert ahead.line("series", s, 0) is None


def test_a_run_on_the_real_clock_logs_every_point_once_with_pieces_from_the_worker(tmp_path, monkeypatch) -> None:
    import time

    from trainmeter.core import report_worker
    from trainmeter.extensions import make_monitor
    from trainmeter.optim.extension import OptimExtension
    from trainmeter.options import make_options
    from trainmeter.record import runlog
    from trainmeter.record.runlog import read_events

    monkeypatch.setattr(report_worker, "FOLD_EVERY_S", 0.01)
    monkeypatch.setattr(report_worker, "MAX_FOLD_EVERY_S", 0.01)
    joined = []
    append_line = runlog.RunLog.append_line
    monkeypatch.setattr(runlog.RunLog, "append_line", lambda self, line: (joined.append(1), append_line(self, line)))
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), text=False, probes=False,
                     extensions=[OptimExtension()]).start()  # the optim wing wakes the worker at its first report
    losses = {}
    for step in range(1, 401):
        losses[step] = math.nan if step == 33 else 1.0 / step
        m.record({"train_loss": losses[step]}, step=step)
        m.on_step(16)
        if step % 100 == 0:
            time.sleep(0.2)  # the worker's turn: from the first report on, it encodes the points ahead
            m.steps_state.next_report_s = float("-inf")
            m.maybe_report()
    m.finish("completed")
    events = list(read_events(m.run_dir / "events.jsonl"))
    got = [(s, v) for e in events if e["kind"] == "series" and e["name"] == "train_loss"
           for s, v in zip(e["step"], e["value"], strict=True)]
    assert [s for s, _ in got] == list(range(1, 401))
    assert all((v is None) if math.isnan(losses[s]) else v == losses[s] for s, v in got)
    steps = [s for e in events if e["kind"] == "steps" for s in e["step"]]
    assert steps == list(range(1, 401)) and joined  # some lines were joined from the worker's pieces


def test_a_report_written_later_stops_at_its_ends_with_the_bytes_of_a_report_written_then() -> None:
    for make, kind in ((lambda: Series("train_loss"), "series"), (lambda: StepSeries("tokens_per_step"), "steps")):
        then, later = make(), make()
        ahead, cursors_a, cursors_b = ColumnLines(), {}, {}
        log_a, log_b = _Log(), _Log()
        step = 1
        for report in range(3):
            for s in (then, later):
                _fill(s, random.Random(step), 40, step)
            step += 40
            ahead.encode_ahead([later], cursors_b)  # a piece up to the report's end
            write_columns(log_a, cursors_a, kind, then)  # the report, written at once
            stop = later.end
            _fill(later, random.Random(step), 5 + report, step)  # appended after the report
            if report == 1:
                ahead.encode_ahead([later], cursors_b)  # a piece past the report's end: encoded whole instead
            write_columns(log_b, cursors_b, kind, later, ahead, stop)  # the same report, written later
            _fill(then, random.Random(step), 5 + report, step)
            step += 5 + report
            assert cursors_b == cursors_a
        assert log_b.lines == log_a.lines and log_b.joined == 2  # reports 0 and 2 joined their pieces


def test_a_loss_on_the_step_series_times_joins_its_strings_with_the_bytes_of_a_whole_encode() -> None:
    """The captured loss (the step series' own time objects, one step behind) joins the step series' step and t_us
    strings; a point at another time or a float step is encoded on its own: the bytes are the whole record's."""
    rng = random.Random(5)
    ahead, cursors_a, cursors_b = ColumnLines(), {}, {}
    log_a, log_b = _Log(), _Log()
    pieced = (StepSeries("tokens_per_step"), Series("train_loss"))
    whole = (StepSeries("tokens_per_step"), Series("train_loss"))
    step, prev = 1, 0.0
    for report in range(5):
        for chunk in (40, 3, 0, 17):
            for _ in range(chunk):
                t = rng.random() + step
                tokens = 64 if report != 2 else 32 + step % 2
                odd = rng.random() < 0.01  # another time object, or a float step
                at, t_at = (float(step - 1) if odd and report == 3 else step - 1), (t - 1e-7 if odd else prev)
                value = rng.lognormvariate(0, 1)
                for steps, loss in (pieced, whole):
                    step_append(steps, step, t, tokens)
                    if step > 1:  # one step behind, at the step series' time object
                        loss.append(at, t_at, value)
                prev = t
                step += 1
            ahead.encode_ahead(list(pieced), cursors_b)
        for kind, a, b in zip(("steps", "series"), whole, pieced, strict=True):
            write_columns(log_a, cursors_a, kind, a)
            write_columns(log_b, cursors_b, kind, b, ahead)
    assert log_b.lines == log_a.lines and log_b.joined == 10
