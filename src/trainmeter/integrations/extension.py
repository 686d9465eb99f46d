"""The integration wing: each framework and logger read through its own API, one patch per class, no code change.

Extensions ``"taps"`` and ``"frameworks"``, made together by :func:`pair` (docs/spec.md section 11). Wrappers act on
the training thread of the training process only (a ``Gate``); :meth:`Integrations.view` from any thread.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainmeter.core import explicit_steps, host_patches
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.patches import Gate, Patches, PostImportHooks
from trainmeter.integrations.adapter import Adapter, Loggers, Site, record_logged, tapped
from trainmeter.integrations.frameworks import FRAMEWORKS
from trainmeter.integrations.hf import HfAdapter
from trainmeter.integrations.keras import KerasAdapter
from trainmeter.integrations.view import FrameworkControl, FrameworkResume, FrameworksView

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

ADAPTERS = (Loggers, HfAdapter, KerasAdapter, *FRAMEWORKS)
SUMMARY_KEYS = {"transformers": "train_runtime"}  # a log carrying this key is the run's end summary
STEPS_SOURCE = {"keras": "keras optimizer updates (BaseOptimizer.apply; else its callback's on_train_batch_end)",
                "fastai": "fastai callback (after_step)"}


class Taps(ExtensionBase):
    """The loggers' section of the wing (extension ``"taps"``): what logger calls and framework logs recorded
    (``enabled``: ``options.tap``). Counters written on the training thread, read from any."""

    name = "taps"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.on = False  # read for this run: enabled, and not switched off (TRAINMETER_DISABLE=taps)
        self.monitor: RunContext | None = None  # set by the wing's frameworks extension, which installs the taps
        self.disabled: set[str] = set()
        self.tapped: Counter[str] = Counter()  # library -> calls recorded
        self.points: Counter[str] = Counter()  # library -> scalars recorded
        self.patched: list[str] = []  # "module:owner.attr" patched for the taps during the run
        self.summaries: dict[str, dict[str, float]] = {}  # library -> run-level summary values

    def record(self, library: str, values: dict[str, Any]) -> None:
        """Record one logging call's scalars (or keep the run's end summary it carries). Training thread."""
        if library in self.disabled:  # a tap's call, or HF's log, on the gate's thread: the run started
            return
        try:
            if SUMMARY_KEYS.get(library) in values:  # the run's end summary
                self.summaries.setdefault(library, {}).update(
                    {k: float(v) for k, v in values.items() if isinstance(v, (int, float))})
            else:
                self.points[library] += record_logged(self.monitor, library, values, f"logged through {library} (tap)")
            self.tapped[library] += 1
        except Exception as exc:
            self.warn(library, f"{library} tap disabled: {exc!r}")

    def warn(self, library: str, message: str) -> None:
        """A fault of ``library``'s tap: said once, and that tap records nothing more."""
        self.disabled.add(library)
        self.monitor.warn_once(f"tap-{library}", message)

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["taps"]``: which call sites were patched and what they recorded."""
        return {"enabled": self.enabled, "patched": sorted(set(self.patched)), "calls": dict(self.tapped),
                "scalars": dict(self.points), "disabled": sorted(self.disabled),
                "summaries": {k: dict(v) for k, v in self.summaries.items()}}

    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["taps"]``: calls recorded so far per library."""
        return {"calls": dict(self.tapped)}

    def panels(self) -> list[dict[str, Any]]:
        """A "Logger taps" panel once a tap has recorded something (publisher thread)."""
        calls = dict(self.tapped)
        if not calls:
            return []
        rows = [{"label": library, "value": n, "unit": "count", "provenance": "counted",
                 "note": f"{self.points[library]} scalars"} for library, n in sorted(calls.items())]
        return [{"id": "taps", "title": "Series from your loggers", "rows": rows,
                 "note": "picked up from logger calls (calls per library); --no-tap turns this off"}]


