from __future__ import annotations

import json
import math
import time

import pytest

from tests.widget.wire_types import apply, decode_frame
from trainmeter.core.clock import FakeClock
from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.memory import MemoryReading
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget.feed import REPLACE_FACTOR
from trainmeter.widget.publisher import MessageBudget, Publisher


class Recorder:
    """A widget stand-in that records every message with the clock's time (and its JSON and buffer bytes), and
    replays them as js/src/store.ts and js/src/statestore.ts do: ``view`` is the state a front end shows
    (the traitlet, then the patches), ``store`` the series it draws and ``mapped`` their other x columns."""

    def __init__(self, clock):
        self.clock = clock
        self.log: list[tuple[float, str, int]] = []  # (t, kind, bytes)
        self.frames: list[tuple[str, int]] = []  # (kind, frame bytes) of every message with a frame
        self._state: dict = {}
        self._history = b""
        self.view: dict = {}
        self.patches_refused = 0
        self.store: dict[str, tuple[list[float], list[float]]] = {}
        self.mapped: dict[str, dict[str, list[float]]] = {}
        self.store_seq = -1
        self.max_store_points = 0

    @property
    def state(self):
        return self._state

    @state.setter
    def state(self, value):
        self._state = value
        self.view = value
        self.log.append((self.clock(), "state", len(json.dumps(value))))

    @property
    def history(self):
        return self._history

    @history.setter
    def history(self, frame):
        self._history = frame
        self.log.append((self.clock(), "history", len(frame)))
        self.frames.append(("history", len(frame)))
        decoded = decode_frame(frame)
        if self.store_seq < 0 or decoded.seq > self.store_seq:
            self._replace(decoded)

    def send(self, content, buffers=None):
        kind = content["kind"]
        self.log.append((self.clock(), kind, len(json.dumps(content)) + sum(len(b) for b in buffers or [])))
        if buffers:
            self.frames.append((kind, len(buffers[0])))
            frame = decode_frame(buffers[0])
            assert frame.seq == content["seq"]
            if kind == "snapshot":
                self._replace(frame)
            elif self.store_seq < 0 or frame.seq > self.store_seq:
                for s in frame.series:
                    if s.name in content.get("replace", ()) or s.name not in self.store:
                        self._set(s)
                    else:
                        xs, ys = self.store[s.name]
                        xs.extend(s.xs)
                        ys.extend(s.ys)
                        for axis, column in s.mapped.items():
                            self.mapped[s.name][axis].extend(column)
                self.store_seq = frame.seq
        patch = content.get("state")
        if patch is not None and "full" in patch:
            self.view = patch["full"]
        elif patch is not None and patch["base"] == self.view.get("rev", 0):
            self.view = {**apply(self.view, patch["ops"]), "rev": patch["rev"]}
        elif patch is not None:
            self.patches_refused += 1
        self._note()

    def _set(self, s):
        self.store[s.name] = (list(s.xs), list(s.ys))
        self.mapped[s.name] = {axis: list(column) for axis, column in s.mapped.items()}

    def _replace(self, frame):
        self.store, self.mapped = {}, {}
        for s in frame.series:
            self._set(s)
        self.store_seq = frame.seq
        self._note()

    def _note(self):
        self.max_store_points = max([self.max_store_points] + [len(xs) for xs, _ in self.store.values()])

    def max_per_window(self, window_s=1.0):
        times = [t for t, _, _ in self.log]
        return max((sum(1 for u in times if t <= u < t + window_s) for t in times), default=0)

    def bytes_between(self, t0, t1):
        return sum(n for t, _, n in self.log if t0 <= t < t1)


def _monitor(run_root, clock, **opts):
    m = make_monitor(make_options(run_dir=run_root, name="pub", **opts), clock=clock, text=False, probes=False)
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=1_000_000_000, rss_peak_bytes=1_000_000_000)
    return m


def _train(m, clock, pub, *, seconds, steps_per_s, tick_s=0.25, hello_every_tick=False, loss_at=None):
    per_tick = int(steps_per_s * tick_s)
    for _ in range(int(seconds / tick_s)):
        for _ in range(per_tick):
            loss = loss_at(m.steps) if loss_at else 1.0 / (1 + m.steps)
            m.on_step(128, loss_value=loss)
        clock.advance(tick_s)
        m.on_step(128, loss_value=0.5)
        if hello_every_tick:
            pub.request_snapshot()
        pub.tick()


