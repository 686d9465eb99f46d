"""The alerts extension (name ``alerts``): rules over what the run already detects, and what each does when it fires.

Rules are ``CONDITION[:ACTION]``, comma-joined, parsed from ``--alert`` and ``tm.alert`` by pure functions (any thread);
where each rule is checked: docs/spec.md section 21. Its watchdog thread checks, once a second, the rules, the hang
and the run's control file (docs/protocol.md, "Controls"); the training thread is never asked for anything. Thread
safety: ``fire`` may run on the training or the watchdog thread (a lock; the record is replaced, never mutated); the
publisher reads ``fired`` from any thread; requests go through ``monitor.controls`` (thread-safe).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import sys
import threading
import traceback
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmeter.alerts.view import AlertsView
from trainmeter.core.extension import ExtensionBase
from trainmeter.core.threads import OurThread

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

VERDICT_CONDITIONS = {"nan": "loss_nonfinite", "spike": "loss_spike", "throughput": "throughput_drop",
                      "starved": "data_starved"}  # conditions met by a verdict (verdicts/rules.py KINDS)
CONDITIONS = (*VERDICT_CONDITIONS, "memory", "hang", "SERIES>X", "SERIES<X")
ACTIONS = ("show", "notify", "stop", "checkpoint-stop")
DEFAULT_HANG_S = 300.0
MIN_HANG_S = 5.0
DEFAULT_MEMORY_FRACTION = 0.95
MAX_RULES = 32
_SERIES = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]{0,127})\s*([<>])\s*(\S+)\Z")
_LIMITS = {"hang": ("hang seconds", DEFAULT_HANG_S, lambda s: s >= MIN_HANG_S, f"is under {MIN_HANG_S:g} seconds"),
           "memory": ("memory fraction", DEFAULT_MEMORY_FRACTION, lambda f: 0 < f <= 1, "is not a fraction in (0, 1]")}
_VALID = (f"conditions: {', '.join(CONDITIONS)} (memory=F with F in 0-1, hang=S seconds >= {MIN_HANG_S:g}); "
          f"actions: {', '.join(ACTIONS)}; e.g. nan:stop,hang=120:notify,val_loss>2.5")


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One parsed rule: ``threshold`` is the utilization (0-1) of ``memory``, the seconds of ``hang``, the value of
    ``series`` (named by ``series``; ``above``: fires above it); ``text`` the rule as written back (``nan:stop``)."""

    condition: str
    action: str
    threshold: float | None = None
    series: str | None = None
    above: bool = True
    text: str = ""


def _number(value: str, rule: str, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"invalid alert rule {rule!r}: {what} {value!r} is not a finite number; {_VALID}")
    return number


def parse_rule(text: str) -> AlertRule:
    """Parse one ``CONDITION[:ACTION]`` rule. Raises ValueError naming the bad rule and what is valid."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"invalid alert rule {text!r}: expected CONDITION[:ACTION]; {_VALID}")
    rule = text.strip()
    condition, sep, action = rule.rpartition(":")
    if not sep:
        condition, action = rule, "show"
    condition, action = condition.strip(), action.strip().lower()
    if action not in ACTIONS:
        raise ValueError(f"invalid alert rule {rule!r}: unknown action {action!r}; {_VALID}")
    name, eq, value = condition.partition("=")
    key = name.strip().lower()
    if key in VERDICT_CONDITIONS and not eq:
        return AlertRule(key, action, text=f"{key}:{action}")
    if key in _LIMITS:  # hang=S, memory=F
        what, default, valid, why = _LIMITS[key]
        number = _number(value, rule, what) if eq else default
        if not valid(number):
            raise ValueError(f"invalid alert rule {rule!r}: {key}={value} {why}; {_VALID}")
        return AlertRule(key, action, number, text=f"{key}={number:g}:{action}")
    match = _SERIES.match(condition)
    if match is not None:
        series, op, value = match.groups()
        threshold = _number(value, rule, "threshold")
        return AlertRule("series", action, threshold, series=series, above=op == ">",
                         text=f"{series}{op}{threshold:g}:{action}")
    raise ValueError(f"invalid alert rule {rule!r}: unknown condition {condition!r}; {_VALID}")


def parse_rules(value: str | Iterable[str] | None) -> tuple[AlertRule, ...]:
    """Parse ``--alert`` (comma-separated) or a list of rules; ``()`` for ``None``.
    Raises ValueError for a bad rule, too many rules, or a condition given twice."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    rules = tuple(item if isinstance(item, AlertRule) else parse_rule(item) for item in items)
    if len(rules) > MAX_RULES:
        raise ValueError(f"invalid --alert: {len(rules)} rules, at most {MAX_RULES}")
    keys = [(r.condition, r.series, r.above) for r in rules]
    twice = next((r for i, r in enumerate(rules) if keys[i] in keys[:i]), None)
    if twice is not None:
        raise ValueError(f"invalid --alert: the condition of {twice.text!r} is given twice; give each once")
    return rules


