"""The report sinks: the run log's columns and interval record, the text line, the closing line.

Called through :class:`~trainmeter.record.recorder.RunRecorder` at each report: on the training thread, or for a
steady report on the report worker, up to the series' ends at the report (docs/spec.md section 20).
"""

from __future__ import annotations

from typing import Any

from trainmeter.core.context import RunContext
from trainmeter.core.explicit_steps import steps_unknown
from trainmeter.core.series import Series, StepSeries
from trainmeter.record.column_lines import ColumnLines, micros, upto
from trainmeter.record.events import columns_record, interval_record
from trainmeter.record.runlog import RunLog
from trainmeter.record.textline import format_line, seed_values
from trainmeter.sizes import format_count, format_rate


def write_columns(log: RunLog, cursors: dict[str, int], kind: str, series: Series | StepSeries,
                  ahead: ColumnLines | None = None, stop: int | None = None) -> int:
    """Append the points of ``series`` since its cursor as one ``kind`` record and advance the cursor; how many
    points past the cursor were trimmed before they could be written (0 unless writes failed long enough).

    ``ahead``: join what the report worker encoded already (:mod:`~trainmeter.record.column_lines`, the same
    bytes); ``stop``: only the points before that absolute position (a report written later by the worker).
    """
    start = cursors.get(series.name, 0)
    if stop is not None and stop <= start:
        return 0  # written up to there already (a drain queued before a report of the training thread's)
    encoded = ahead.line(kind, series, start, stop) if ahead is not None else None
    if encoded is not None:
        line, cursors[series.name] = encoded
        log.append_line(line)
        return 0
    end, steps, times, values = upto(series.read(start), stop)
    if steps:
        # integer microseconds: encoding an int costs a fraction of a float's shortest repr; map runs no bytecode
        # per point (float.__mul__ is the product t * 1e6 bit for bit)
        log.append(columns_record(kind, name=series.name, x=series.x_kind, step=steps, t_us=micros(times),
                                  value=values))
    cursors[series.name] = end
    return max(0, end - start - len(steps))


def write_interval(m: RunContext, log: RunLog, cursors: dict[str, int], elapsed_s: float,
                   phases_s: dict[str, float], extra: dict[str, Any], ahead: ColumnLines | None = None) -> int:
    """Write the columns since the last report and one ``interval`` record, then flush; the points trimmed before
    they could be written (:func:`write_columns`). ``OSError`` when the log cannot be appended (``cursors`` then
    holds positions not written)."""
    ends = getattr(m, "report_ends", None)  # a report written later (core.reports.ReportSnapshot): its ends
    stop = (lambda _name, _default=None: None) if ends is None else ends.get
    dropped = write_columns(log, cursors, "steps", m.step_series, ahead, stop(m.step_series.name))
    for series in list(m.series.values()):
        dropped += write_columns(log, cursors, "series", series, ahead, stop(series.name, 0))
    interval, session = m.interval, m.session
    log.append(interval_record(
        step=m.steps, tokens=m.tokens, token_unit=m.token_unit, elapsed_s=elapsed_s, phases_s=phases_s,
        throughput={
            "train_tokens_per_s": interval.train_tokens_per_s if interval else None,
            "seconds_per_step": interval.seconds_per_step if interval else None,
            "session_tokens_per_s": session.session_tokens_per_s if session else None,
            "window_tokens": interval.tokens if interval else 0,
            "window_steps": interval.steps if interval else 0,
            "window_train_s": interval.train_s if interval else 0.0,
        },
        memory=m.memory.to_dict() if m.memory else None, sections=extra,
    ))
    log.flush()
    return dropped


def format_text(m: RunContext) -> str:
    """The text line of the last report (docs/spec.md section 7): ``mem`` the interval's peak CUDA allocated bytes /
    device total, else RSS / host total; an extension's ``text_fields`` ``mfu`` and ``loss_ema`` in their places,
    its other fields after."""
    interval = m.interval
    mem = None
    total = None
    if m.memory is not None:
        cuda = m.memory.cuda or {}
        if cuda.get("allocated_bytes") is not None:
            peak = cuda.get("peak_allocated_bytes")
            mem = peak if peak is not None else cuda.get("allocated_bytes")
            total = cuda.get("device_total_bytes")
        else:
            mem = m.memory.rss_bytes
            total = getattr(m.memory, "host_total_bytes", None)
    unit = "tok" if m.token_unit == "tokens" else "samples"
    mfu = None
    loss_ema = None
    extra: dict[str, str] = {}
    for fields in m.text_fields():
        mfu = fields.pop("mfu", mfu)
        loss_ema = fields.pop("loss_ema", loss_ema)
        extra.update(fields)
    return format_line(m.steps, series=seed_values(latest_values(m)), loss_ema=loss_ema,
                       tokens_per_s=interval.train_tokens_per_s if interval else None,
                       token_unit=unit, mfu=mfu, mem_used_bytes=mem, mem_total_bytes=total, extra=extra)


def summary_line(m: RunContext, saved: str | None = None) -> str:
    """One closing line saying where the record is (``saved``: default "passport in <run folder>")."""
    rate = m.session.session_tokens_per_s if m.session else None
    stopped = getattr(getattr(m, "controls", None), "stopped", None)
    status = f"{m.status} by {stopped.by} at step {stopped.step}" if stopped is not None else m.status
    if steps_unknown(m):
        return (f"trainmeter: run {m.options.name!r} {status}, steps unknown (backward calls with no optimizer step "
                f"trainmeter knows: call tm.step() after each update); "
                f"{saved if saved is not None else f'passport in {m.run_dir}'}")
    return (f"trainmeter: run {m.options.name!r} {status} after {m.steps} steps, "
            f"{format_count(m.tokens)} {m.token_unit}"
            + (f", {format_rate(rate, f'{m.token_unit}/s')} (session)" if rate else "")
            + f"; {saved if saved is not None else f'passport in {m.run_dir}'}")


def latest_values(m: RunContext, x_kind: str | None = "step") -> dict[str, float | None]:
    """Last value of each series drawn against ``x_kind`` (all with ``None``)."""
    return {name: s.stats().last for name, s in m.series.items() if x_kind is None or s.x_kind == x_kind}