class Integrations(ExtensionBase):
    """The adapters of one run (extension ``"frameworks"``); :attr:`taps` is its loggers' section."""

    name = "frameworks"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, tap: bool = True, *, adapters: tuple[type[Adapter], ...] = ADAPTERS) -> None:
        self.taps = Taps(tap)
        self.monitor: RunContext | None = None
        self.gate = Gate()  # depth: logger calls in progress
        self.patches = Patches()
        self.depth = 0  # fits in progress
        self.fits: Counter[str] = Counter()
        self.framework_steps: dict[str, int] = {}
        self.explicit_steps: Counter[str] = Counter()
        self.patched: list[str] = []
        self._adapters = tuple(cls(self) for cls in adapters)
        self._hooks: PostImportHooks | None = None
        self._allowed: dict[str, bool] = {}  # framework -> its fits are adapted (frameworks, framework-<name> on)
        self._control: Any = None
        self._framework: str | None = None
        self._resumed: FrameworkResume | None = None

    def start(self, monitor: RunContext) -> None:
        """Wrap the libraries already imported and watch for the others (one hook for every adapter)."""
        self.monitor = self.taps.monitor = monitor
        taps = self.taps
        taps.on = taps.enabled and host_patches.allow("taps", monitor.warn_once)
        fits = host_patches.allow("frameworks", monitor.warn_once)
        self._allowed = {a.framework: fits and host_patches.allow(f"framework-{a.framework}", monitor.warn_once)
                         for a in self._adapters if a.control is not None}
        by_module: dict[str, list[tuple[Adapter, Site]]] = {}
        for adapter in self._adapters:
            for site in adapter.sites:
                if taps.on if site.tap else (fits or (site.logs and taps.on)):
                    by_module.setdefault(site.module, []).append((adapter, site))
        if not by_module:
            return
        self.gate.open()
        self._hooks = PostImportHooks({name: functools.partial(self._patch_module, entries)
                                       for name, entries in by_module.items()})
        self._hooks.install()

    def stop(self) -> None:
        """Remove the hook and every wrapper (the callbacks leave with their fit). Idempotent."""
        self.gate.close()
        if self._hooks is not None:
            self._hooks.remove()  # idempotent
        self.patches.restore_all()
        self._publish(None)

    def view(self) -> FrameworksView:
        """The control of the framework in its fit now, and the last fit's framework (any thread)."""
        return FrameworksView(control=self._control, framework=self._framework, resumed=self._resumed)

    def _patch_module(self, entries: list[tuple[Adapter, Site]], module: ModuleType) -> None:
        if not self.gate.active:
            return
        for adapter, site in entries:
            owner: Any = getattr(module, site.owner, None) if site.owner else module
            if site.owner and not isinstance(owner, type):
                continue
            fits = not site.tap and self._allowed.get(adapter.framework, False)
            taps = self.taps.on and bool(site.tap or site.logs)
            where = [f"{site.module}:{site.owner + '.' if site.owner else ''}{site.attr}"]
            make = functools.partial(tapped, self, site) if site.tap else functools.partial(adapter.wrap, site)
            try:
                if (fits or taps) and self.patches.wrap(owner, site.attr, make):
                    self.patched += where if fits else []
                    self.taps.patched += where if taps else []
                    adapter.after_wrap(site, owner)
            except Exception as exc:
                (self.taps.warn(site.tap, f"tap on {site.module}.{site.attr} not installed: {exc!r}") if site.tap
                 else self.warn(adapter.framework, f"{adapter.framework} adapter not installed: {exc!r}"))

    def begin(self, adapter: Adapter, target: Any) -> None:
        """A fit of ``adapter``'s framework begins: its control is published (training thread)."""
        framework = adapter.framework
        if adapter.control is None or not self._allowed.get(framework):
            return  # wrapped for the taps alone
        self._framework = framework
        self.fits[framework] += 1
        self._publish(FrameworkControl(target, framework, **adapter.control))

    def end(self, adapter: Adapter, target: Any, extra: Any) -> None:
        """The fit ended: its callback leaves, the framework's own step count is kept (training thread)."""
        framework = adapter.framework
        with self.guard(framework, "adapter fault at the fit's end"):
            adapter.end(target, extra)
            steps = adapter.own_steps(target) if self._allowed.get(framework) else None
            if steps is not None:
                self.framework_steps[framework] = steps
                self.compare_steps(framework, steps)
        self._publish(None)

    def _publish(self, control: Any) -> None:
        self._control = control
        if self.monitor is not None:
            self.monitor.controls.use_framework(control)

    def compare_steps(self, framework: str, steps: int) -> None:
        """The framework's own count is the truth: a count of ours that differs after its one fit is said (a resumed
        fit's count may start at the step it resumed from)."""
        monitor, resumed = self.monitor, self._resumed
        start = resumed.step if resumed is not None and resumed.framework == framework and resumed.step else 0
        if monitor is None or sum(self.fits.values()) != 1 or monitor.steps in (0, steps, steps - start):
            return
        monitor.warn_once(f"framework-steps-{framework}",
                          f"{framework} counted {steps} optimizer steps, trainmeter {monitor.steps}: the step "
                          "series and rates follow trainmeter's count (passport frameworks.framework_steps)")

    def framework_step(self, framework: str, model: Any, samples: int | None = None) -> None:
        """One optimizer step the framework made, invisible to torch's hooks (training thread)."""
        if self.gate.here():  # open: the run started
            self.explicit_steps[framework] += 1
            self.monitor.explicit_step(framework, model, samples)

    def framework_batch(self, framework: str, source: str, batch: Any) -> None:
        """The framework's own batch for the step in progress, counted by the batch rule in the model's calls' stead
        (``None``: that batch is over; docs/spec.md section 2, "The batch rule"). Training thread."""
        probes = self.monitor.probes if self.gate.here() else None
        if probes is not None:
            with self.guard(framework, "batches not read"):
                probes.framework_batch(batch, f"{framework} {source}")

    def framework_logs(self, framework: str, logs: Any) -> None:
        """An epoch's logged numbers (Keras' ``logs``, fastai's Recorder row; not ``epoch``, ``time``) as series."""
        if not self.gate.here() or not hasattr(logs, "items"):
            return
        with self.guard(framework, "logs not recorded"):
            values = {str(k): float(v) for k, v in logs.items()
                      if k not in ("epoch", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}
            record_logged(self.monitor, framework, values, f"logged by {framework} at each epoch's end", measured=False)

    def resumed(self, framework: str, step: Any, path: Any, provenance: str, source: str) -> None:
        """The framework resumed its own training (its ``step``, the ``path`` it loaded): published for the lineage
        wing (docs/spec.md section 22); without ``--resume`` the run says it counts its own steps. Training thread."""
        monitor = self.monitor
        if not self.gate.here():
            return
        with self.guard(framework, "resume not read"):
            self._resumed = FrameworkResume(framework, None if step is None else int(step),
                                            None if path is None else str(path), provenance, source)
            if monitor.extension("lineage") is None and step:
                monitor.warn_once(f"framework-resume-{framework}", f"{framework} resumed its training at its step "
                                  f"{step}: this run counts its own steps; --resume (tm.monitor(resume=...)) names "
                                  "the run it continues, to count the training's (docs/spec.md section 22)")

    def stop_requested(self, framework: str) -> bool:
        """Whether the control was asked to stop (the callback ends the fit its framework's way)."""
        held = self._control
        return held is not None and held.name == framework and bool(getattr(held, "stop_requested", False))

    def warn(self, framework: str, message: str) -> None:
        """A fault of ``framework``'s adapter, said once (wrappers act only once the run started)."""
        self.monitor.warn_once(f"framework-{framework}", message)

    @contextlib.contextmanager
    def guard(self, framework: str, what: str) -> Iterator[None]:
        """A fault inside goes no further: said once as ``<framework> <what>: <fault>``."""
        try:
            yield
        except Exception as exc:
            self.warn(framework, f"{framework} {what}: {exc!r}")

    def on_report(self, report: Report) -> dict[str, Any] | None:
        """The one warning for backward calls with no step trainmeter knows (at the first report that sees it)."""
        monitor = self.monitor
        if monitor is not None and report.steps == 0 and explicit_steps.backward_seen(monitor):
            monitor.warn_once("steps-unseen", explicit_steps.unseen_message(report))  # the report's token unit
        return None

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["frameworks"]``: fits seen, where steps came from, the framework's own step count."""
        return {"fits": dict(self.fits), "framework": self._framework,
                "steps_source": STEPS_SOURCE.get(self._framework or "", "torch.optim step hook"),
                "framework_steps": dict(self.framework_steps), "explicit_steps": dict(self.explicit_steps),
                "patched": sorted(set(self.patched))}


def pair(tap: bool = True) -> tuple[Taps, Integrations]:
    """The wing's two extensions, ``taps`` then ``frameworks`` (``tap``: ``options.tap``)."""
    wing = Integrations(tap)
    return wing.taps, wing
