"""Run options: one frozen record built from magic flags or ``tm.monitor`` keywords (docs/spec.md section 1),
validated before anything runs, one rule per kind of value (a bool is never a number).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trainmeter.sizes import parse_size

DEFAULT_RUN_ROOT = Path(".trainmeter") / "runs"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}\Z")
_WINDOWS_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?\Z", re.IGNORECASE)
_DIGITS = re.compile(r"[0-9]{1,40}\Z")
_DECIMAL = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\Z")
MAX_SERIES_LIMIT = 100_000
MAX_GPU_INDEX = 4095  # highest device index --gpus takes (no node holds more)
RANGES: dict[str, tuple[int, int | float, str]] = {
    "--layers": (1, 100_000, "layers"),
    "--d-model": (1, 10_000_000, "model width"),
    "--seq-len": (1, 1_000_000_000, "tokens per sequence"),
    "--vocab": (1, 1_000_000_000, "vocabulary entries"),
    "--memory-snapshot-step": (1, 10**12, "an optimizer step"),
    "--max-series": (1, MAX_SERIES_LIMIT, "series"),
    "--budget-steps": (1, 10**12, "optimizer steps"),
    "--budget-tokens": (1, 10**18, "tokens"),
    "--budget-samples": (1, 10**18, "samples"),
    "--budget-flops": (1, 1e32, "FLOPs"),
}
"""The physical range of each whole-number and budget flag: ``(lowest, highest, what it counts)``."""
MAX_GRID_GCO2_PER_KWH = 2000.0  # above any grid's intensity (coal: ~1000 gCO2/kWh): a larger value is a unit slip


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorOptions:
    """What the user asked for, validated: one field per flag (:data:`FLAGS`); ``None`` where a flag was not given."""

    name: str = "run"
    budget_tokens: int | None = None
    budget_steps: int | None = None
    budget_samples: int | None = None
    budget_flops: float | None = None
    run_root: Path = DEFAULT_RUN_ROOT
    interval_s: float = 10.0
    widget: bool = True
    convention: str | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    layers: int | None = None
    d_model: int | None = None
    seq_len: int | None = None
    vocab: int | None = None
    gpus: str | None = None
    memory_snapshot_step: int | None = None
    tap: bool = True
    grid_gco2_per_kwh: float | None = None
    grid_source: str | None = None
    max_series: int = 256
    alerts: tuple[str, ...] = ()
    resume: Path | None = None  # the parent run's folder (lineage/parent.py), resolved before the run starts

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of the options."""
        return {f.name: str(v) if isinstance(v := getattr(self, f.name), Path) else v for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Flag:
    """One ``%%trainmeter`` flag, the one source for the magic's parser and ``%trainmeter help`` (``metavar`` ``""``:
    a switch; ``group``: its mutually exclusive group, or ``""``)."""

    flag: str
    field: str
    metavar: str
    help: str
    default: str
    group: str = ""
    bare: str = ""  # the value of the flag given with none (``--resume`` alone: ``last``)

    @property
    def dest(self) -> str:
        """The keyword of :func:`make_options` it feeds."""
        return {"run_root": "run_dir", "alerts": "alert"}.get(self.field, self.field)


FLAGS: tuple[Flag, ...] = (
    Flag("--name", "name", "NAME", "run name, in the run folder's name: 1-80 letters, digits, '.', '_' or '-'",
         "run"),
    Flag("--budget-tokens", "budget_tokens", "N", "planned training tokens, with K/M/B/T suffixes (20B, 1.5M); "
         "gives progress, ETA and FLOPs required", "none", "budget"),
    Flag("--budget-steps", "budget_steps", "N", "planned optimizer steps (1000, 1.5k)", "none", "budget"),
    Flag("--budget-samples", "budget_samples", "N", "planned training samples (50k, 1.2M) where the run counts samples",
         "none", "budget"),
    Flag("--budget-flops", "budget_flops", "X", "planned training FLOPs (1e21, 3.5T)", "none", "budget"),
    Flag("--dir", "run_root", "PATH", "folder that holds run folders (~ expanded)", str(DEFAULT_RUN_ROOT)),
    Flag("--interval", "interval_s", "SECONDS", "seconds between reports (run-log records, text lines), "
         "0.1 to 86400", "10"),
    Flag("--no-widget", "widget", "", "no live widget: print the text line instead", "widget shown in a notebook"),
    Flag("--convention", "convention", "NAME", "FLOPs convention for MFU and FLOPs: hf, megatron, titan "
         "(alias nanochat, torchtitan) or embeddings (alias all_params)", "none: the range over conventions"),
    Flag("--peak-tflops", "peak_tflops", "X", "declared dense peak per device, TFLOP/s (e.g. 989); "
         "needs --peak-source", "the cited table for a known GPU, else none (MFU not shown)"),
    Flag("--peak-source", "peak_source", "TEXT", "where the declared peak comes from (a datasheet, a measurement)",
         "none"),
    Flag("--layers", "layers", "N", "number of layers (positive whole number), overriding detection", "detected"),
    Flag("--d-model", "d_model", "D", "model width, overriding detection", "detected"),
    Flag("--seq-len", "seq_len", "S", "sequence length, overriding detection", "detected"),
    Flag("--vocab", "vocab", "V", "vocabulary size, overriding detection", "detected"),
    Flag("--gpus", "gpus", "SPEC", "GPUs to sample: all, or a comma-separated list of indices (0,1) or UUIDs (GPU-<uuid>)",
         "the GPUs the process's CUDA context uses, else CUDA_VISIBLE_DEVICES, else all"),
    Flag("--memory-snapshot-step", "memory_snapshot_step", "N", "write a CUDA memory snapshot at this step",
         "none"),
    Flag("--no-tap", "tap", "", "do not pick up series from TensorBoard, W&B, MLflow, HF Trainer or Lightning",
         "taps on"),
    Flag("--max-series", "max_series", "N", f"most user series recorded (tm.emit and taps), 1 to "
         f"{MAX_SERIES_LIMIT:,}; new names past it are dropped with a warning", "256"),
    Flag("--grid-gco2-per-kwh", "grid_gco2_per_kwh", "X", "declared grid carbon intensity, gCO2 per kWh, "
         f"0 to {MAX_GRID_GCO2_PER_KWH:g}, for a carbon figure; needs --grid-source", "none (no carbon figure)"),
    Flag("--grid-source", "grid_source", "TEXT", "where the grid intensity comes from (a utility report)", "none"),
    Flag("--alert", "alerts", "RULES", "alerts that act, CONDITION[:ACTION] joined by commas: conditions nan, spike, "
         "throughput, starved, memory[=F], hang[=S], SERIES>X, SERIES<X; actions show, notify, stop, "
         "checkpoint-stop (nan:stop,hang=120:notify)", "none"),
    Flag("--resume", "resume", "RUN", "continue a saved run as one training: last (the default), a run name or a "
         "run folder; its counts, budget progress and lost work carry on (docs/spec.md section 22)", "none",
         bare="last"),
)
"""Every ``%%trainmeter`` flag, in help order (tests/test_options.py checks it covers every option)."""


def flags_help() -> str:
    """The ``%%trainmeter`` flags, one per line: flag, value, what it does (valid values, units), default."""
    lines = ["%%trainmeter [flags]: run the cell monitored. Flags (each at most once):"]
    heads = [f"{f.flag} {f'[{f.metavar}]' if f.bare else f.metavar}".rstrip() for f in FLAGS]
    width = max(len(h) for h in heads)
    for head, f in zip(heads, FLAGS, strict=True):
        excl = [g.flag for g in FLAGS if f.group and g.group == f.group and g is not f]
        also = f"; not with {' or '.join(excl)}" if excl else ""
        lines.append(f"  {head.ljust(width)}  {f.help}{also} [default: {f.default}]")
    return "\n".join(lines)


def _range_text(flag: str) -> str:
    low, high, what = RANGES[flag]
    top = f"{high:,}" if isinstance(high, int) and high < 10**7 else f"{high:.0e}".replace("e+", "e")
    return f"{what}, from {low:,} to {top}"


def _count(value: Any, flag: str, integer: bool = True) -> Any:
    """A budget (``20B``, ``1.5k``, ``1e21``) within its range in :data:`RANGES`."""
    if value is None:
        return None
    if isinstance(value, str) and value != value.strip():
        raise ValueError(f"invalid value {value!r} for {flag}: remove the spaces around it")
    number = parse_size(value, flag=flag, integer=integer)
    low, high, _ = RANGES[flag]
    if not low <= number <= high:
        raise ValueError(f"invalid value {value!r} for {flag}: expected {_range_text(flag)}")
    return int(number) if integer else number


def _whole(value: Any, flag: str) -> int | None:
    """A whole number (an int, a whole float, or ASCII digits) within its range in :data:`RANGES`; never a bool."""
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _DIGITS.match(value):
        number = int(value)
    low, high, _ = RANGES[flag]
    if number is None or not low <= number <= high:
        raise ValueError(f"invalid value {value!r} for {flag}: expected a whole number of {_range_text(flag)}")
    return number


def _seconds(value: Any) -> float:
    """``--interval``: seconds, 0.1 to 86400 (a number, or its decimal digits); never a bool."""
    if value is None:
        return 10.0
    plain = isinstance(value, (int, float)) and not isinstance(value, bool)
    number = float(value) if plain or (isinstance(value, str) and _DECIMAL.match(value)) else math.nan
    if not math.isfinite(number) or not 0.1 <= number <= 86400:
        raise ValueError(f"invalid value {value!r} for --interval: expected seconds between 0.1 and 86400")
    return number


def _name(name: Any) -> str:
    """The run name: 1-80 of ``[A-Za-z0-9._-]``, starting with a letter or digit, valid as a file name on every OS."""
    if name is None:
        return "run"
    valid = "use 1-80 letters, digits, '.', '_' or '-', starting with a letter or digit"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"invalid run name {name!r}: {valid}")
    if name.endswith("."):
        raise ValueError(f"invalid run name {name!r}: it cannot end with '.' (Windows drops it); {valid}")
    if _WINDOWS_RESERVED.match(name):
        raise ValueError(f"invalid run name {name!r}: {name.split('.')[0].upper()} is a device name on Windows; "
                         f"{valid}, other than CON, PRN, AUX, NUL, COM0-9 or LPT0-9")
    return name