def test_fast_run_never_exceeds_twenty_messages_in_any_second(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock)
    _train(m, clock, pub, seconds=30, steps_per_s=4000, hello_every_tick=True)
    assert w.max_per_window() <= 20
    assert sum(1 for _, k, _ in w.log if k == "snapshot") > 10
    assert {k for _, k, _ in w.log} == {"snapshot"}  # the traitlets are not set while the run is live


def test_message_budget_caps_a_tight_tick_loop_at_twenty_per_second(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=0.1)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock, tick_s=0.001, state_interval_s=0.0)
    _train(m, clock, pub, seconds=3, steps_per_s=2000, tick_s=0.01, hello_every_tick=True)
    assert 15 <= w.max_per_window() <= 20


def test_message_budget_window():
    budget = MessageBudget(per_s=3, window_s=1.0)
    assert [budget.allow(t) for t in (0.0, 0.1, 0.2, 0.3, 0.99)] == [True, True, True, False, False]
    assert budget.allow(1.0) is True


def test_a_fast_series_streams_about_fifty_points_a_second_from_the_start(run_root):
    from trainmeter.widget.feed import STREAM_POINTS_PER_S

    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock)
    _train(m, clock, pub, seconds=10, steps_per_s=4000)  # 40,000 steps: the budget alone keeps 2,000 points
    loss = len(w.store["train_loss"][0])
    assert loss <= 2 * STREAM_POINTS_PER_S * 10 and loss >= 100
    assert w.bytes_between(0, 10) / 10 < 15_000


def test_replayed_messages_rebuild_the_decimated_history_in_order(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=2.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock, budget_points=200)
    _train(m, clock, pub, seconds=20, steps_per_s=400)
    xs, ys = w.store["train_loss"]
    assert all(a < b for a, b in zip(xs, xs[1:], strict=False))  # each point once, in order, across re-buckets
    assert w.max_store_points <= (REPLACE_FACTOR + 1) * 200  # replaced by the decimated history past 3 budgets
    assert w.patches_refused == 0 and w.view == pub.states.full and pub.states.rev > 10  # the patches rebuild every state
    assert all(k in ("append", "state") for _, k, _ in w.log)  # what changed, never the whole state again
    m.finish("completed")
    pub.close()
    final = decode_frame(w.history)
    loss = next(s for s in final.series if s.name == "train_loss")
    assert len(loss.xs) <= 200 and loss.xs[-1] == m.steps and max(loss.ys) == 1.0
    assert w.store["train_loss"] == (list(loss.xs), list(loss.ys))
    assert w.state["status"] == "completed" and w.state["rev"] == pub.states.rev


def test_hello_gets_a_snapshot_of_every_series_on_the_next_tick(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock)
    _train(m, clock, pub, seconds=3, steps_per_s=40)
    m.record({"lr": 0.1})
    w.view = {"name": "a reloaded page", "status": "starting"}  # holds the start's state: patches do not apply
    pub.request_snapshot()
    pub.tick()
    assert w.log[-1][1] == "snapshot"
    assert {"train_loss", "lr", "train_tokens_per_s", "session_tokens_per_s", "rss_bytes"} <= set(w.store)
    assert w.view["rev"] == pub.states.rev and w.view["step"] == m.steps  # the whole state came with it
    clock.advance(1.0)
    m.on_step(128, loss_value=0.5)
    pub.tick()
    assert w.patches_refused == 0 and w.view["step"] == m.steps


def test_report_series_get_one_point_per_report_at_session_seconds(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock)
    _train(m, clock, pub, seconds=5, steps_per_s=40)
    xs, ys = pub.feed.decimators["train_tokens_per_s"].columns()
    assert len(xs) == m.reports and xs[-1] == pytest.approx(m.session.elapsed_s)
    assert ys[-1] == pytest.approx(m.interval.train_tokens_per_s)
    assert pub.feed.decimators["rss_bytes"].x_kind == "time"


