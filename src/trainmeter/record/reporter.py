"""The report sinks: the run log's columns and interval record, the text line, the closing line.

Training thread, or the report worker for a steady report, up to the series' ends (docs/spec.md section 20).
"""

from __future__ import annotations

from typing import Any

from trainmeter.core.context import RunContext
from trainmeter.core.explicit_steps import steps_unknown
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.throughput import tokens_missing
from trainmeter.record.column_lines import ColumnLines, micros, upto
from trainmeter.record.passport import headline
from trainmeter.record.runlog import RunLog
from trainmeter.record.textline import format_line, seed_values


def column_kinds(run: Any) -> list[tuple[str, Series | StepSeries]]:
    """Each series with its column record's kind: the step series' ``steps``, then every ``series``."""
    return [("steps", run.step_series), *(("series", series) for series in list(run.series.values()))]


def write_columns(log: RunLog, cursors: dict[str, int], kind: str, series: Series | StepSeries,
                  ahead: ColumnLines | None = None, stop: int | None = None) -> None:
    """Append the points of ``series`` since its cursor (before absolute position ``stop``) as one ``kind`` record,
    joined to what the worker encoded ``ahead``, and advance the cursor."""
    start = cursors.get(series.name, 0)
    if stop is not None and stop <= start:
        return  # written up to there already (a drain queued before a report of the training thread's)
    if (encoded := ahead.line(kind, series, start, stop) if ahead is not None else None) is not None:
        line, cursors[series.name] = encoded
        log.append_line(line)
        return
    end, steps, times, values = upto(series.read(start), stop)
    if steps:
        # integer microseconds: encoding an int costs a fraction of a float's shortest repr; map runs no bytecode
        # per point (float.__mul__ is the product t * 1e6 bit for bit)
        log.write(kind, name=series.name, x=series.x_kind, step=steps, t_us=micros(times), value=values)
    cursors[series.name] = end


def write_interval(m: RunContext, log: RunLog, cursors: dict[str, int], elapsed_s: float,
                   phases_s: dict[str, float], extra: dict[str, Any], ahead: ColumnLines | None = None) -> None:
    """Write the columns since the last report and one ``interval`` record, then flush. ``OSError`` when the log
    cannot be appended (``cursors`` then holds positions not written)."""
    ends = getattr(m, "report_ends", None)  # a report written later (core.reports.ReportSnapshot): its ends
    for kind, series in column_kinds(m):
        write_columns(log, cursors, kind, series, ahead,
                      None if ends is None else ends.get(series.name, None if kind == "steps" else 0))
    interval, session = m.interval, m.session
    log.write(
        "interval", step=m.steps, tokens=m.tokens, token_unit=m.token_unit, elapsed_s=elapsed_s, phases_s=phases_s,
        throughput={
            "train_tokens_per_s": interval.train_tokens_per_s if interval else None,
            "seconds_per_step": interval.seconds_per_step if interval else None,
            "session_tokens_per_s": session.session_tokens_per_s if session else None,
            "window_tokens": interval.tokens if interval else 0,
            "window_steps": interval.steps if interval else 0,
            "window_train_s": interval.train_s if interval else 0.0,
        },
        memory=m.memory.to_dict() if m.memory else None, **extra,
    )
    log.flush()


def format_text(m: RunContext) -> str:
    """The text line of the last report (docs/spec.md section 7)."""
    interval = m.interval
    mem = total = None
    if m.memory is not None:
        cuda = m.memory.cuda or {}
        if cuda.get("allocated_bytes") is not None:
            peak = cuda.get("peak_allocated_bytes")
            mem = peak if peak is not None else cuda.get("allocated_bytes")
            total = cuda.get("device_total_bytes")
        else:
            mem = m.memory.rss_bytes
            total = getattr(m.memory, "host_total_bytes", None)
    unit = None if m.token_unit is None else "tok" if m.token_unit == "tokens" else "samples"
    mfu = loss_ema = None
    extra: dict[str, str] = {}
    for fields in m.text_fields():
        mfu = fields.pop("mfu", mfu)
        loss_ema = fields.pop("loss_ema", loss_ema)
        extra.update(fields)
    latest = {name: s.stats().last for name, s in m.series.items() if s.x_kind == "step"}
    return format_line(m.steps, series=seed_values(latest), loss_ema=loss_ema,
                       tokens_per_s=interval.train_tokens_per_s if interval else None,
                       token_unit=unit, mfu=mfu, mem_used_bytes=mem, mem_total_bytes=total, extra=extra)


def summary_line(m: RunContext, saved: str | None = None, passport: dict[str, Any] | None = None) -> str:
    """One closing line saying where the record is (``saved``: default "passport in <run folder>"), with the figures
    of the ``passport`` written (else the run's own): docs/spec.md section 7."""
    stopped = getattr(getattr(m, "controls", None), "stopped", None)
    status = f"{m.status} by {stopped.by} at step {stopped.step}" if stopped is not None else m.status
    saved = saved if saved is not None else f"passport in {m.run_dir}"
    if steps_unknown(m):
        return (f"trainmeter: run {m.options.name!r} {status}, steps unknown (backward calls with no optimizer step "
                f"trainmeter knows: call tm.step() after each update); {saved}")
    if passport is None:
        missing = tokens_missing(m)
        passport = {"steps": m.steps, "tokens": None if missing else m.tokens, "token_unit": m.token_unit,
                    "tokens_missing": missing,
                    "throughput": {"session_tokens_per_s": m.session.session_tokens_per_s if m.session else None}}
    return f"trainmeter: run {m.options.name!r} {status} after {headline(passport)}; {saved}"
