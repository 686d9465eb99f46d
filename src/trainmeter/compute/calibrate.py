"""The measured matmul ceiling: ``tm.calibrate()`` times a short dense matmul per dtype on the run's device.

Explicit only (docs/spec.md section 5, "Measured ceiling"). The last calibration is kept (one per process, behind a
lock), so one taken before a run serves the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

# the dtypes calibrate() times, each the torch dtype of its matrices (tf32: float32 with TF32 matmuls, CUDA)
_TORCH_DTYPE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_LOCK = threading.Lock()
_LAST: Calibration | None = None


@dataclass(frozen=True, slots=True)
class Ceiling:
    """One dtype's measured dense-matmul rate on ``device`` (``"cuda:0"``, named ``device_name``): ``repeats`` matmuls
    of ``shape`` ``(m, n, k)`` in ``seconds`` (synchronized on CUDA), ``flops_per_s`` = 2 m n k repeats / seconds."""

    device: str
    device_name: str
    dtype: str
    shape: tuple[int, int, int]
    repeats: int
    seconds: float
    flops_per_s: float

    @property
    def source(self) -> str:
        """How the figure was measured, for a derivation's input."""
        m, n, k = self.shape
        return (f"tm.calibrate() on {self.device_name} ({self.device}): {self.repeats} dense {self.dtype} matmuls "
                f"{m}x{k} @ {k}x{n} in {self.seconds:.3g} s")

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the passport."""
        return {**asdict(self), "shape": list(self.shape), "provenance": "measured"}


@dataclass(frozen=True, slots=True)
class Calibration:
    """The ceilings one :func:`calibrate` call measured, by dtype, and the dtypes it could not time (and why)."""

    ceilings: dict[str, Ceiling]
    skipped: dict[str, str]

    def ceiling(self, dtype: str | None) -> Ceiling | None:
        return self.ceilings.get(dtype) if dtype else None

    def __repr__(self) -> str:
        """A short table: one row per dtype (rate, matmuls, seconds) or why it was skipped."""
        from trainmeter.sizes import format_flops, format_seconds

        first = next(iter(self.ceilings.values()), None)
        rows = [("dtype", "ceiling", "matmuls", "time")]
        rows += [(d, format_flops(c.flops_per_s, per_second=True), f"{c.repeats} x {'x'.join(map(str, c.shape))}",
                  format_seconds(c.seconds)) for d, c in self.ceilings.items()]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        where = "" if first is None else f" on {first.device_name}" + (
            f" ({first.device})" if first.device != first.device_name else "")
        lines = [f"tm.calibrate(): measured dense-matmul ceilings{where}"]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines += [f"{d.ljust(widths[0])}  skipped: {why}" for d, why in self.skipped.items()]
        return "\n".join(lines)


def achieved_flops_per_s(shape: tuple[int, int, int], repeats: int, seconds: float) -> float | None:
    """2 x m x n x k x repeats / seconds, or ``None`` for a duration that is not positive."""
    m, n, k = shape
    return 2.0 * m * n * k * repeats / seconds if seconds > 0 and repeats > 0 else None


def time_matmuls(run_once: Callable[[], Any], sync: Callable[[], Any], *, clock: Callable[[], float],
                 min_seconds: float, max_repeats: int) -> tuple[int, float]:
    """Run ``run_once`` until ``min_seconds`` have passed on ``clock`` (at most ``max_repeats``; one untimed call
    first; ``sync`` before each clock read): ``(repeats, seconds)``."""
    run_once()
    sync()
    start = clock()
    repeats = 0
    for repeats in range(1, max_repeats + 1):  # the count run is returned
        run_once()
        if repeats & (repeats - 1) == 0 or repeats == max_repeats:  # check the clock at 1, 2, 4, 8... repeats
            sync()
            if clock() - start >= min_seconds:
                break
    sync()
    return repeats, clock() - start


def _measure_one(torch: Any, device: Any, dtype: str, size: int, *, clock: Callable[[], float],
                 min_seconds: float, max_repeats: int) -> Ceiling:
    on_cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if on_cuda else (lambda: None)
    a = torch.randn(size, size, device=device, dtype=getattr(torch, _TORCH_DTYPE[dtype]))
    b = torch.randn(size, size, device=device, dtype=a.dtype)
    out = torch.empty(size, size, device=device, dtype=a.dtype)
    allow = torch.backends.cuda.matmul.allow_tf32 if on_cuda else None
    try:
        if on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        with torch.no_grad():
            repeats, seconds = time_matmuls(lambda: torch.mm(a, b, out=out), sync, clock=clock,
                                            min_seconds=min_seconds, max_repeats=max_repeats)
    finally:
        if on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = allow
    rate = achieved_flops_per_s((size, size, size), repeats, seconds)
    if rate is None:
        raise RuntimeError(f"the clock did not advance over {repeats} matmuls")
    return Ceiling(device=str(device), device_name=torch.cuda.get_device_name(device) if on_cuda else "cpu",
                   dtype=dtype, shape=(size, size, size), repeats=repeats, seconds=seconds, flops_per_s=rate)


def calibrate(dtypes: Iterable[str] | None = None, *, device: Any = None, size: int | None = None,
              min_seconds: float = 0.25, max_repeats: int = 1000,
              clock: Callable[[], float] = time.perf_counter) -> Calibration:
    """Measure the dense-matmul ceiling per dtype (default ``bf16, fp16, tf32`` on CUDA, ``fp32, bf16`` on the CPU) on
    ``device`` (default the current CUDA device, else the CPU) with ``size``-square matrices (default 8192 on CUDA,
    1024 on the CPU), each for ``min_seconds`` (at most ``max_repeats`` matmuls); the :class:`Calibration`, also kept
    as the last one. ``ValueError`` for an unknown dtype or a value out of range; ``RuntimeError`` without torch."""
    try:
        import torch  # the user asked for a measurement: torch is needed now
    except ImportError as exc:
        raise RuntimeError("tm.calibrate() needs torch installed") from exc
    dev = torch.device(device) if device is not None else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    wanted = tuple(dtypes) if dtypes is not None else (("bf16", "fp16", "tf32") if dev.type == "cuda"
                                                        else ("fp32", "bf16"))
    bad = [d for d in wanted if d not in _TORCH_DTYPE]
    if bad:
        raise ValueError(f"unknown calibration dtype {bad[0]!r}; valid: {', '.join(_TORCH_DTYPE)}")
    side = size if size is not None else (8192 if dev.type == "cuda" else 1024)
    if isinstance(side, bool) or not isinstance(side, int) or not 16 <= side <= 65536:
        raise ValueError(f"size must be an int from 16 to 65536, got {size!r}")
    if not 0 < min_seconds <= 60:
        raise ValueError(f"min_seconds must be in (0, 60], got {min_seconds!r}")
    ceilings: dict[str, Ceiling] = {}
    skipped: dict[str, str] = {}
    for dtype in wanted:
        if dtype == "tf32" and dev.type != "cuda":
            skipped[dtype] = "TF32 is a CUDA tensor-core mode; the CPU has none"
            continue
        try:
            ceilings[dtype] = _measure_one(torch, dev, dtype, side, clock=clock, min_seconds=min_seconds,
                                           max_repeats=max_repeats)
        except Exception as exc:  # a dtype the device cannot multiply: said, not raised
            skipped[dtype] = f"{type(exc).__name__}: {exc}"
    result = Calibration(ceilings=ceilings, skipped=skipped)
    global _LAST
    with _LOCK:
        _LAST = result
    return result


def last_calibration() -> Calibration | None:
    """The last :func:`calibrate` result in this process, or ``None``; any thread."""
    with _LOCK:
        return _LAST


def run_dtype(param_dtype: str | None, on_cuda: bool, tf32_allowed: bool) -> str | None:
    """The calibration dtype a run's matmuls use: its autocast/param dtype, float32 as ``tf32`` when allowed on CUDA."""
    from trainmeter.compute.peaks import _DTYPE_ALIASES

    key = str(param_dtype).replace("torch.", "")
    if key in ("float32", "float", "fp32"):
        return "tf32" if on_cuda and tf32_allowed else "fp32"
    dtype = _DTYPE_ALIASES.get(key)
    return dtype if dtype in ("bf16", "fp16") else None


def of_achievable(flops_per_unit: Any, units_per_s: float | None, ceiling: Ceiling, *, unit: str = "tokens") -> Any:
    """Model FLOP/s over the measured ceiling, MFU's rule with the ceiling as the peak: F per ``unit`` (``tokens`` or
    ``samples``) x training-only ``units_per_s``; a Derivation named ``of_achievable``. Pure."""
    from trainmeter.compute.mfu import mfu
    from trainmeter.core.provenance import Input

    peak = Input(name="ceiling", value=ceiling.flops_per_s, unit="FLOP/s", provenance="measured", source=ceiling.source)
    return replace(mfu(flops_per_unit, units_per_s, 1, peak, unit=unit), name="of_achievable")