def test_reader_cursor_lets_the_monitor_trim(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    pub = Publisher(m.context, Recorder(clock), clock=clock)
    _train(m, clock, pub, seconds=10, steps_per_s=1000)
    assert m.series["train_loss"].pending < 1500 and m.step_series.pending < 1500


class SyntheticMonitor:
    """The run context's surface the publisher reads, fed in bulk (no run log): a fast 1M-point run."""

    def __init__(self, clock, interval_s=10.0):
        from trainmeter.core.phases import PhaseClock
        from trainmeter.core.series import Series
        from trainmeter.core.series_views import SeriesViews
        from trainmeter.core.throughput import interval_summary, session_summary

        self._interval_summary, self._session_summary = interval_summary, session_summary
        self.clock = clock
        self.options = make_options(name="synthetic", interval_s=interval_s)
        self.phases = PhaseClock(clock)
        self.phases.begin()
        self.status, self.run_dir, self.text_line, self.token_unit = "running", None, "", "tokens"
        self.series = {"train_loss": Series("train_loss")}
        self.step_series = Series("tokens_per_step")
        self.steps = self.tokens = self.reports = 0
        self.interval = self.session = None
        self.memory = MemoryReading(rss_bytes=10**9, rss_peak_bytes=10**9)
        self.warnings, self.dispatch, self.text = [], Dispatcher(), False
        self.collect, self.progress_bar = self.dispatch.collect, lambda recent=None: None  # the context's fan-outs
        self._last_report_s = clock()
        self.series_views = SeriesViews(lambda: self.series, self.add_reader)  # the run context's decimated views

    def add_reader(self, drain=None, reads=None):
        return {}

    def extension(self, name):
        return self.dispatch.view(name)

    def elapsed_s(self):
        return self.phases.session_elapsed_s(self.clock())

    def warn_once(self, key, message):
        self.warnings.append(message)

    def train(self, n_steps, tokens_per_step, loss_at):
        series = self.series["train_loss"]
        for _ in range(n_steps):
            self.steps += 1
            series.append(self.steps, 0.0, loss_at(self.steps))
        self.tokens += n_steps * tokens_per_step
        now = self.clock()
        if now - self._last_report_s >= self.options.interval_s:
            elapsed = self.elapsed_s()
            self.interval = self._interval_summary(tokens=self.tokens, steps=self.steps, train_s=elapsed)
            self.session = self._session_summary(tokens=self.tokens, elapsed_s=elapsed)
            self.reports += 1
            self._last_report_s = now
            series.trim(series.end)  # the run log has written it


def test_bytes_per_second_stay_flat_over_a_million_point_run():
    clock = FakeClock(0.0)
    m = SyntheticMonitor(clock)
    w = Recorder(clock)
    pub = Publisher(m, w, clock=clock)
    for _ in range(1000):  # 250 s at 4,000 steps/s
        m.train(1000, 128, lambda s: 2.0 + math.sin(s / 7000.0) + (s % 13) * 0.01)
        clock.advance(0.25)
        pub.tick()
    assert m.steps == 1_000_000
    early, late = w.bytes_between(50, 100), w.bytes_between(200, 250)
    assert 0 < late <= 1.25 * early  # ten times the points, the same bytes per second
    assert late / 50 < 2_000  # the state goes as patches, each point once
    assert all(n <= 2 * 2000 * 32 + 4096 for _, k, n in w.log)  # the loss and its twin replaced at once, at most
    assert 1000 <= len(pub.feed.decimators["train_loss"].columns()[0]) <= 2000
    assert w.max_store_points <= (REPLACE_FACTOR + 1) * 2000


def test_thread_publishes_during_the_run_and_stops_at_once(run_root):
    m = make_monitor(make_options(run_dir=run_root, name="thr", interval_s=0.1), text=False, probes=False).start()
    w = Recorder(time.perf_counter)
    pub = Publisher(m.context, w, tick_s=0.01, state_interval_s=0.0).start()
    deadline = time.perf_counter() + 0.4
    while time.perf_counter() < deadline:
        m.on_step(10, loss_value=1.0)
        time.sleep(0.001)
    assert pub.running and w.max_per_window() <= 20 and len(w.log) >= 5
    m.finish("completed")
    t0 = time.perf_counter()
    pub.close()
    assert time.perf_counter() - t0 < 0.5
    assert not pub.running and w.state["status"] == "completed"
    assert 0 <= m.steps - w.store["train_loss"][0][-1] < pub.feed.decimators["train_loss"].width  # the last bucket's


def test_a_broken_widget_disables_the_publisher_without_raising(run_root):
    class Broken(Recorder):
        def send(self, content, buffers=None):
            raise RuntimeError("comm gone")

    m = make_monitor(make_options(run_dir=run_root, name="brk", interval_s=0.1), text=False, probes=False).start()
    pub = Publisher(m.context, Broken(time.perf_counter), tick_s=0.002, state_interval_s=1e9)
    pub._last_state_s = time.perf_counter()
    pub.start()
    with pytest.warns(MonitorWarning, match="live widget stopped"):
        for _ in range(200):
            m.on_step(10, loss_value=1.0)
            time.sleep(0.001)
            if not pub.running:
                break
        pub._thread.join(1.0)
    assert not pub.running and m.text is True
    m.finish("completed")
    pub.close()


def test_close_replaces_every_display_by_the_static_dashboard_without_a_widget_view(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)

    class Widget(Recorder):
        store_key = "k123"

        def _repr_mimebundle_(self, **kwargs):
            return {"text/plain": "trainmeter: pub", "application/vnd.jupyter.widget-view+json": {"model_id": "x"}}, {}

    class Handle:
        def __init__(self):
            self.updates = []

        def update(self, data, metadata=None, raw=False):
            self.updates.append((data, metadata, raw))

    pub = Publisher(m.context, Widget(clock), clock=clock)
    pub.handles = [Handle(), Handle()]
    _train(m, clock, pub, seconds=3, steps_per_s=40)
    m.finish("completed")
    pub.close()
    pub.close()  # idempotent
    for handle in pub.handles:
        assert len(handle.updates) == 1
        data, _, raw = handle.updates[0]
        # a saved notebook must not point at a widget model that is gone when it is reopened
        assert raw and "application/vnd.jupyter.widget-view+json" not in data
        html = data["text/html"]
        assert "data:image/svg+xml;base64," in html and "<svg" not in html and "<script" not in html
        assert 'data-tm-mount="k123"' in html and "completed" in data["text/plain"]
    saved = json.loads((m.run_dir / "dashboard.json").read_text())  # tm.display(run) replays every panel
    assert saved["status"] == "completed" and saved["tiles"]


@pytest.mark.parametrize("restored", [True, False], ids=["page-restored-mid-run", "no-restore"])
def test_close_sends_the_final_bundle_only_when_a_page_restored_during_the_run(run_root, restored):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)

    class Widget(Recorder):
        store_key = "k9"
        sent: list = []

        def send(self, content, buffers=None):
            if content.get("kind") == "final":
                self.sent.append(content)
            else:
                super().send(content, buffers)

        def _repr_mimebundle_(self, **kwargs):
            return {"text/plain": "t", "application/vnd.jupyter.widget-view+json": {"model_id": "x"}}, {}

    class Router:
        diverted = {"kernel_info_request": 2}

    class Handle:
        def update(self, data, metadata=None, raw=False):
            self.data = data

    widget = Widget(clock)
    pub = Publisher(m.context, widget, clock=clock)
    pub.use_restore_router(Router())
    pub.handles = [Handle()]
    _train(m, clock, pub, seconds=2, steps_per_s=40)
    if restored:
        Router.diverted = {"kernel_info_request": 3}  # a reloaded page's kernel_info, answered by the subshell
    m.finish("completed")
    pub.close()
    if restored:
        assert len(widget.sent) == 1 and widget.sent[0]["data"] == pub.handles[0].data
        assert "application/vnd.jupyter.widget-view+json" not in widget.sent[0]["data"]
    else:
        assert widget.sent == []