def _text(value: Any, flag: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"invalid value {value!r} for {flag}: expected text")
    return value


def _run_root(run_dir: Any) -> Path:
    """``--dir``: ``~`` expanded; an empty value is an error (it would write into the working directory)."""
    if run_dir is None:
        return DEFAULT_RUN_ROOT
    if not isinstance(run_dir, (str, Path)) or not str(run_dir).strip():
        raise ValueError(f"invalid value {run_dir!r} for --dir: expected a folder path, e.g. --dir runs")
    if "\x00" in str(run_dir):
        raise ValueError(f"invalid value {run_dir!r} for --dir: a path cannot hold a NUL character")
    return Path(run_dir).expanduser()


def make_options(*, name: str | None = None, budget_tokens: Any = None, budget_steps: Any = None,
                 budget_flops: Any = None, budget_samples: Any = None, run_dir: Any = None, interval_s: Any = None,
                 widget: bool = True, convention: str | None = None, peak_tflops: Any = None, peak_source: str | None = None,
                 layers: Any = None, d_model: Any = None, seq_len: Any = None, vocab: Any = None,
                 gpus: str | None = None, memory_snapshot_step: Any = None, tap: bool = True,
                 grid_gco2_per_kwh: Any = None, grid_source: str | None = None, max_series: Any = None,
                 alert: Any = None, resume: Any = None) -> MonitorOptions:
    """Validate user input and build :class:`MonitorOptions`; ``ValueError`` naming a bad value and what is valid."""
    from trainmeter.alerts.extension import parse_rules  # each --alert rule parsed and written back
    from trainmeter.compute.peaks import validate_peak  # the one peak check: a peak the flag takes, the wing uses

    for flag, value in (("widget", widget), ("tap", tap)):
        if not isinstance(value, bool):
            raise ValueError(f"invalid value {value!r} for {flag}: expected True or False")
    run_name = _name(name)
    budgets = [b for b in (budget_tokens, budget_steps, budget_samples, budget_flops) if b is not None]
    if len(budgets) > 1:
        raise ValueError("give at most one budget: --budget-tokens, --budget-steps, --budget-samples or --budget-flops")
    interval = _seconds(interval_s)
    flops = _count(budget_flops, "--budget-flops", integer=False)
    peak = validate_peak(peak_tflops, _text(peak_source, "--peak-source"))
    conv = _text(convention, "--convention")
    if conv is not None:
        from trainmeter.compute.flops import validate_convention

        conv = validate_convention(conv)
    gpu_spec = _gpus(gpus)
    grid = _grid(grid_gco2_per_kwh, _text(grid_source, "--grid-source"))
    root = _run_root(run_dir)
    return MonitorOptions(name=run_name, budget_tokens=_count(budget_tokens, "--budget-tokens"),
                          budget_steps=_count(budget_steps, "--budget-steps"), budget_flops=flops,
                          budget_samples=_count(budget_samples, "--budget-samples"),
                          run_root=root, interval_s=interval, widget=bool(widget), convention=conv,
                          peak_tflops=peak, peak_source=peak_source, layers=_whole(layers, "--layers"),
                          d_model=_whole(d_model, "--d-model"), seq_len=_whole(seq_len, "--seq-len"),
                          vocab=_whole(vocab, "--vocab"), gpus=gpu_spec,
                          memory_snapshot_step=_whole(memory_snapshot_step, "--memory-snapshot-step"), tap=bool(tap),
                          grid_gco2_per_kwh=grid, grid_source=str(grid_source).strip() if grid is not None else None,
                          max_series=_whole(max_series, "--max-series") or 256,
                          alerts=tuple(r.text for r in parse_rules(alert)), resume=_resume(resume, root))


