"""The ranks extension (``distributed``): one run across processes and nodes (docs/spec.md section 19).

A rank times its steps and writes them with its identity; a parent exports its run folder while it runs, follows
its children's seats for the panel and merges them into its passport; a forked child switches from parent to rank.
"""

from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING, Any

from trainmeter.core import host_patches
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.patches import Patches
from trainmeter.ranks import fork, seating
from trainmeter.ranks.stragglers import StepTiming
from trainmeter.sizes import format_percent

if TYPE_CHECKING:
    from trainmeter.compute.view import ComputeView
    from trainmeter.core.context import RunContext
    from trainmeter.gpu.view import GpuView

NAME_ENV = "TRAINMETER_RUN_NAME"
INTERVAL_ENV = "TRAINMETER_RUN_INTERVAL_S"
ROOT_ENV = "TRAINMETER_RUN_ROOT"
PANEL_POLL_S = 1.0


class RanksExtension(ExtensionBase):
    """Seats, rank timing, the parent's export and merge (see the module doc)."""

    name = "distributed"
    # compute: a rank's F and peak for the launch's MFU; gpu: a parent's own ladder section, built just before
    requires = ("compute", "gpu")

    def __init__(self) -> None:
        self._monitor: RunContext | None = None
        self.role = "parent"
        self._timing: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._follower: Any = None
        self._polled_s = 0.0
        self._panels: list[dict[str, Any]] = []
        self._section: dict[str, Any] | None = None
        self._backend: str | None = None
        self._patches = Patches()  # the spawn counter's
        self.spawned = 0  # children started with the spawn method while this run was the parent
        self._device: dict[str, Any] | None = None
        self._ranks: list[Any] = []
        self._forks_at_start = 0

    def start(self, monitor: RunContext) -> None:
        """Seated: time the steps. Otherwise export the run folder for children."""
        self._monitor = monitor
        if host_patches.allow("fork", monitor.warn_once):
            fork.install()
        self._forks_at_start = fork.forks_seen()  # the count is the process's: this run's forks are the difference
        if seating.current_seat() is not None or getattr(monitor.record_sink, "seated", None) is not None:
            self._become_rank(monitor)
            return
        if monitor.run_dir is None or not seating.mark_parent_folder(monitor.run_dir):
            return  # children are seated only in a folder this process marked (docs/spec.md section 19)
        values = {seating.RUN_DIR_ENV: str(monitor.run_dir), seating.PARENT_ENV: str(os.getpid()),
                  NAME_ENV: monitor.options.name, INTERVAL_ENV: repr(float(monitor.options.interval_s)),
                  ROOT_ENV: str(monitor.options.run_root)}
        self._saved_env = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:  # count spawn children (fresh interpreters: recorded only if they import trainmeter)
            from multiprocessing import popen_spawn_posix
        except ImportError:  # not POSIX
            return
        if not host_patches.allow("spawn-count", monitor.warn_once):
            return
        pid = os.getpid()

        def make(launch: Any) -> Any:
            @functools.wraps(launch)
            def _launch(popen: Any, process_obj: Any) -> Any:
                if os.getpid() == pid:
                    self.spawned += 1
                return launch(popen, process_obj)

            return _launch

        self._patches.wrap(popen_spawn_posix.Popen, "_launch", make)

    def _become_rank(self, monitor: RunContext) -> None:
        self.role = "rank"
        self._monitor = monitor
        seat = seating.current_seat()
        if seat is not None and seat.identity.rank not in (None, 0):
            monitor.set_text(False)  # one text line per launch (rank 0's); every rank's numbers are in its seat
        if not host_patches.allow("rank-timing", monitor.warn_once):
            return
        timing = StepTiming()
        try:
            timing.start()
            self._timing = timing
        except Exception as exc:
            timing.stop()
            monitor.warn_once("rank-timing", f"per-rank step timing disabled: {exc!r}")

    def _backend_now(self) -> str | None:
        """The ``torch.distributed`` backend, once seen initialised (it may be destroyed before the end)."""
        if self._backend is None and (state := seating.dist_state(None)) is not None:
            self._backend = state[2]
        return self._backend

    def after_fork_in_child(self, monitor: RunContext) -> None:
        """In a forked child: the inherited parent role becomes a rank role (the export stays for the seat)."""
        if self._timing is not None:
            self._timing.stop()
        self._saved_env, self._section, self._follower, self._panels, self._timing = {}, None, None, [], None
        self._become_rank(monitor)

    def stop(self) -> None:
        """Remove the timing hooks; restore the environment; a parent merges its seats (children ended)."""
        if self._timing is not None:
            self._timing.stop()
        self._patches.restore_all()
        if self.role == "parent" and self._monitor is not None and self._section is None:
            self._section = self._merge(self._monitor)
        saved, self._saved_env = self._saved_env, {}
        os.environ.update({key: value for key, value in saved.items() if value is not None})
        for key in (key for key, value in saved.items() if value is None):
            os.environ.pop(key, None)

    def on_report(self, report: Report) -> dict[str, Any] | None:
        """Rank: its identity, the window's step timing, compute's F and peak (the launch's MFU). Parent: nothing."""
        if self.role != "rank":
            return None
        seat, m = seating.current_seat(), self._monitor
        timing = {"timing": self._timing.take_window()} if self._timing is not None else {}
        fields = {"rank": seat.identity.rank if seat else None, "backend": self._backend_now(), **timing,
                  "device": self._device_now()}
        ext: ComputeView | None = m.extension("compute") if m is not None else None
        if ext is not None:
            from trainmeter.compute.flops import with_counted
            from trainmeter.compute.mfu import peak_input

            fpt = {conv: d.value for conv, d in with_counted(ext.flops_per_token, ext.counted).items()}
            peak = peak_input(ext.peak) if ext.peak is not None else None
            fields["compute"] = {"convention": m.options.convention, "flops_per_token": fpt,
                                 "peak_flops_per_s": getattr(peak, "value", None),
                                 "peak_text": getattr(peak, "source", ""),
                                 "peak_provenance": getattr(peak, "provenance", None), "peak_missing": ext.peak_missing}
        return fields

    def _device_now(self) -> dict[str, Any] | None:
        """This rank's GPU; looked up at each report until torch names it (then kept)."""
        if self._device is None or self._device.get("provenance") != "detected":
            self._device = seating.rank_device() or self._device
        return self._device

    def view(self) -> dict[str, Any] | None:
        """A parent's merged section once its children ended (headline of a parent that trained nothing); any thread."""
        return self._section if self.role == "parent" else None

    def passport_section(self) -> dict[str, Any] | None:
        """Rank: identity and timing. Parent: the merged section of its seats, or a note on unseen children."""
        if self.role == "rank":
            seat, timing = seating.current_seat(), self._timing
            where = {"identity": seat.identity.to_dict(), "launch_dir": os.path.relpath(seat.launch_dir, seat.dir)
                     } if seat is not None else {}  # launch_dir relative: no user name
            section = {"role": "rank", "backend": self._backend_now(), **where, "device": self._device_now(),
                       **({"timing": timing.summary()} if timing is not None else {})}
            m = self._monitor  # a rank started by its first optimizer step: why step 1's tokens are missing
            info = m.series_info.get("tokens_per_step") if m is not None else None
            if info is not None and "counted from step 2" in str(info.get("note") or ""):
                m.annotate_series("tokens_per_step", "first_step", (
                    "not counted: this rank's optimizer was built before trainmeter was armed in it (trainmeter "
                    "imported after it, without trainmeter-autostart.pth), so its record starts at its first optimizer "
                    "step, after that step's batches were seen"))
            seating.clear_seat()
            return section
        gpu: GpuView | None = self._monitor.extension("gpu") if self._monitor is not None else None
        own = gpu.section if gpu is not None else None  # a parent sampled its node: the ranks' ladders from it
        if self._section is not None and self._ranks and isinstance(own, dict):
            from trainmeter.ranks.launch_mfu import launch_ladders

            self._section["gpu_ladder"] = launch_ladders(self._ranks, {seating.this_node(): own})
        return self._section

    def _merge(self, m: Any) -> dict[str, Any] | None:
        """The parent's section: its seats merged, or a note on forked children it did not see."""
        if m.run_dir is None:
            return None
        ranks = []
        if seating.seats(m.run_dir):  # a run without seats (one process) never loads the merge
            from trainmeter.ranks.merge import distributed_section, read_launch

            ranks = read_launch(m.run_dir)
        self._ranks = ranks
        unseen = (f"{self.spawned} child process(es) were started with the spawn method and "
                  f"{len(ranks)} recorded as ranks: a spawned child is recorded when trainmeter's "
                  "trainmeter-autostart.pth is installed in its environment (pip install trainmeter) or it "
                  "imports trainmeter (import it in the module that defines its worker function); "
                  "TRAINMETER_AUTOSTART=0 turns this off") if self.spawned > len(ranks) else None
        if ranks:
            section = {"role": "launch", **distributed_section(ranks, launch_dir=m.run_dir,
                                                               convention=m.options.convention),
                       "children_spawned": self.spawned}
            mfu = {k: v for k, v in (section.get("mfu_session") or {}).items() if v is not None}
            tokens = section["global_tokens"]
            mfu_text = (", MFU over all " + f"{section['mfu_devices']} devices (wall clock) "
                        + ", ".join(f"{k} {format_percent(v)}" for k, v in mfu.items())) if mfu else ""
            m.note_warning(
                f"training ran in {len(ranks)} child process(es), recorded as ranks "
                f"({', '.join(r.seat for r in ranks)}): global steps {section['global_steps']}, "
                f"global {section['token_unit'] or 'samples/tokens'} {'—' if tokens is None else tokens}{mfu_text} "
                "(passport 'distributed')")
            if unseen:
                m.note_warning(unseen)
                section["notes"].append(unseen)
            return section
        forks = fork.forks_seen() - self._forks_at_start
        if (forks or self.spawned) and m.steps == 0:
            note = unseen or (f"{forks} process(es) were forked during the run and none recorded a step here; "
                              "work they did is not in this run")
            m.note_warning(note)
            return {"role": "parent", "children_forked": forks, "children_spawned": self.spawned, "note": note}
        return None

    def tiles(self) -> list[dict[str, Any]]:
        """Parent with ranks: the launch's MFU tile (devices = world size). Reads the last poll's state."""
        if self.role != "parent" or self._follower is None or not self._follower.ranks():
            return []
        from trainmeter.ranks.merge import launch_mfu_tile

        return [launch_mfu_tile(self._follower.ranks())]  # a tile: a rank reported

    def panels(self) -> list[dict[str, Any]]:
        """Parent: one row per rank (steps, status, seconds per step) and the straggler verdict. Throttled."""
        if self.role != "parent" or self._monitor is None or self._monitor.run_dir is None:
            return []
        now = time.monotonic()
        if now - self._polled_s < PANEL_POLL_S:
            return self._panels
        self._polled_s = now
        if self._follower is None:
            if not seating.seats(self._monitor.run_dir):
                return self._panels  # no seat folder, so no rank wrote a record (one process): nothing loaded or read
            from trainmeter.ranks.follow import RunFollower

            self._follower = RunFollower(self._monitor.run_dir)
        self._follower.poll()
        if self._follower.ranks():  # a rank wrote a record: only then is the merge module loaded
            from trainmeter.ranks.merge import ranks_panel

            self._panels = [ranks_panel(self._follower)]
        return self._panels
