"""Where the time goes: data waits, inference and checkpoint spans, found with no code change (docs/spec.md section 9).

Eval is what says it is eval (a framework's evaluation, ``tm.phase("eval")``); the watched model switched to eval mode
with no span open is ``inference`` (no grad), a span any other one replaces and that closes at the next
``on_phase("train", "begin", t_s)`` (``context.watch_training``: no per-step hook).
"""

from __future__ import annotations

import functools
import os
import weakref
from typing import TYPE_CHECKING, Any

from trainmeter.core import host_patches
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.lifecycle import probes_available
from trainmeter.core.patches import Gate, Patches, PostImportHooks
from trainmeter.core.provenance import Derivation, Input
from trainmeter.core.throughput import ratio
from trainmeter.sizes import format_seconds
from trainmeter.timesplit import savers

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

STARVING_SHARE = 0.20
STARVING_MIN_BATCHES = 20
GOODPUT_SERIES = "time.goodput"
DATA_WAIT_SERIES = "time.data_wait_share"
INFERENCE = "inference"  # core/phases.py WEAK_PHASES: a later span replaces it
LABELS = {INFERENCE: "inference (no grad)"}


class TimeSplit(ExtensionBase):
    """Data-wait, inference and checkpoint probes of one run (extension ``"time"``). Thread safety: wrappers act on the
    training thread of the training process only; ``panels``/``charts``/``warnings`` only read, from any thread."""

    name = "time"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self) -> None:
        self.monitor: RunContext | None = None
        self.gate = Gate()
        self._patches = Patches()
        self._hooks: PostImportHooks | None = None
        self._in_next = False
        self.inference_open = False  # this split's own span: the watched model in eval mode
        self.open_phase: str | None = None  # the outermost span open now (its on_phase edges)
        self._quiet = False  # a span paused for a save and resumed: its edges are no new span
        self._train_depth = 0
        self._ancestors: dict[int, tuple[weakref.ReferenceType[Any], int, bool]] = {}
        self.batches = 0
        self.loader_wait_s = 0.0
        self.max_wait_s: float | None = None
        self.eval_spans = 0
        self.inference_spans = 0
        self.checkpoints = savers.CheckpointSpans(self)  # the savers' spans and records
        self.patched: list[str] = []
        self._window: tuple[int, dict[str, float], float] = (0, {}, 0.0)  # the last report's batches, phases, time
        self._last_panel: list[dict[str, Any]] = []

    def start(self, monitor: RunContext) -> None:
        """Install the wrappers (torch must be importable; else nothing is done)."""
        self.monitor = monitor
        if not probes_available():
            return
        import torch
        from torch.utils.data import dataloader

        if not host_patches.allow("time-split", monitor.warn_once):
            return
        self.gate.open()
        self.wrap(dataloader._BaseDataLoaderIter, "__next__", self._make_next, "DataLoader iterator __next__")
        self.wrap(torch.nn.Module, "train", self._make_train, "torch.nn.Module.train")
        save = functools.partial(self.checkpoints.make_saver, savers.TORCH_SAVE)
        self.wrap(torch.serialization, "save", save, "torch.serialization.save")
        wrapped = vars(torch.serialization).get("save")
        if getattr(wrapped, "__trainmeter_original__", None) is getattr(torch, "save", None):
            self._patches.set(torch, "save", wrapped)
            self.patched.append("torch.save")
        if host_patches.allow("checkpoint-rename", monitor.warn_once):  # a temp file, then a rename (docs/spec.md section 9)
            self._patches.wrap(os, "replace", self.checkpoints.make_renamer)
            self._patches.wrap(os, "rename", self.checkpoints.make_renamer)
            self.patched += ["os.replace", "os.rename"]
        by_module = {site.module: [s for s in savers.SITES if s.module == site.module] for site in savers.SITES}
        self._hooks = PostImportHooks({name: functools.partial(self.checkpoints.patch, sites)
                                       for name, sites in by_module.items()})
        self._hooks.install()

    def stop(self) -> None:
        """Close an open inference span, remove every wrapper, hook and patch. Idempotent."""
        self._close_inference()
        self.gate.close()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self._patches.restore_all()

    def wrap(self, owner: Any, attr: str, make: Any, label: str) -> None:
        """Wrap ``owner.attr`` with ``make(original)``, listed as ``label`` (a fault: warned, left unwrapped)."""
        try:
            if self._patches.wrap(owner, attr, make):
                self.patched.append(label)
        except Exception as exc:
            self.monitor.warn_once(f"time-{attr}", f"{label} not timed: {exc!r}")

    def _make_next(self, original: Any) -> Any:
        split = self

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            if split._in_next or not split.gate.here():
                return original(iterator)
            split._in_next, clock = True, split.monitor.clock
            t0, ok = clock(), False
            try:
                batch = original(iterator)
                ok = True
                return batch
            finally:
                split._in_next = False
                split._on_wait(clock() - t0, ok)

        return __next__

    def _on_wait(self, seconds: float, counted: bool) -> None:
        try:
            if not self.monitor.phases.training:
                return  # inside an eval/checkpoint span, or before/after the session: not a training wait
            self.monitor.carve("data_wait", seconds)
            self.loader_wait_s += seconds
            if counted:
                self.batches += 1
                self.max_wait_s = seconds if self.max_wait_s is None else max(self.max_wait_s, seconds)
        except Exception as exc:
            self.monitor.warn_once("time-data-wait", f"data-wait timing disabled: {exc!r}")
            self.gate.close()

    def _make_train(self, original: Any) -> Any:
        split = self

        # torch's own parameters (``train(self, mode=True)``), passed on positionally: ``model.train()`` recurses
        # into every submodule's ``train``, and each of those calls costs one frame here, no tuple or dict
        @functools.wraps(original)
        def train(module: Any, mode: bool = True) -> Any:
            if split._train_depth or not split.gate.here():  # children of a .train()/.eval() call
                return original(module, mode)
            split._train_depth += 1
            try:
                result = original(module, mode)
            finally:
                split._train_depth -= 1
            split._on_train(module, bool(mode))
            return result

        return train

    def _is_root(self, module: Any) -> bool:
        ref: weakref.ReferenceType[Any] | None = self.monitor.model_ref
        root = ref() if ref is not None else None
        if root is None:
            probes = self.monitor.probes
            return probes is not None and probes.is_candidate(module)
        return module is root or self._related(module, root)

    def _related(self, module: Any, root: Any) -> bool:
        """Whether ``module`` holds ``root`` (Lightning's ``trainer.model``), or sits inside it with most of its
        parameters (DDP's ``.module``, a compiled ``._orig_mod``, the model inside a loss module): cached per module,
        so a per-step ``.train()`` (a frozen batch norm's ``.eval()``) stays cheap."""
        key = id(module)
        cached = self._ancestors.get(key)
        if cached is not None and cached[0]() is module and cached[1] == id(root):
            return cached[2]
        found = any(m is root for m in module.modules()) or (
            any(m is module for m in root.modules()) and 2 * _numel(module) >= _numel(root) > 0)
        if len(self._ancestors) > 256:
            self._ancestors.clear()
        self._ancestors[key] = (weakref.ref(module), id(root), found)
        return found

    def _on_train(self, module: Any, mode: bool) -> None:
        try:
            if not mode and not self.inference_open and self.open_phase is None:  # no span says what this is
                if self._is_root(module) and self.enter_span(INFERENCE):
                    self.inference_open = True
                    self.inference_spans += 1
                    self.monitor.watch_training(self)
            elif mode and self.inference_open and self._is_root(module):
                self._close_inference()
        except Exception as exc:
            self.monitor.warn_once("time-inference", f"inference spans disabled: {exc!r}")

    def on_phase(self, name: str, edge: str, t_s: float) -> None:
        """Each outermost span's edges (an eval span counted); training activity ends the inference span, and so
        does another span replacing it."""
        if name == "train":
            if edge == "begin" and self.inference_open and self.gate.here():
                self._close_inference()
            return
        self.open_phase = name if edge == "begin" else None
        if self._quiet:
            return
        if edge == "begin" and name == "eval":
            self.eval_spans += 1
        elif edge == "end" and name == INFERENCE:  # replaced by an eval or other span: already closed
            self._close_inference(exit_span=False)

    def _close_inference(self, exit_span: bool = True) -> None:
        if self.inference_open:
            self.inference_open = False
            self.monitor.unwatch_training(self)
            if exit_span and not self.checkpoints.depth:  # during a save inside the span, it is already paused
                self.exit_span()

    def pause_span(self) -> str | None:
        """Close the outermost span open now (not a checkpoint) for a save; its name for :meth:`resume_span`."""
        name = self.open_phase
        if name is None or name == "checkpoint":
            return None
        self._quietly(self.exit_span)
        return name

    def resume_span(self, name: str | None) -> None:
        """Reopen the span :meth:`pause_span` closed (the inference span only while it is still open)."""
        if name is not None and (name != INFERENCE or self.inference_open):
            self._quietly(functools.partial(self.enter_span, name))

    def _quietly(self, edge: Any) -> None:
        """``edge()``, a span's edge that is no new span (a span paused for a save and resumed)."""
        self._quiet = True
        try:
            edge()
        finally:
            self._quiet = False

    def enter_span(self, phase: str) -> bool:
        """Open a ``phase`` span; whether it opened (a fault: warned)."""
        try:
            self.monitor.enter_phase(phase)
            return True
        except Exception as exc:
            self.monitor.warn_once(f"time-{phase}", f"{phase} spans disabled: {exc!r}")
            return False

    def exit_span(self) -> None:
        """Close the span :meth:`enter_span` opened (a fault: warned)."""
        try:
            self.monitor.exit_phase()
        except Exception as exc:
            self.monitor.warn_once("time-exit", f"phase timing fault: {exc!r}")

    def data_wait_share(self, totals_s: dict[str, float]) -> float | None:
        """``data_wait_s / (train_s + data_wait_s)``: the share of step time spent waiting for data."""
        wait_s = totals_s.get("data_wait", 0.0)
        return ratio(wait_s, totals_s.get("train", 0.0) + wait_s)

    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["time"]``: this window's waits; records the per-window share series."""
        monitor = self.monitor
        if monitor is None:
            return {}
        totals = dict(report.phases_s)  # the report's own (read later on the report worker, the live ones moved on)
        elapsed_s, batches = report.elapsed_s, self.batches
        last_batches, last_totals, last_s = self._window
        window = {k: v - last_totals.get(k, 0.0) for k, v in totals.items()}
        share = self.data_wait_share(window)
        goodput = ratio(window.get("train", 0.0), elapsed_s - last_s)
        self._window = (batches, totals, elapsed_s)
        if goodput is not None:
            monitor.record_at(GOODPUT_SERIES, elapsed_s, min(1.0, goodput))
        if share is not None:
            monitor.record_at(DATA_WAIT_SERIES, elapsed_s, share)
        return {"data_wait_s": window.get("data_wait", 0.0), "data_wait_share": share, "batches": batches - last_batches,
                "goodput": goodput, "eval_spans": self.eval_spans, "inference_spans": self.inference_spans,
                "checkpoint_saves": self.checkpoints.saves}

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["time"]``: data-wait statistics and the probes' counts."""
        monitor = self.monitor
        totals = dict(monitor.phases.totals_s) if monitor is not None else {}
        share = self.data_wait_share(totals)
        inputs = (Input(name="data_wait_s", value=totals.get("data_wait", 0.0), unit="s", provenance="measured",
                        source="phase clock: data_wait (DataLoader __next__ and tm.phase('data_wait'))"),
                  Input(name="train_s", value=totals.get("train", 0.0), unit="s", provenance="measured",
                        source="phase clock: train"))
        derivation = Derivation(name="data_wait_share", formula="data_wait_s / (train_s + data_wait_s)",
                                value=share, unit="1", inputs=inputs)
        return {
            "data_wait_s": totals.get("data_wait", 0.0),
            "data_wait_share": share,
            "batches": self.batches,
            "loader_wait_s": self.loader_wait_s,
            "mean_wait_s": ratio(self.loader_wait_s, self.batches),
            "max_wait_s": self.max_wait_s,
            "eval_spans": self.eval_spans,
            "inference_spans": self.inference_spans,
            "checkpoint_saves": self.checkpoints.saves,
            "checkpoints": list(self.checkpoints.records),
            "patched": sorted(set(self.patched)),
            "derivations": [derivation.to_dict()],
        }

    def panels(self) -> list[dict[str, Any]]:
        """The "Where the time goes" panel: each phase's share of session time (publisher thread)."""
        monitor = self.monitor
        if monitor is None:
            return []
        try:
            totals = monitor.phases.totals_now()
            session_s = monitor.elapsed_s()
        except Exception:  # a phase added while we read: show the last panel
            return self._last_panel
        rows = [{"label": LABELS.get(phase, phase), "value": ratio(seconds, session_s), "unit": "fraction",
                 "provenance": "measured", "note": format_seconds(seconds)}  # as passport.md's "Time:" line
                for phase, seconds in totals.items() if seconds > 0 or phase in ("train", "data_wait")]
        share, mean_s = self.data_wait_share(totals), ratio(self.loader_wait_s, self.batches)
        mean = "-" if mean_s is None else f"{mean_s * 1000:.1f} ms"
        rows.append({"label": "data wait / step time", "value": share, "unit": "fraction", "provenance": "measured",
                     "note": f"{self.batches} batches, mean {mean}"})
        self._last_panel = [{"id": "time", "title": "Where the time goes", "rows": rows,
                             "note": "shares of session time; train share = goodput"}]
        return self._last_panel

    def charts(self) -> list[dict[str, Any]]:
        """Goodput and data-wait share per report window."""
        return [{"id": "time_shares", "title": "Where the time goes, per report", "x": "time", "unit": "fraction",
                 "series": [GOODPUT_SERIES, DATA_WAIT_SERIES]}]

    def warnings(self) -> list[str]:
        """A starving loader: data waits above 20% of step time (after 20 batches)."""
        monitor = self.monitor
        if monitor is None or self.batches < STARVING_MIN_BATCHES:
            return []
        try:
            share = self.data_wait_share(monitor.phases.totals_now())
        except Exception:
            return []
        if share is None or share <= STARVING_SHARE:
            return []
        return [f"data waits are {share * 100:.0f}% of step time: the loader is starving the GPU"]


def _numel(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())