def _resume(spec: Any, root: Path) -> Path | None:
    """``--resume``: ``last``, a run name or a run folder, resolved to the parent's folder (lineage/parent.py)."""
    if spec is None or spec is False:
        return None
    from trainmeter.lineage.parent import resolve_parent

    return resolve_parent("last" if spec is True else spec, root)


def _grid(gco2_per_kwh: Any, source: str | None) -> float | None:
    if gco2_per_kwh is None:
        if source is not None:
            raise ValueError("--grid-source was given without --grid-gco2-per-kwh: give both, e.g. "
                             "--grid-gco2-per-kwh 350 --grid-source 'utility 2024 report'")
        return None
    try:
        value = math.nan if isinstance(gco2_per_kwh, bool) else float(gco2_per_kwh)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= MAX_GRID_GCO2_PER_KWH:
        raise ValueError(f"invalid value {gco2_per_kwh!r} for --grid-gco2-per-kwh: expected grams CO2 per kWh "
                         f"between 0 and {MAX_GRID_GCO2_PER_KWH:g}, e.g. 350")
    if not source or not str(source).strip():
        raise ValueError(f"--grid-gco2-per-kwh {gco2_per_kwh} needs --grid-source TEXT saying where the "
                         "intensity comes from (a utility report, a grid operator's figure)")
    return value