def test_attach_widget_displays_at_once_and_registers_the_live_publisher(run_root, monkeypatch):
    pytest.importorskip("anywidget")
    import IPython.display

    from trainmeter.widget import attach as attach_module

    shown = []

    class Handle:
        def update(self, data, metadata=None, raw=False):
            shown.append(("update", data))

    def fake_display(data, metadata=None, raw=False, display_id=None):
        shown.append(("display", data))
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", fake_display)
    m = make_monitor(make_options(run_dir=run_root, name="att", interval_s=0.1), text=False, probes=False)
    pub = attach_module.attach_widget(m.context)
    try:
        assert shown[0][0] == "display" and "application/vnd.jupyter.widget-view+json" in shown[0][1]
        assert pub.running and attach_module.live_publisher() is pub
        # outside a kernel: no cell id, no restore router (a reload keeps the old behaviour)
        assert pub.widget.output_ref == {"model_id": pub.widget.model_id, "cell_id": None, "source": None}
        assert pub.restore_router is None
        m.start()
        m.on_step(10, loss_value=1.0)
        m.finish("completed")
    finally:
        pub.close()
    assert shown[-1][0] == "update" and "text/html" in shown[-1][1]
    assert attach_module.live_publisher() is pub and not pub.running


@pytest.mark.slow
def test_in_a_real_kernel_thread_messages_reach_the_cell_and_hello_is_answered_in_a_subshell(tmp_path):
    """ipykernel end to end: comm messages from the publisher thread carry the cell's parent header and
    arrive while the cell runs; a front-end ``hello`` sent to a subshell is answered before the cell ends;
    the display gains ``text/html`` at the end."""
    import queue

    jupyter_client = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    pytest.importorskip("anywidget")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        kc.execute_interactive("%load_ext trainmeter", timeout=60)
        kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
        subshell = kc.control_channel.get_msg(timeout=10)["content"].get("subshell_id")
        cell = ("%%trainmeter --name kern --interval 0.2\nimport time, trainmeter as tm\n"
                "for i in range(200):\n    tm.emit(train_loss=1.0 / (i + 1))\n    time.sleep(0.01)\n")
        cell_id = kc.execute(cell)
        log, comm_id, hello_at, t0 = [], None, None, time.monotonic()
        while time.monotonic() - t0 < 60:
            try:
                msg = kc.iopub_channel.get_msg(timeout=0.05)
            except queue.Empty:
                msg = None
            now = time.monotonic() - t0
            if msg is not None:
                kind, content = msg["msg_type"], msg["content"]
                ours = msg["parent_header"].get("msg_id") == cell_id
                if kind == "comm_open" and content["data"].get("state", {}).get("_model_name") == "AnyModel":
                    comm_id = content["comm_id"]
                elif kind == "comm_msg" and content.get("comm_id") == comm_id:
                    data = content["data"]
                    what = (data.get("content") or {}).get("kind") or ",".join(sorted(data.get("state") or {}))
                    log.append((now, what or "history", ours))
                elif kind in ("stream", "update_display_data"):
                    log.append((now, kind, ours, content.get("data", {})))
                elif kind == "status" and content["execution_state"] == "idle" and ours:
                    break
            if comm_id and hello_at is None and subshell and now > 0.5:
                hello = kc.session.msg("comm_msg", {"comm_id": comm_id,
                                                    "data": {"method": "custom", "content": {"kind": "hello"}}})
                hello["header"]["subshell_id"] = subshell
                kc.shell_channel.send(hello)
                hello_at = now
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    end_of_cell = next(t for t, kind, *_ in log if kind == "stream")
    live = [entry for entry in log if entry[0] < end_of_cell and entry[1] in ("append", "snapshot", "state", "history")]
    assert len(live) >= 3 and all(ours for _, _, ours in live)
    if subshell:
        # answered in-cell: a snapshot message, or the history traitlet when one was due anyway (it replaces
        # every view's store, so the publisher drops the pending snapshot); which one depends on load
        assert any(kind in ("snapshot", "history") and hello_at <= t < end_of_cell for t, kind, _ in live), (
            hello_at, end_of_cell, [(round(t, 2), kind) for t, kind, _ in live])
    final = [entry for entry in log if entry[1] == "update_display_data"]
    assert final and "text/html" in final[-1][3] and final[-1][2]


