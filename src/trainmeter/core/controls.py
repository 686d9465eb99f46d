"""Requests to act on a live run (stop, checkpoint) from any thread, honoured at the next optimizer step boundary
through a step-hook trampoline that costs nothing while none is pending (docs/spec.md section 21).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainmeter.core import checkpoint_files as files
from trainmeter.core.checkpoint_files import Refused, recovery_note
from trainmeter.core.host_patches import allow


class StopTraining(BaseException):
    """Ends a hand loop after optimizer step ``step`` (the lane's own) because ``by`` asked a stop.

    A ``BaseException``, so a loop's ``except Exception:`` does not swallow it: ``tm.monitor()`` and ``%%trainmeter``
    end the run ``stopped``; a thread of yours it ends uncaught ends quietly (host patch ``thread-stop``; docs/spec.md
    section 21).
    """

    def __init__(self, by: str, step: int) -> None:
        super().__init__(f"training stopped by {by} after step {step}")
        self.by = by
        self.step = step


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint written during the run (passport.json ``checkpoints``, docs/spec.md): ``path`` relative to
    the run folder when inside it, ``bytes`` (``None``: unreadable), ``source`` ``trainmeter`` or the framework's;
    ``recovery``: the sentence marking the recovery point a non-finite loss asked for, else ``None``."""

    path: str
    step: int
    bytes: int | None
    seconds: float | None
    source: str
    recovery: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The passport's form (``recovery`` only on the recovery point)."""
        out = asdict(self)
        if self.recovery is None:
            del out["recovery"]
        return out


@dataclass(frozen=True)
class StopRecord:
    """Who stopped the run, after which step (summed over the lanes), through what (``StopTraining`` or a
    framework's name), and the step counted when asked (``None``: on the training thread, at the step itself)."""

    by: str
    step: int
    via: str
    requested_at_step: int | None = None


def raise_stop(by: str, step: int, quiet: bool) -> None:
    """Raise :class:`StopTraining`; ``quiet``: the thread it ends skips threading's excepthook (``thread-stop``)."""
    thread = threading.current_thread()
    invoke = getattr(thread, "_invoke_excepthook", None)
    if quiet and callable(invoke) and not getattr(invoke, "trainmeter_quiet", False):
        def quiet_invoke(t: threading.Thread, _invoke: Callable[[threading.Thread], None] = invoke) -> None:
            if not isinstance(sys.exc_info()[1], StopTraining):  # called inside Thread's except block
                _invoke(t)

        quiet_invoke.trainmeter_quiet = True  # type: ignore[attr-defined]
        thread._invoke_excepthook = quiet_invoke  # type: ignore[attr-defined]
    raise StopTraining(by, step)


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.compiler.is_compiling())
    except Exception:
        return False


def _sharded(model: Any) -> bool:
    """Whether any parameter of ``model`` is a DTensor (FSDP2, tensor parallel)."""
    try:
        from torch.distributed.tensor import DTensor
    except Exception:
        return False
    return any(isinstance(p, DTensor) for p in model.parameters())


