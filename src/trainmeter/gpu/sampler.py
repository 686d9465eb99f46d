"""Background GPU sampler: each selected device read at 1-2 Hz on its own daemon thread (docs/spec.md section 8).

A deadline loop per device waits on one shared ``threading.Event`` (a slow call delays only its device; missed
ticks are skipped). Never raises; memory is bounded. Thread safety: every public method may be called from any
thread (one lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trainmeter.core.clock import Clock
from trainmeter.core.threads import OurThread
from trainmeter.gpu.backend import GpuBackend, GpuBackendResult, GpuSample, GpuUnavailableError, open_gpu_backend, safe
from trainmeter.gpu.device_state import MAX_ERROR_CHARS, Accumulator, DeviceState, GpuAverages, GpuDeviceStatus
from trainmeter.gpu.device_state import next_due as _next_due
from trainmeter.gpu.selection import cuda_context_uuids, parse_gpus, select_gpus

__all__ = ["MIN_INTERVAL_S", "REASON_OPENING", "STOP_DEADLINE_S", "GpuAverages", "GpuDeviceStatus", "GpuSampler"]

MIN_INTERVAL_S = 0.1
STOP_DEADLINE_S = 0.5
REASON_OPENING = "NVML is being opened on the sampler's thread"


class GpuSampler:
    """Samples the NVML ``indices`` of ``backend`` (``None``: nothing, ``unavailable_reason`` says why) every
    ``interval_s`` (at least 0.1 s), keeping ``history_len`` samples per device; a fatal error or
    ``max_consecutive_errors`` in a row stop a device. A backend it opened (:meth:`in_background`) it
    closes in :meth:`stop`; one handed in, the caller closes."""

    def __init__(self, backend: GpuBackend | None, indices: Sequence[int], *, clock: Clock, interval_s: float = 0.5,
                 history_len: int = 120, max_consecutive_errors: int = 10) -> None:
        if not interval_s >= MIN_INTERVAL_S:
            raise ValueError(f"interval_s must be >= {MIN_INTERVAL_S} s (got {interval_s!r})")
        self._clock = clock
        self.interval_s = float(interval_s)
        self._max_errors = max_consecutive_errors
        self._lock = threading.RLock()  # a Ctrl-C that cut a with-block on the training thread (3.13) leaves no wait
        self._stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        self._opener: Callable[[], GpuBackendResult] | None = None
        self._owner: threading.Thread | None = None
        self.abandoned_reason: str | None = None
        self.open_error: str | None = None  # opening in the background raised (in_background): why
        # in_background: (energy counters by device (mJ, or None and a reason), the clock's time) read by the owner
        # thread at the open and at the end; the energy wing reads them (the training thread never touches NVML)
        self.energy_start: tuple[dict[int, tuple[float | None, str | None]], float] | None = None
        self.energy_end: tuple[dict[int, tuple[float | None, str | None]], float] | None = None
        self._window_begin_s: float | None = None
        self._window_end_s: float | None = None
        self._history_len = history_len
        self._use(GpuBackendResult(backend=backend), indices)

    def _use(self, opened: GpuBackendResult, indices: Sequence[int] | None = None) -> None:
        """Take the devices ``indices`` of ``opened``'s backend, else (opened for a run: owned, closed in :meth:`stop`)
        those its selection chose; fresh windows: readers see the old or the new map."""
        backend, selection, owns = opened.backend, opened.selection, indices is None
        if indices is None:
            indices = selection.indices if selection is not None else ()
        chosen = tuple(indices) if backend is not None else ()
        driver = backend.driver_version() if backend is not None else None  # the backend's two never raise
        devices = {i: backend.device_info(i) for i in chosen}  # type: ignore[union-attr]
        with self._lock:
            self._backend, self._owns_backend, self.selection = backend, owns, selection
            self.devices, self.driver_version, self.unavailable_reason = devices, driver, opened.reason
            self._states = {i: DeviceState(i, self._history_len) for i in chosen}

    @classmethod
    def in_background(cls, gpus: str | int | Sequence[int | str] | None = None, *, clock: Clock,
                      open_backend: Callable[..., GpuBackendResult] | None = None,
                      cuda_uuids: Sequence[str] | None | bool = True, env: Mapping[str, str] | None = None,
                      **kwargs: Any) -> GpuSampler:
        """A sampler that opens, samples and closes the backend only on its own threads: :meth:`start` starts an owner
        thread that opens (:func:`open_for_run`: ``open_backend``, ``env``; ``cuda_uuids``: ``True`` to detect the
        CUDA context's), then the device threads; until then ``unavailable_reason`` says why."""
        uuids = cuda_context_uuids if cuda_uuids is True else (cuda_uuids or None)
        sampler = cls(None, (), clock=clock, **kwargs)
        sampler.unavailable_reason = REASON_OPENING
        sampler._opener = lambda: open_for_run(gpus, clock=clock, open_backend=open_backend, cuda_uuids=uuids, env=env)
        return sampler

    def start(self) -> None:
        """Start the owner thread (it opens an in_background backend, then starts the device threads); idempotent."""
        with self._lock:
            if self._owner is not None or self._stop_event.is_set():
                return
            self._owner = OurThread(target=self._own, name="trainmeter-gpu-open")
        self._owner.start()

    def _own(self) -> None:  # the owner thread: open and adopt, sample until stopped, then join and close
        if self._opener is not None and not self._adopt_opened():
            return
        with self._lock:
            self._threads = [OurThread(target=self._run, args=(i,), name=f"trainmeter-gpu-{i}") for i in self._states]
        for t in self._threads:
            t.start()
        # energy counters after the device threads start (a hung counter read delays no sampling) and at the end
        self.energy_start = read_counters(self._backend, tuple(self._states)), self._clock()
        self._stop_event.wait()
        deadline = time.monotonic() + STOP_DEADLINE_S / 2  # inside stop()'s own deadline
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self._abandon(STOP_DEADLINE_S / 2)
        else:
            self.energy_end = read_counters(self._backend, tuple(self._states)), self._clock()
        self._close()

    def _close(self) -> None:
        if self._owns_backend and self._backend is not None:
            safe(self._backend.close)

    def _adopt_opened(self) -> bool:
        """Open the backend on the owner thread and take its devices; ``False`` when sampling goes no further."""
        try:
            opened = self._opener()  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a bad --gpus for this machine, a broken driver
            self.unavailable_reason = f"GPU sampling off: {type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            self.open_error = self.unavailable_reason  # the run warns once (training thread)
            return False
        if self._stop_event.is_set():  # the run ended while NVML was opening
            if opened.backend is not None:
                safe(opened.backend.close)
            self.unavailable_reason = "the run ended before NVML opened"
            return False
        self._use(opened)
        return True

    def _abandon(self, waited_s: float) -> None:
        self.abandoned_reason = (f"GPU sampling did not stop within {waited_s:g} s (an NVML call hung); "
                                 "its thread was left behind and the GPU readings end at its last sample")
        with self._lock:
            for st in self._states.values():
                if st.active:
                    st.active, st.stopped_reason = False, self.abandoned_reason

    def stop(self, timeout_s: float = STOP_DEADLINE_S) -> None:
        """Stop; wait at most ``timeout_s`` for the owner thread (which closes the backend), then abandon what still
        runs. A sampler never started closes an owned backend here."""
        self._stop_event.set()
        owner = self._owner
        if owner is None:
            self._close()
        elif owner is not threading.current_thread():
            owner.join(timeout_s)
            if owner.is_alive():
                self._abandon(timeout_s)

    def _run(self, index: int) -> None:
        st = self._states[index]  # fixed once the device threads start
        try:
            while not self._stop_event.is_set():
                with self._lock:
                    if not st.active:
                        return
                    due = st.claim(self._clock(), self.interval_s)
                if due:
                    self._sample_device(index)
                    with self._lock:  # a slow call: skip the ticks it overran, keep the grid
                        st.next_due_s = _next_due(st.next_due_s - self.interval_s, self._clock(), self.interval_s)
                self._stop_event.wait(min(max(st.next_due_s - self._clock(), 0.0), self.interval_s))
        except Exception as exc:  # noqa: BLE001 - a sampler thread never raises
            self._record_error(index, f"sampler thread failed: {exc!r}", fatal=True)

    def _sample_device(self, index: int) -> None:  # a device has a state only on an open backend
        t0 = self._clock()
        try:
            sample = self._backend.sample(index)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - a device-level failure (GpuUnavailableError) or a backend fault
            known: Any = exc if isinstance(exc, GpuUnavailableError) else None
            self._record_error(index, known.reason if known else f"{type(exc).__name__}: {exc}",
                               fatal=bool(known and known.fatal), call_s=self._clock() - t0)
            return
        try:
            with self._lock:
                begin, end = self._window_begin_s, self._window_end_s
                in_window = begin is not None and sample.t_s >= begin and (end is None or sample.t_s <= end)
                self._states[index].take(sample, self._clock() - t0, in_window)
        except Exception as exc:  # noqa: BLE001
            self._record_error(index, f"bookkeeping failed: {exc!r}", fatal=False)

    def _record_error(self, index: int, text: str, *, fatal: bool, call_s: float | None = None) -> None:
        with self._lock:
            self._states[index].fail(text, fatal=fatal, max_errors=self._max_errors, call_s=call_s)

    def begin_window(self, now_s: float) -> None:
        """Open the averaging window (e.g. at the first training step); resets it."""
        with self._lock:
            self._window_begin_s, self._window_end_s = now_s, None
            for st in self._states.values():
                st.window = Accumulator()

    def end_window(self, now_s: float) -> None:
        """Close the window at ``now_s`` (maybe past: the last step's); later samples still in the history leave it."""
        with self._lock:
            if self._window_begin_s is None:
                return
            prev_end_s, self._window_end_s = self._window_end_s, now_s
            for st in self._states.values():
                st.close_window(self._window_begin_s, prev_end_s, now_s)

    def _each(self, read: Callable[[DeviceState], Any]) -> dict[int, Any]:
        with self._lock:
            return {i: value for i, st in self._states.items() if (value := read(st)) is not None}

    def latest(self) -> dict[int, GpuSample]:
        """Latest sample per device that has one (a copy; samples are immutable)."""
        return self._each(lambda st: st.latest)

    def averages(self) -> dict[int, GpuAverages]:
        """Means since sampling began, per device."""
        return self._each(lambda st: st.all.result(st.index))

    def window_averages(self) -> dict[int, GpuAverages]:
        """Means over the window (:meth:`begin_window` .. :meth:`end_window`), per device."""
        return self._each(lambda st: st.window.result(st.index))

    def status(self) -> dict[int, GpuDeviceStatus]:
        """Sampling health per device."""
        return self._each(DeviceState.status)

    @property
    def indices(self) -> tuple[int, ...]:
        """NVML indices being sampled."""
        return tuple(self._states)


def open_for_run(gpus: str | int | Sequence[int | str] | None, *, clock: Clock,
                 open_backend: Callable[..., GpuBackendResult] | None = None,
                 cuda_uuids: Sequence[str] | None | Callable[[], Sequence[str] | None] = cuda_context_uuids,
                 env: Mapping[str, str] | None = None) -> GpuBackendResult:
    """Open the backend (on whichever thread opens it) and select the devices ``gpus`` names (for
    :meth:`GpuSampler.in_background`); ``cuda_uuids``: the CUDA context's UUIDs, or a function reading them once it is
    open. ``ValueError``: a bad ``gpus`` (the backend is closed first)."""
    spec = parse_gpus(gpus)
    result = (open_backend or open_gpu_backend)(clock=clock)
    backend = result.backend
    if backend is None:
        return GpuBackendResult(backend=None, reason=result.reason)
    infos = [backend.device_info(i) for i in range(backend.device_count())]
    uuids = cuda_uuids() if callable(cuda_uuids) else cuda_uuids
    try:
        selection = select_gpus(spec, infos, cuda_uuids=uuids or None, env=env)
    except ValueError:
        backend.close()
        raise
    return GpuBackendResult(backend=backend, selection=selection)


def read_counters(backend: Any, indices: Iterable[int]) -> dict[int, tuple[float | None, str | None]]:
    """Read each device's energy counter (mJ) now; ``(None, reason)`` where it cannot. Never raises."""
    read = getattr(backend, "total_energy_mj", None)
    if read is None:
        return dict.fromkeys(indices, (None, "this GPU backend has no energy counter"))
    out: dict[int, tuple[float | None, str | None]] = {}
    for index in indices:
        try:
            out[index] = read(index)
        except Exception as exc:  # noqa: BLE001 - a backend fault is a reason, never an exception
            out[index] = (None, f"energy counter read failed: {exc!r}")
    return out