@pytest.mark.slow
def test_the_history_of_the_maximum_series_count_stays_within_the_frame_budget(run_root):
    """256 full series (the default cap) share one history budget; no per-series floor breaks it."""
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock, state_interval_s=0.0)
    for step in range(2500):
        m.on_step(128, loss_value=1.0)
        m.record({f"s{i}": float(step + i) for i in range(255)})
        if step % 50 == 0:
            clock.advance(0.5)
            pub.tick()
    clock.advance(6.0)
    pub.request_snapshot()
    pub.tick()
    snapshot = [n for k, n in w.frames if k == "snapshot"]
    assert len(m.series) == 256 and snapshot
    assert max(snapshot) <= 192 * 1024, max(snapshot)  # 6,000 points on three x axes, headers included
    assert sum(len(xs) for xs, _ in w.store.values()) <= 6000 + 2 * 256


def test_every_point_reaches_the_store_mapped_onto_tokens_and_time(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock)
    _train(m, clock, pub, seconds=5, steps_per_s=40)
    steps, _ = w.store["train_loss"]
    tokens, times = w.mapped["train_loss"]["tokens"], w.mapped["train_loss"]["time"]
    assert len(steps) == len(tokens) == len(times) > 100
    assert all(tok == pytest.approx(128 * step) for step, tok in zip(steps, tokens, strict=True))  # 128 every step
    assert all(b > a for a, b in zip(times, times[1:], strict=False)) and times[-1] <= clock()
    t, _ = w.store["train_tokens_per_s"]  # a time series: its steps and tokens at each report
    assert w.mapped["train_tokens_per_s"]["step"][-1] <= m.steps and len(w.mapped["train_tokens_per_s"]["step"]) == len(t)
    assert "axis:tokens" not in w.store and "head" not in w.view["x_axis"]
    assert w.view["x_axis"]["time_missing"] is None and w.view["x_axis"]["tokens_missing"] is None
    m.finish("completed")