class Controls:
    """The run's pending requests and what was done with them. ``request_*``: any thread, the rest: the training
    thread; the records are replaced, never mutated (any thread reads them)."""

    def __init__(self, monitor: Any) -> None:
        self._m = monitor
        self._lock = threading.Lock()
        self._armed = False
        self._hook: tuple[Callable[[], None] | None, int] = (None, sys.maxsize)  # the dispatcher's hook and step
        self._stop: tuple[str, int | None] | None = None  # the pending stop: by whom, the step counted when asked
        self._asked_save: tuple[str, bool] | None = None  # the pending checkpoint: by whom, as the recovery point
        self._finite_by: str | None = None  # who asked for a save before a step whose loss is not finite
        self._recovery: CheckpointRecord | None = None  # saved before the step whose loss was not finite
        self._calls: list[tuple[str, Callable[[], None]]] = []  # work a wing asked to run at the next boundary
        self._stopped: StopRecord | None = None  # lane 1's stop (its own step)
        self._asked: tuple[str, int | None] | None = None  # the first stop asked: by whom, at which step
        self.checkpoints: tuple[CheckpointRecord, ...] = ()
        self.refused: tuple[dict[str, Any], ...] = ()
        self.saving = False  # True while checkpoint_now saves: the time wing leaves that save's record to this one
        self._framework: Any = None  # the FrameworkControl of the framework in its fit now (use_framework)

    def live(self) -> bool:
        """Whether the run takes requests now (started and not finishing)."""
        return self._m.status == "running" and not self._m.lifecycle.finished

    def request_stop(self, by: str) -> bool:
        """Ask every lane to stop after its next optimizer step; whether the run took it."""
        if not self.live() or self.stopped is not None:
            return False
        with self._lock:
            if self._stop is None:
                self._stop = (by, self._m.steps)
                self._ask_lanes(*self._stop)
            self._arm()
        return True

    def _ask_lanes(self, by: str, asked_at: int | None) -> None:
        if self._asked is None:
            self._asked = (by, asked_at)
        lanes = self._m.lanes
        if lanes.stop_by is None:
            lanes.quiet_stop = allow("thread-stop", self._m.warn_once)
            lanes.stop_by = by  # lanes 2, 3, ... raise StopTraining at their next step (core/lanes.py)

    @property
    def stopped(self) -> StopRecord | None:
        """The run's stop once a lane honoured it (lane 1, or another lane), ``None`` before. Any thread."""
        lanes, own = self._m.lanes, self._stopped
        if not lanes or self._asked is None:
            return own
        others = list(lanes.lanes)
        if own is None and all(lane.stopped_at is None for lane in others):
            return None
        by, asked_at = self._asked if own is None else (own.by, own.requested_at_step)
        step = self._m.steps_state.steps if own is None else own.step  # a lane that ended counts its last step
        step += sum(lane.steps if lane.stopped_at is None else lane.stopped_at for lane in others)
        return StopRecord(by=by, step=step, via="StopTraining" if own is None else own.via, requested_at_step=asked_at)

    def request_checkpoint(self, by: str, *, finite: bool = False) -> bool:
        """Checkpoint after the next optimizer step (``finite``: :meth:`checkpoint_now`'s); whether the run took it."""
        if not self.live():
            return False
        with self._lock:
            first, was_finite = self._asked_save or (by, False)
            self._asked_save = (first, was_finite or finite)
            self._arm()
        return True

    def request_call(self, key: str, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on the training thread after the next step (a fault warned under ``key``); whether taken."""
        if not self.live():
            return False
        with self._lock:
            self._calls.append((key, fn))
            self._arm()
        return True

    def pending(self) -> tuple[str | None, str | None]:
        """``(stop_by, checkpoint_by)`` not yet honoured."""
        stop, save = self._stop, self._asked_save
        return (stop[0] if stop else None), (save[0] if save else None)

    def _arm(self) -> None:  # under the lock
        self._armed = True
        self._m.steps_state.set_hook(self._on_step, 0)  # the next counted step calls the trampoline

    def set_hook(self, fn: Callable[[], None] | None, at: int) -> None:
        """The dispatcher's step hook ``fn`` from step ``at`` (after a pending request's trampoline)."""
        with self._lock:
            self._hook = (fn, at if fn is not None else sys.maxsize)
            if not self._armed:
                self._m.steps_state.set_hook(fn, at)

    def _on_step(self) -> None:
        """The trampoline: give the hook back, checkpoint, call the hook, then stop (may raise StopTraining)."""
        if _compiling():  # inside a compiled region: not a boundary we can act at; the next step will be
            return
        with self._lock:
            stop, self._stop = self._stop, None
            save, self._asked_save = self._asked_save, None
            calls, self._calls = self._calls, []
            self._armed = False
            fn, at = self._hook
            self._m.steps_state.set_hook(fn, at)
        try:
            for key, call in calls:
                self._m.guard(key, call)
            if save is not None:
                self.checkpoint_now(save[0], finite=save[1])
            if fn is not None:
                fn()
        finally:
            if stop is not None:
                self.stop_now(*stop)

    def stop_now(self, by: str, requested_at_step: int | None = None) -> None:
        """Stop lane 1 now (the framework's stop, else :class:`StopTraining`), every other lane after its next step."""
        step = self._m.steps_state.steps  # lane 1's step (the run's while it trains alone)
        self._ask_lanes(by, requested_at_step)
        control, via = self._framework, None
        if control is not None:
            try:
                via = str(getattr(control, "name", "framework")) if control.request_stop() else None
            except Exception as exc:
                self._m.warn_once("control-stop", f"the framework's stop failed ({exc!r}); stopping the loop instead")
        self._stopped = StopRecord(by=by, step=step, via="StopTraining" if via is None else via,
                                   requested_at_step=requested_at_step)
        if via is None:
            raise_stop(by, step, self._m.lanes.quiet_stop)

    def lane1_stop_step(self) -> int | None:
        """The step lane 1 stopped at, ``None`` when it did not. Any thread."""
        return self._stopped.step if self._stopped is not None else None

    def use_framework(self, control: Any) -> None:
        """Stop and save through ``control`` (``name``, ``request_stop()``, ``save_checkpoint(dir, name)``) while a
        framework's fit runs (``None``: none)."""
        self._framework = control

    def save_before_nonfinite(self, by: str) -> None:
        """Checkpoint the weights before the first primary optimizer step whose loss is not finite: ``by``'s
        recovery point (docs/spec.md section 21; host patch ``nan-checkpoint``)."""
        probes = self._m.probes
        if probes is not None:
            self._finite_by = by
            probes.add_pre_step_hook(self._before_step)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before an optimizer step: lane 1's primary step with a non-finite loss read -> save the finite state."""
        probes = self._m.probes
        if self._recovery is not None or self._finite_by is None or probes is None or not self.live():
            return
        try:
            primary = probes.primary_optimizer
            if (probes.hot_ident not in (0, threading.get_ident()) or (primary is not None and primary is not optimizer)
                    or not probes.loss_not_finite()):
                return
            self._recovery = self._checkpoint(self._finite_by, "before")
            self._finite_by = None  # one try
        except Exception as exc:
            self._m.warn_once("checkpoint-before-step", f"the checkpoint before a non-finite step failed: {exc!r}")

    def checkpoint_now(self, by: str, *, finite: bool = False) -> CheckpointRecord | None:
        """Checkpoint the step just counted; its record, or ``None`` when refused (said once). Never raises.
        ``finite``: the recovery point (the checkpoint saved before the non-finite step, else finite weights now)."""
        if finite and self._recovery is not None:
            return self._recovery
        return self._checkpoint(by, "after" if finite else None)

    def _checkpoint(self, by: str, recovery: str | None) -> CheckpointRecord | None:
        m = self._m
        step = m.steps
        if m.run_dir is None:
            return self._refuse(step, by, "the run has no folder (its record is kept in memory)")
        if _compiling():
            return self._refuse(step, by, "the optimizer step runs inside a torch.compile region")
        entered = False
        try:
            m.enter_phase("checkpoint")
            entered = True
            t0 = m.clock()
            model = m.model_ref() if m.model_ref is not None else None  # None: the save refuses it
            last = self.checkpoints[-1] if self.checkpoints else None
            note = recovery_note(model, step, recovery, last) if recovery is not None and model is not None else None
            self.saving = True
            try:
                path, source = self._save(step, model)
            finally:
                self.saving = False
            seconds = m.clock() - t0
        except Refused as exc:
            return self._refuse(step, by, str(exc))
        except Exception as exc:
            return self._refuse(step, by, f"the save failed: {exc!r}")
        finally:
            if entered:
                m.exit_phase()
        rel = str(path.relative_to(m.run_dir) if path.is_relative_to(m.run_dir) else path)
        record = CheckpointRecord(path=rel, step=step, bytes=files.size_bytes(path), seconds=seconds, source=source,
                                  recovery=note)
        self.checkpoints = (*self.checkpoints, record)
        getattr(m.record_sink, "write_checkpoint", lambda _entry: None)(record.to_dict())  # in the log now: section 6
        return record

    def _refuse(self, step: int, by: str, reason: str) -> None:
        self.refused = (*self.refused, {"step": step, "by": by, "reason": reason})
        self._m.warn_once(f"checkpoint-refused-{len(self.refused)}", f"checkpoint at step {step} refused: {reason}")

    def _save(self, step: int, model: Any) -> tuple[Path, str]:
        """Save as ``<run>/checkpoints/step-<step>`` (never over another); a failure's leftovers are removed."""
        m = self._m
        folder = Path(m.run_dir) / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        stem = files.free_stem(folder, f"step-{step}")
        control = self._framework
        try:
            written = control.save_checkpoint(str(folder), stem) if control is not None else None
            if written:
                return Path(written), str(getattr(control, "name", "framework"))
            if model is None:
                raise Refused("no trained model is known (the first optimizer step names it; one called only inside "
                              "a torch.compile'd function is not seen: pass tm.monitor(model=...))")
            if _sharded(model):
                raise Refused("the model is sharded (DTensor parameters) and no framework saver is in use")
            optimizer = getattr(m.probes, "primary_optimizer", None)
            return files.write_own(folder / f"{stem}.pt", model, optimizer, step), "trainmeter"
        except Refused:
            raise
        except Exception as exc:
            disk = files.disk_error(exc, folder)
            files.remove_partial(folder, stem)
            if disk is not None:
                raise Refused(disk) from exc
            raise

    def end_status(self, default: str) -> str:
        """``stopped`` when a stop was honoured (a framework ended by its own loop), else ``default``."""
        return "stopped" if self.stopped is not None else default

    def passport_fields(self) -> dict[str, Any]:
        """passport.json's stop fields (when stopped), ``checkpoints`` and refusals."""
        out: dict[str, Any] = {}
        s = self.stopped
        if s is not None:
            out.update(stopped_by=s.by, stopped_at_step=s.step, stopped_via=s.via,
                       stop_requested_at_step=s.requested_at_step)
        out["checkpoints"] = [c.to_dict() for c in self.checkpoints]
        if self.refused:
            out["checkpoints_refused"] = list(self.refused)
        return out

