"""The one place the core calls its extensions: each event over them in order, with one error policy.

An event that raises warns once and is not called again (docs/contracts/EXTENSIONS.md); KeyboardInterrupt goes on.
A wing whose event holds the training thread past ``HOOK_BOUND_S``, or that the run's end gave up on, is disabled
(docs/spec.md section 20, "The end's bound").
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

from trainmeter.core.extension import ExtensionBase, Report, RequirementError, order_extensions
from trainmeter.core.faults import quietly
from trainmeter.core.report_worker import REPORT_JOB

# warning keys as the run has always named them (tests and passports read them)
_KEY = {"on_report": "fields", "text_fields": "text", "passport_section": "passport", "after_fork_in_child": "fork"}
# the longest one event of a wing may hold the training thread while the run is live (a counted pass on the training
# thread takes seconds on a large model: docs/spec.md section 5)
HOOK_BOUND_S = 30.0
_EVENTS = ("on_step", *(n for n, f in vars(ExtensionBase).items() if callable(f) and not n.startswith("_")))


class Abandoned(BaseException):
    """Raised in a thread the run's end gave up on when its wing's call returns: it does nothing more."""


def _defines(ext: Any, event: str) -> bool:
    """Whether ``ext`` has ``event`` of its own (not the no-op of :class:`ExtensionBase`)."""
    return getattr(type(ext), event, None) is not getattr(ExtensionBase, event, None) or event in vars(ext)


class Dispatcher:
    """The run's extensions in their order, and the events sent to them. The widget's read-only events and ``view``:
    any thread; the rest: training thread."""

    def __init__(self, extensions: Iterable[Any] = (), warn_once: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        given = list(extensions)
        self.order_error: str | None = None
        try:
            ordered = order_extensions(given)
        except RequirementError as exc:  # at run time: degrade to the given order, said once at start
            ordered, self.order_error = given, f"{exc}: the extensions run in the order given"
        self.extensions: tuple[Any, ...] = tuple(ordered)
        self._warn = warn_once
        self._off: set[tuple[int, str]] = set()  # (id(extension), event) disabled by a fault
        self._started: list[Any] = []
        self._monitor: Any = None
        self._steppers: tuple[Any, ...] = ()
        self._next_step: dict[int, int] = {}
        self._watching: list[Any] = []
        self._phase_watchers = tuple(e for e in self.extensions if _defines(e, "on_phase"))  # most runs: one
        self._reporters: tuple[Any, ...] | None = None
        self._clock = clock  # times each event (None: untimed)
        self._calls: dict[int, tuple[str, str]] = {}  # thread ident -> (wing, event) under way
        self._abandoned: threading.Thread | None = None  # the thread the run's end gave up on

    # -- the policy ----------------------------------------------------------------------
    def _fault(self, ext: Any, event: str, exc: BaseException) -> None:
        key = f"{_KEY.get(event, event)}-{getattr(ext, 'name', ext)}"
        self._off.add((id(ext), event))
        quietly(self._warn, key, f"{key} failed and was disabled: {exc!r}")

    def _handler(self, ext: Any, event: str) -> Callable[..., Any] | None:
        return None if (id(ext), event) in self._off else getattr(ext, event, None)

    def _call(self, ext: Any, event: str, *args: Any) -> Any:
        fn = self._handler(ext, event)
        if fn is None:
            return None
        clock, ident, calls = self._clock, threading.get_ident(), self._calls
        outer = calls.get(ident)
        calls[ident] = (getattr(ext, "name", "?"), event)
        t0_s = clock() if clock is not None else 0.0
        try:
            return fn(*args)
        except Exception as exc:
            self._fault(ext, event, exc)
            return None
        finally:
            if outer is None:
                calls.pop(ident, None)
            else:
                calls[ident] = outer
            if self._abandoned is not None and threading.current_thread() is self._abandoned:
                raise Abandoned  # the run ended without this call: nothing of it is kept (its thread ends)
            if clock is not None and clock() - t0_s > HOOK_BOUND_S:
                self._held(ext, event, clock() - t0_s)

    def _held(self, ext: Any, event: str, held_s: float) -> None:
        """``ext``'s ``event`` held its thread ``held_s``: a thread not of ours, in a live run, disables the wing."""
        monitor = self._monitor
        if threading.current_thread().name.startswith("trainmeter-") or getattr(
                getattr(monitor, "lifecycle", None), "finished", True):
            return
        name = getattr(ext, "name", ext)
        self.disable(name, but=("stop",))  # its threads are still stopped at the end
        quietly(self._warn, f"held-{name}", f"extension {name!r} held the training thread {held_s:.1f} s in {event} "
                f"(bound {HOOK_BOUND_S:g} s) and was disabled")

    def calling(self, thread: threading.Thread | None) -> tuple[str, str] | None:
        """``(wing, event)`` of the call under way in ``thread``, else ``None``. Any thread."""
        return self._calls.get(thread.ident) if thread is not None and thread.ident is not None else None

    def give_up(self, name: str, thread: threading.Thread | None) -> None:
        """Call ``name`` no more; its call under way in ``thread`` raises :class:`Abandoned` as it returns."""
        self._abandoned = thread
        self.disable(name)

    def disable(self, name: str, but: Collection[str] = ()) -> None:
        """Call the extension ``name`` no more, but for the events ``but``."""
        for ext in self.extensions:
            if getattr(ext, "name", None) == name:
                self._off.update((id(ext), e) for e in _EVENTS if e not in but)
                self.unwatch_training(ext)
                self._arm_steps()

    def each(self, event: str, *args: Any) -> list[tuple[Any, Any]]:
        """``(extension, result)`` of ``event(*args)`` for every extension that has it, in order."""
        return [(ext, self._call(ext, event, *args)) for ext in self.extensions
                if self._handler(ext, event) is not None]

    def collect(self, event: str) -> list[Any]:
        """The items of every extension's list-valued ``event`` (``warnings``, ``tiles``, ...), in order."""
        return [x for _, got in self.each(event) for x in (got or []) if x is not None]

    # -- lookups ---------------------------------------------------------------------------
    def find(self, name: str) -> Any:
        """The extension called ``name``, or ``None`` (for the wiring and tests; wings use :meth:`view`)."""
        return next((e for e in self.extensions if getattr(e, "name", None) == name), None)

    def view(self, name: str) -> Any:
        """The view the extension ``name`` publishes now, or ``None`` (absent, no view, or its fault)."""
        ext = self.find(name)
        return self._call(ext, "view") if ext is not None else None

    def drop(self, names: Collection[str]) -> None:
        """Leave the extensions called ``names`` out from now on (a forked child's sampler wings)."""
        self.extensions = tuple(e for e in self.extensions if getattr(e, "name", None) not in names)
        self._started = [e for e in self._started if e in self.extensions]
        self._watching = [e for e in self._watching if e in self.extensions]
        self._phase_watchers = tuple(e for e in self._phase_watchers if e in self.extensions)
        self._reporters = None
        self._arm_steps()

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, monitor: Any) -> None:
        """``start(monitor.context)`` on each extension in order; then the step schedule is armed."""
        self._monitor = monitor
        if self.order_error:
            quietly(self._warn, "extension-order", self.order_error)
        for ext in self.extensions:
            self._started.append(ext)
            self._call(ext, "start", monitor.context)
        self._arm_steps()

    def stop_parts(self) -> list[tuple[str, Callable[[], None]]]:
        """``(key, stop)`` of each started extension, in order, for the monitor's part runner (each guarded)."""
        return [(f"stop-{getattr(ext, 'name', ext)}", lambda ext=ext: self._stop(ext)) for ext in self._started]

    def _stop(self, ext: Any) -> None:
        self._call(ext, "stop")
        if ext in self._steppers or ext in self._watching:
            self._off.add((id(ext), "on_step"))
            self.unwatch_training(ext)
            self._arm_steps()

    def report(self, report: Report, on_worker: bool | None = None, before: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        """Each extension's ``on_report`` fields by its name (``None`` after a fault; the base's no-op: no entry):
        ``on_worker`` ``None``: every extension's; ``False``: those without ``report_on_worker``; ``True``: the
        others', with ``before`` (the fields taken for the other part) in their place in the extension order."""
        out: dict[str, Any] = {}
        if self._reporters is None:  # the wings with an on_report of their own, found once
            self._reporters = tuple(e for e in self.extensions if _defines(e, "on_report"))
        for ext in self._reporters:
            if on_worker is None or bool(getattr(ext, "report_on_worker", False)) is on_worker:
                if (id(ext), "on_report") not in self._off:
                    out[ext.name] = self._call(ext, "on_report", report)
            elif before is not None and ext.name in before:
                out[ext.name] = before[ext.name]
        return out

    def text_fields(self) -> list[dict[str, Any]]:
        """Each extension's text-line fields, in order."""
        return [dict(got) for _, got in self.each("text_fields") if got]

    def passport(self, passport: dict[str, Any]) -> None:
        """Add each extension's section (under its name) and derivations to ``passport``."""
        for ext in self.extensions:
            section = self._call(ext, "passport_section")
            if section is not None:
                passport[ext.name] = section
            more = self._call(ext, "derivations")
            passport.setdefault("derivations", []).extend(d.to_dict() for d in (more or []))

    def after_fork_in_child(self, monitor: Any, torn: str | None = None) -> None:
        """``after_fork_in_child(monitor.context)`` on each extension; a wing the worker job ``torn`` at the fork may
        have left half-updated is left out unless it defines it (docs/spec.md section 19)."""
        self._monitor = monitor
        left = sorted(getattr(e, "name", "?") for e in self.extensions if torn is not None
                      and not _defines(e, "after_fork_in_child")
                      and (getattr(e, "report_on_worker", False) if torn == REPORT_JOB
                           else getattr(e, "name", None) == torn))
        if left:
            self.drop(left)
            quietly(self._warn, "fork-torn", f"{', '.join(left)}: off in this forked child (its report work was under "
                    "way on the report worker at the fork)")
        self.each("after_fork_in_child", monitor.context)
        self._arm_steps()

    # -- phases ------------------------------------------------------------------------
    def phase(self, name: str, edge: str, t_s: float) -> None:
        """``on_phase(name, edge, t_s)`` on each extension that watches phases (training thread)."""
        for ext in self._phase_watchers:
            self._call(ext, "on_phase", name, edge, t_s)

    def watch_training(self, ext: Any) -> None:
        """Send ``ext`` ``on_phase("train", "begin", t_s)`` at the training activity the probes see."""
        if ext not in self._watching:
            self._watching.append(ext)
        self._set_probe_slot()

    def unwatch_training(self, ext: Any) -> None:
        """Stop sending ``ext`` training activity."""
        if ext in self._watching:
            self._watching.remove(ext)
            self._set_probe_slot()

    def _set_probe_slot(self) -> None:
        probes = getattr(self._monitor, "probes", None)
        if probes is not None:
            probes.on_training = self._training_seen if self._watching else None

    def _training_seen(self) -> None:
        monitor = self._monitor
        t_s = monitor.elapsed_s() if monitor is not None else 0.0
        for ext in list(self._watching):
            self._call(ext, "on_phase", "train", "begin", t_s)

    # -- steps (the hot path) --------------------------------------------------------------
    def _arm_steps(self) -> None:
        """Hand the monitor one extension's own ``on_step`` (no frame of ours), the fan-out over several, or none."""
        self._steppers = tuple(e for e in self._started if callable(self._handler(e, "on_step")))
        monitor = self._monitor
        if monitor is None:
            return
        if len(self._steppers) == 1:
            monitor.set_step_hook(self._steppers[0].on_step, at=self._next_step.get(id(self._steppers[0]), 0))
        elif self._steppers:
            monitor.set_step_hook(self._on_step_many, many=True, at=self._first_step())
        else:
            monitor.set_step_hook(None)

    def _first_step(self) -> int:
        return min((self._next_step.get(id(e), 0) for e in self._steppers), default=sys.maxsize)

    def schedule(self, ext: Any, step: int) -> int:
        """``ext``'s ``on_step`` runs next at step ``>= step``; the first step any wants (``sys.maxsize``: none)."""
        if ext is not None:
            self._next_step[id(ext)] = step
        return self._first_step()

    def _on_step_many(self) -> None:
        steps = self._monitor.steps
        for ext in self._steppers:
            if steps >= self._next_step.get(id(ext), 0) and (id(ext), "on_step") not in self._off:
                try:  # untimed: the hot path (docs/spec.md section 20)
                    ext.on_step()
                except Exception as exc:
                    self._fault(ext, "on_step", exc)
        self._monitor.next_step_hook_at(self._first_step())  # many: the monitor asks schedule() again

    def step_fault(self, exc: BaseException) -> None:
        """The single ``on_step`` the monitor called raised: warn once, disable it (training thread)."""
        if self._steppers:
            self._fault(self._steppers[0], "on_step", exc)
            self._arm_steps()