CONTROL_FILE = "control.json"
CONTROL_ACTIONS = ("stop", "checkpoint")
MAX_CONTROL_BYTES = 4096
MAX_IDS_KEPT = 256
TOP_FRAMES = 8


def thread_frames(ident: int | None, limit: int = TOP_FRAMES) -> list[str]:
    """The top ``limit`` frames of thread ``ident``, innermost last (``file:line in function``; ``cell [n], line m``
    for a notebook cell's code, which IPython compiles under ``/tmp/ipykernel_<pid>/<hash>.py``, a hash of the code,
    mapped to the cell's execution count), after the innermost notebook cell's frame when deeper; ``[]`` if gone."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return []
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    names = getattr(getattr(get() if get is not None else None, "compile", None), "_filename_map", None)
    cells = names if isinstance(names, dict) else {}
    stack = [f"cell [{cells[f.filename]}], line {f.lineno} in {f.name}" if isinstance(cells.get(f.filename), int)
             else f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_stack(frame)]
    cell = next((s for s in reversed(stack) if s.startswith("cell [")), None)
    return stack[-limit:] if cell is None or cell in stack[-limit:] else [cell, *stack[-limit:]]


_STOPPING = ("stop", "checkpoint-stop")
_CHARTS = {"nan": "loss", "spike": "loss", "series": "loss", "memory": "memory"}  # the chart a marker goes on


class Alerts(ExtensionBase):
    """Alerts that act (name ``alerts``): ``rules`` as ``MonitorOptions.alerts`` or strings; ``watch_interval_s``
    seconds between the watchdog's checks."""

    name = "alerts"

    def __init__(self, rules: Any = (), watch_interval_s: float = 1.0) -> None:
        self.rules: tuple[AlertRule, ...] = parse_rules(rules)
        self.fired: tuple[dict[str, Any], ...] = ()
        self._lock = threading.Lock()
        self._m: RunContext | None = None
        self._training_ident: int | None = None  # the thread that started the run
        self._watch_interval_s = watch_interval_s
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_steps, self._last_change_s = -1, 0.0  # the step count seen last, and since when
        self._control_sig: tuple[int, int] | None = None  # the control file's (mtime, size) read last
        self._ids: deque[str] = deque(maxlen=MAX_IDS_KEPT)  # the control requests taken (the newest)
        self._loss_pos = 0  # the per-step NaN check's position in the captured loss series (a device loss)
        self._nan_stop = next((r for r in self.rules if r.condition == "nan" and r.action in _STOPPING), None)
        if self._nan_stop is not None:  # a per-step check only where a rule asks for one (docs/spec.md)
            self.on_step = self._check_step_loss

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, monitor: RunContext) -> None:
        """Note the training thread; start the watchdog thread (``trainmeter-alerts``)."""
        self._m = monitor
        self._training_ident = threading.get_ident()
        self._last_change_s = monitor.clock()
        self._thread = OurThread(target=self._watch, name="trainmeter-alerts")
        self._thread.start()
        rule = self._nan_stop
        if rule is not None:
            if rule.action == "checkpoint-stop":  # its checkpoint: the weights before the NaN step
                monitor.controls.save_before_nonfinite(f"alert:{rule.text}")
            monitor.watch_lane_losses(self._lane_loss)  # each lane's step, in its thread (lane 1's: on_step)

    def stop(self) -> None:
        """Join the watchdog, stop watching the lanes (idempotent)."""
        if self._m is not None and self._nan_stop is not None:
            self._m.watch_lane_losses(None)
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def _watch(self) -> None:
        while not self._halt.wait(self._watch_interval_s):
            try:
                self.tick(self._m.clock())  # type: ignore[union-attr]
            except Exception as exc:  # never raise on our thread; one warning
                with contextlib.suppress(Exception):
                    self._m.warn_once("alerts-watchdog", f"the alerts' watchdog failed and stopped: {exc!r}")
                return

    def tick(self, now_s: float) -> None:
        """A watchdog check at clock time ``now_s`` (each second; tests call it): rules, hang, the control file."""
        self._check()
        self._hang(now_s)
        self._control()

    def add(self, rules: Any) -> tuple[AlertRule, ...]:
        """Add rules during the run (``tm.alert``); checked from the watchdog's next tick. Any thread.
        Raises ValueError for a bad rule (nothing is added)."""
        new = parse_rules(rules)
        with self._lock:
            self.rules = (*self.rules, *new)
        return new

    # -- checks ------------------------------------------------------------------------------
    def _check_step_loss(self) -> None:
        """Training thread, after each counted step: the step's host-read loss not finite -> fire (may stop)."""
        hot = self._m.steps_state  # type: ignore[union-attr]  # the step rule's state (read-only here)
        rule: AlertRule = self._nan_stop  # type: ignore[assignment]  # on_step exists only with this rule
        if hot.held_step == hot.steps:  # the step's loss was read on the host (a CPU loss)
            if not math.isfinite(hot.held_value):
                self.fire(rule, hot.steps, f"the loss was {hot.held_value} at step {hot.steps}",
                          on_training_thread=True)
            return
        series = hot.captured_series  # a device loss arrives once its copy completed: its new points
        if series is None or series.end == self._loss_pos:
            return
        self._loss_pos, steps, _, values = series.read(self._loss_pos)
        for step, value in zip(steps, values, strict=False):
            if not math.isfinite(value):
                self.fire(rule, hot.steps, f"the loss was {value} at step {step} (read at step {hot.steps})",
                          on_training_thread=True)
                return

    def _check(self) -> None:
        """The verdict, memory and series rules against the run now (the watchdog's tick)."""
        m: Any = self._m
        verdicts = getattr(m.extension("verdicts"), "verdicts", ()) or ()
        by_kind = {v.get("kind"): v for v in verdicts if isinstance(v, dict)}
        for rule in self.rules:
            if rule.condition == "nan":
                self._check_lanes(rule)
            if rule.condition in VERDICT_CONDITIONS:
                v = by_kind.get(VERDICT_CONDITIONS[rule.condition])
                if v is not None:
                    self.fire(rule, int(v.get("step") or m.steps), str(v.get("sentence") or rule.condition))
            elif rule.condition == "memory":
                used = getattr(m.memory, "utilization", None)
                if used is not None and rule.threshold is not None and used >= rule.threshold:
                    self.fire(rule, m.steps, f"memory utilization {used:.0%} reached the alert's {rule.threshold:.0%}")
            elif rule.condition == "series" and rule.series in m.series:
                last = m.series[rule.series].stats().last
                if last is not None and rule.threshold is not None and (
                        last > rule.threshold if rule.above else last < rule.threshold):
                    op = ">" if rule.above else "<"
                    self.fire(rule, m.steps, f"{rule.series} = {last:.4g} {op} {rule.threshold:g}")

    def _lane_loss(self, lane: Any, step: int, value: float) -> None:
        """Lane ``lane``'s loss at its ``step`` was not finite (its thread): fire; every lane stops at its next
        step, this one at this step."""
        what = f"the loss of lane {lane.number} (thread {lane.thread!r}, {lane.loss_name}) was {value} at its step {step}"
        self.fire(self._nan_stop, self._m.steps, what, lane=lane.number)  # type: ignore[arg-type, union-attr]

    def _check_lanes(self, rule: AlertRule) -> None:
        """A point of lane 2, 3, ...'s loss series not finite -> fire ``rule`` naming the lane (docs/spec.md §21)."""
        m: Any = self._m
        for lane in m.lane_records()[1:]:  # lane 1's loss: its verdict and the per-step check
            series = m.series.get(lane.loss_series)
            stats = series.stats() if series is not None else None
            if stats is not None and stats.nonfinite:
                what = (f"the loss of lane {lane.lane} (thread {lane.thread!r}, {lane.loss_series}) was not finite at "
                        f"{stats.nonfinite} of its {stats.count} steps (the lane at step {stats.last_step})")
                self.fire(rule, m.steps, what, lane=lane.lane)
                return

    def _hang(self, now_s: float) -> None:
        """The ``hang`` rules not yet fired: no step for their seconds while training, the training thread's frames."""
        m: Any = self._m
        steps = m.steps
        if steps != self._last_steps or not m.phases.training:  # a step came, or eval/checkpoint time: no hang
            self._last_steps, self._last_change_s = steps, now_s
            return
        quiet_s = now_s - self._last_change_s
        done = {a["rule"] for a in self.fired}
        for rule in self.rules:
            if rule.condition == "hang" and rule.text not in done and quiet_s >= rule.threshold:  # type: ignore[operator]
                where = thread_frames(self._training_ident)
                top = where[-1] if where else "its stack could not be read"
                cell = next((w for w in reversed(where) if w.startswith("cell [")), top)  # the notebook's line
                top += "" if cell == top else f", called from {cell}"
                self.fire(rule, steps, f"no optimizer step for {quiet_s:.0f} s after step {steps}; "
                                       f"the training thread is at {top}", where=where)

    def _control(self) -> None:
        """The run's ``control.json``, read when its mtime or size changed: a new request id asks for its action.
        Ignored, never raising: a link, too big, not JSON, another run's, an unknown action."""
        run_dir = self._m.run_dir  # type: ignore[union-attr]
        if run_dir is None:
            return
        path = Path(run_dir) / CONTROL_FILE
        try:
            st = os.lstat(path)
            if (st.st_mtime_ns, st.st_size) == self._control_sig:
                return
            self._control_sig = (st.st_mtime_ns, st.st_size)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONTROL_BYTES:
                return
            with open(path, "rb") as f:
                data = json.loads(f.read(MAX_CONTROL_BYTES).decode("utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("run_id") != Path(run_dir).name:
            return
        action, ident = data.get("action"), data.get("id")
        if action not in CONTROL_ACTIONS or type(ident) not in (str, int) or str(ident) in self._ids:  # JSON: no bool
            return
        self._ids.append(str(ident))
        controls = self._m.controls  # type: ignore[union-attr]
        (controls.request_stop if action == "stop" else controls.request_checkpoint)("control-file")

    # -- firing -----------------------------------------------------------------------------
    def fire(self, rule: AlertRule, step: int, what: str, *, on_training_thread: bool = False,
             where: list[str] | None = None, lane: int | None = None) -> None:
        """Record ``rule`` as fired at ``step`` (once; ``lane``: the lane whose series fired it) and act. On the
        training thread a stop raises ``StopTraining`` now (the step has completed); elsewhere it is a request for
        every lane's next step."""
        m: Any = self._m  # set at start: every check runs after it
        with self._lock:
            if any(a["rule"] == rule.text for a in self.fired):
                return
            event: dict[str, Any] = {"rule": rule.text, "condition": rule.condition, "action": rule.action,
                                     "step": int(step), "t_s": m.elapsed_s(), "sentence": f"alert {rule.text}: {what}",
                                     "notify": rule.action != "show", **({"where": where} if where is not None else {}),
                                     **({"lane": lane} if lane is not None else {})}
            self.fired = (*self.fired, event)
        if rule.action not in _STOPPING:
            return
        by, controls = f"alert:{rule.text}", m.controls
        if rule.action == "checkpoint-stop":
            finite = rule.condition == "nan"  # the recovery point: finite weights (docs/spec.md section 21)
            (controls.checkpoint_now if on_training_thread else controls.request_checkpoint)(by, finite=finite)
        # stop_now raises StopTraining unless a framework takes the stop
        (controls.stop_now if on_training_thread else controls.request_stop)(by)

    # -- what others read -------------------------------------------------------------------
    def view(self) -> AlertsView:
        """The rules and what fired (any thread)."""
        return AlertsView(rules=tuple(r.text for r in self.rules), fired=self.fired)

    def warnings(self) -> list[str]:
        return [a["sentence"] for a in self.fired]

    def markers(self) -> list[dict[str, Any]]:
        """A marker per fired alert: loss rules on the loss chart, memory on memory, else throughput (any thread)."""
        return [{"kind": "alert", "step": a["step"], "label": f"alert {a['rule']}", "sentence": a["sentence"],
                 "chart": _CHARTS.get(a["condition"], "throughput")} for a in self.fired]

    def passport_section(self) -> list[dict[str, Any]] | None:
        """The passport's ``alerts``: what fired, in order (``[]`` when rules were declared and none fired)."""
        if not self.rules and not self.fired:
            return None
        return [dict(a) for a in self.fired]