def test_the_smoothed_loss_is_folded_over_every_step_at_every_drawn_point(run_root):
    from trainmeter.optim.extension import OptimExtension
    from trainmeter.optim.smoothing import LossEma

    clock = FakeClock(0.0)
    optim = OptimExtension()
    m = make_monitor(make_options(run_dir=run_root, name="pub", interval_s=1.0), clock=clock, text=False,
                     probes=False, extensions=[optim]).start()
    pub = Publisher(m.context, Recorder(clock), clock=clock, budget_points=64)  # re-buckets many times
    m.add_reader()  # a reader that never advances: the monitor keeps every point for this test to read
    _train(m, clock, pub, seconds=6, steps_per_s=200, loss_at=lambda s: 2.0 + (0.5 if s % 3 else -0.7))
    m.finish("completed")
    pub.feed.read()
    raw_xs, raw_ys = m.series["train_loss"].read(0)[1], m.series["train_loss"].read(0)[3]
    every_step = dict(zip(raw_xs, LossEma().twin("train_loss", range(len(raw_ys)), raw_ys)[1], strict=True))
    xs, ys = pub.feed.decimators["train_loss.ema"].columns()
    assert len(every_step) > 1000 and 0 < len(xs) <= 200
    assert all(y == pytest.approx(every_step[int(x)]) for x, y in zip(xs, ys, strict=True))
    assert ys[-1] == every_step[raw_xs[-1]] and xs[-1] == raw_xs[-1]
    assert "val_loss.ema" not in pub.feed.decimators and "lr.ema" not in pub.feed.decimators



def test_the_output_ref_carries_the_running_cells_id_and_source(monkeypatch):
    """A notebook saved without cell ids gets new ids on reload: the front end finds the cell by its source."""
    import IPython

    from trainmeter.widget import attach

    class Kernel:
        def get_parent(self, channel="shell"):
            return {"metadata": {"cellId": "c-1"}, "content": {"code": "%%trainmeter\ntrain()"},
                    "header": {"msg_type": "execute_request"}}

    class Shell:
        kernel = Kernel()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    assert attach._request_text("metadata", "cellId") == "c-1"
    assert attach._request_text("content", "code") == "%%trainmeter\ntrain()"
    Kernel.get_parent = lambda self, channel="shell": {"content": {"code": "x" * (attach.MAX_SOURCE_CHARS + 1)}}
    assert attach._request_text("content", "code") is None  # a huge cell: found by its id alone