def _gpus(gpus: Any) -> str | None:
    """``--gpus``: ``all`` or a list of device indices / UUIDs, each once, as its canonical text (``"0,1"``)."""
    if gpus is None:
        return None
    from trainmeter.gpu.selection import VALID_GPUS_TEXT, parse_gpus

    if isinstance(gpus, str) and gpus != gpus.strip():
        raise ValueError(f"invalid value {gpus!r} for --gpus: remove the spaces around it; {VALID_GPUS_TEXT}")
    if not isinstance(gpus, (str, int, list, tuple)):
        raise ValueError(f"invalid value {gpus!r} for --gpus: {VALID_GPUS_TEXT}")
    spec = parse_gpus(gpus)
    if spec is None or spec.all:
        return "all"
    given = gpus.split(",") if isinstance(gpus, str) else ([gpus] if isinstance(gpus, int) else list(gpus))
    if len(spec.entries) < len(given):
        twice = sorted({str(e) for e in spec.entries if [_gpu_key(g) for g in given].count(_gpu_key(e)) > 1})
        raise ValueError(f"invalid value {gpus!r} for --gpus: {', '.join(twice) or 'a device'} named twice; "
                         "name each device once")
    big = [e for e in spec.entries if isinstance(e, int) and e > MAX_GPU_INDEX]
    if big:
        raise ValueError(f"invalid value {gpus!r} for --gpus: device index {big[0]} is past {MAX_GPU_INDEX}; "
                         f"{VALID_GPUS_TEXT}")
    return ",".join(str(e) for e in spec.entries)


def _gpu_key(entry: Any) -> str:
    text = str(entry).strip()
    return str(int(text)) if text.isdigit() else text.lower()