def test_a_stall_decays_the_rate_names_it_and_grows_the_eta(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=5.0, budget_steps=10_000)
    rec = Recorder(clock)
    pub = Publisher(m.context, rec, clock=clock)
    _train(m, clock, pub, seconds=20, steps_per_s=40)

    def shown():
        tiles = {t["id"]: t for t in rec.view["tiles"]}
        return tiles["throughput"], rec.view["progress"]["eta_s"]

    before, eta_before = shown()
    assert before["label"] == "session rate (last 10 s)"
    seen = []
    for _ in range(9):  # 9 s without a step: the publisher still ticks every second
        clock.advance(1.0)
        pub.tick()
        seen.append(shown())
    (rate, eta), eta1 = seen[-1], seen[0][1]
    assert rate["label"] == "session rate (no step for 9 s)"
    assert rate["value"] == pytest.approx(before["value"] * 10 / 19, rel=0.02)  # the window's tokens over 19 s
    assert [r["value"] for r, _ in seen] == sorted((r["value"] for r, _ in seen), reverse=True)
    assert eta > eta1 > eta_before  # the ETA grows while no step comes
    _train(m, clock, pub, seconds=1, steps_per_s=40)
    assert shown()[0]["label"].startswith("session rate (last ")  # a step came: the window ends at it again


def test_the_chart_draws_the_rate_tiles_window_and_training_only_never_below_session_with_eval_time(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=3.0)
    rec = Recorder(clock)
    pub = Publisher(m.context, rec, clock=clock)
    for _ in range(6):  # 4 s of steps, then 2 s of eval, then 1.5 s of checkpoint
        _train(m, clock, pub, seconds=4, steps_per_s=40)
        for phase, seconds in (("eval", 2.0), ("checkpoint", 1.5)):
            m.enter_phase(phase)
            clock.advance(seconds)
            pub.tick()
            m.exit_phase()
    _train(m, clock, pub, seconds=4, steps_per_s=40)
    chart = {c["id"]: c for c in rec.view["charts"]}["throughput"]
    assert chart["series"] == ["recent_tokens_per_s", "recent_train_tokens_per_s"]
    assert chart["labels"] == {"recent_tokens_per_s": "tokens/s, session (last 10 s, wall clock)",
                               "recent_train_tokens_per_s": "tokens/s, training-only (same last 10 s)"}
    session = dict(zip(*rec.store["recent_tokens_per_s"], strict=True))
    train = dict(zip(*rec.store["recent_train_tokens_per_s"], strict=True))
    assert len(train) > 20 and set(train) <= set(session)
    assert all(train[t] >= session[t] for t in train)
    assert any(train[t] > 1.3 * session[t] for t in train)  # eval and checkpoint time: the two differ
    tile = {t["id"]: t for t in rec.view["tiles"]}["throughput"]
    last_t = max(train)
    from trainmeter.sizes import format_rate

    assert tile["value"] == session[last_t]  # the tile is the chart's last point, over the same window
    assert tile["sub"] == f"training-only {format_rate(train[last_t], 'tok/s')} over the same last 10 s"
    assert "| train_tok/s=" in m.text_line  # the text line names its rate: training-only (the report window)


def test_a_stall_grows_the_eta_of_a_young_run_whose_pace_still_rises(run_root):
    # the browser's case (tests/browser/test_stall_browser.py): a slow first step, 4 s of steps, then 9 s of none; the
    # smoothed pace still trails the rising rate, so folding the decaying rate into it would shrink the ETA
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0, budget_steps=20_000)
    rec = Recorder(clock)
    pub = Publisher(m.context, rec, clock=clock)
    clock.advance(2.0)
    m.on_step(128, loss_value=1.0)
    pub.tick()
    _train(m, clock, pub, seconds=4, steps_per_s=150)
    etas = [rec.view["progress"]["eta_s"]]
    for _ in range(9):
        clock.advance(1.0)
        pub.tick()
        etas.append(rec.view["progress"]["eta_s"])
    assert etas == sorted(etas) and len(set(etas)) == len(etas), etas
