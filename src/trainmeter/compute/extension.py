"""The compute extension: FLOPs per token, MFU, FLOPs spent and required, progress and ETA (docs/spec.md section 5).

Reads the trained model once it is known (after the first optimizer step). Runs inside reports (the count's copy on
the training thread, its pass on the report worker).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainmeter.compute.view import ComputeView
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.provenance import Derivation, Input
from trainmeter.core.throughput import BATCH_CALL, ratio, tokens_missing
from trainmeter.lineage.view import training_counts
from trainmeter.sizes import format_percent

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext


class ComputeExtension(ExtensionBase):
    """FLOPs and MFU for one run (name ``compute``; publishes :class:`~trainmeter.compute.view.ComputeView`)."""

    name, report_on_worker = "compute", True  # a steady report's on_report: on the report worker (section 20)

    def __init__(self) -> None:
        self._m: RunContext | None = None
        self.fpt: dict[str, Derivation] = {}
        self.counted: Derivation | None = None
        self.peak: Any = None
        self.peak_missing: str | None = None
        self.device_name: str | None = None
        self._device_key: tuple[Any, ...] = (None, None, None, None)  # torch's memory, UUID, dtype as read, SMs
        self._await_identity = False  # the peak waits for the GPU wing's device identity (NVML opening)
        self.dtype: str | None = None
        self.run_dtype: str | None = None
        self.conventions_missing: str | None = None
        self.params: dict[str, int] | None = None
        self._shape: Any = None  # the model's shape as read (S refreshed at reports)
        self._packed: Any = None  # the example's packing read (compute/shape_module.py), until read
        self._seq_fixed = False  # S came from packed sequences: the batch shapes do not give it
        self._seq_used: Any = None
        self._ready = False
        self._stopped = False
        self._ahead: Any = None  # compute/counted_pass.CountOnWorker: the counted pass, on the report worker
        self.derived: dict[str, Derivation] = {}

    def start(self, monitor: RunContext) -> None:
        """Remember the run; a declared peak is parsed now."""
        self._m = monitor
        o = monitor.options
        if o.peak_tflops is not None:
            from trainmeter.compute.mfu import parse_peak_args

            self.peak = parse_peak_args(o.peak_tflops, o.peak_source)

    def stop(self) -> None:
        """Mark the end: the final report reads the model if no report did yet (its cost is ``reporting``)."""
        self._stopped = True

    def after_fork_in_child(self, monitor: RunContext) -> None:
        """In a forked child: its model is read afresh (the parent's count stays the parent's: spec section 19)."""
        self.__init__()  # type: ignore[misc]  # every field as a new wing's
        self.start(monitor)

    def view(self) -> ComputeView:
        """The figures other wings read (MFU, FLOPs spent, FLOP/token, the peak); any thread."""
        conv = self._m.options.convention if self._m is not None else None
        unit = (self._m.token_unit if self._m is not None else None) or "tokens"  # a label where no batch was read
        return ComputeView(convention=conv, flops_per_token=self.fpt, counted=self.counted, peak=self.peak,
                           peak_missing=self.peak_missing, derived=self.derived, unit=unit,
                           conventions_missing=self.conventions_missing)

    def _prepare(self, final: bool = False) -> None:
        m = self._m
        model = m.model_ref() if m is not None and m.model_ref is not None else None
        if m is None or model is None:
            return
        if not final and getattr(m.probes, "example_pending", False):
            return  # the first training batch is not kept yet: S and the counted FLOPs need it
        self._ready = True
        from trainmeter.compute.counted_pass import CountOnWorker
        from trainmeter.compute.flops import override_shape, shape_from_module
        from trainmeter.compute.shape_module import packed_read
        from trainmeter.core.batch import batch_seq  # as the run reads the batch (its columns' token-weighted S)

        o, probes = m.options, m.probes
        shape = shape_from_module(model)
        total, trained = shape.n_params, shape.n_trained_params  # docs/spec.md section 5, "Frozen weights"
        trained = total if trained is None else trained
        self.params = None if total is None else {"total": int(total), "trained": int(trained),
                                                  "frozen": int(total - trained)}  # type: ignore[operator]
        example = getattr(probes, "example", None)
        seq = (round(batch_seq(example[0], example[1])) or None) if example else None
        if seq is not None and o.seq_len is None:
            shape = shape.with_value("seq_len", seq, "detected", "batch shape (dim 1 of the token ids)")
        self._shape = override_shape(shape, layers=o.layers, d_model=o.d_model, seq_len=o.seq_len, vocab=o.vocab)
        self.conventions_missing = _not_a_language_model(m.token_unit, self._shape)
        if o.seq_len is None and self.conventions_missing is None:
            self._packed = packed_read(example)
        self._refresh_seq(force=True)
        self._ahead = CountOnWorker()  # the pass on the report worker where it can run there (compute/counted_pass.py)
        self._ahead.begin(m, model, probes)
        self._take_count(final=self._stopped)
        self._detect_device(model, probes)

    def _refresh_seq(self, force: bool = False) -> None:
        """Set S (packed sequences, else the run's token-weighted mean) and recompute the conventions on a change."""
        m, shape = self._m, self._shape
        if m is None or shape is None:
            return
        o = m.options
        from trainmeter.compute.flops import FORMULAS, flops_per_token

        conv = o.convention  # canonical: options.py checked it
        if self.conventions_missing is not None:  # the chosen convention withheld for a model it does not describe
            if force:
                self.fpt = {} if conv is None else {conv: Derivation(
                    name=f"flops_per_token.{conv}", formula=FORMULAS[conv], value=None, unit="FLOP/token",
                    missing=self.conventions_missing)}
            return
        if o.seq_len is None:
            packed = self._packed.result() if self._packed is not None else None
            if packed is False:  # the device copy of position_ids runs: S waits for it
                shape = shape.with_value("seq_len", None, "assumed", "")
            elif packed is not None:
                self._packed = None  # read once
                self._shape = shape = shape.with_value(
                    "seq_len", packed[0], "detected",
                    f"packed batch: token-weighted length of its {packed[1]} sequences (sum l^2 / sum l)")
                self._seq_fixed = True
            elif not self._seq_fixed:
                weighted = getattr(getattr(m.probes, "seq_weights", None), "mean", lambda _t: None)(m.tokens)
                if weighted is not None:
                    shape = shape.with_value("seq_len", weighted[0], "detected", f"token-weighted over the run's "
                                             f"{weighted[1]} tokens (dim 1 of the token ids)")
        if not force and shape.seq_len == self._seq_used:
            return
        self._seq_used = shape.seq_len
        result = flops_per_token(shape, conv)
        fpt = {conv: result} if isinstance(result, Derivation) and conv else dict(result)
        if shape.seq_len is None and self._packed is not None:  # waiting for the device copy, never for a sync
            why = "S waits for the packed batch's sequence lengths, copied from the device (read at a later report)"
            fpt = {c: d if d.value is not None else replace(d, missing=why) for c, d in fpt.items()}
        self.fpt = fpt

    def _take_count(self, final: bool) -> None:
        counted = self._ahead.take(self._m, final) if self._m is not None and self._ahead is not None else None
        if counted is not None:
            self.counted = counted.derivation()

    def _detect_device(self, model: Any, probes: Any) -> None:
        from trainmeter.compute.calibrate import run_dtype
        from trainmeter.compute.peaks import normalize_dtype

        param = next(iter(model.parameters()), None)
        dtype = getattr(probes, "autocast_dtype", None) or (str(param.dtype) if param is not None else None)
        with contextlib.suppress(ValueError):  # a dtype without a peak column (float32): none
            self.dtype = normalize_dtype(dtype) if dtype else None
        on_cuda = param is not None and param.device.type == "cuda"
        props, tf32 = None, False
        if on_cuda:
            torch = sys.modules["torch"]
            self.device_name = torch.cuda.get_device_name(param.device)
            props = torch.cuda.get_device_properties(param.device)
            tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        self.run_dtype = run_dtype(dtype, on_cuda, tf32)
        self._device_key = (getattr(props, "total_memory", None), getattr(props, "uuid", None), dtype,
                            getattr(props, "multi_processor_count", None))  # SMs: a MIG instance's own (spec section 5)
        if self.peak is None:  # else declared
            self._match_peak()

    def _match_peak(self) -> None:
        """The peak, settled by the GPU wing's device identity (compute/peaks.py); retried while NVML opens."""
        from trainmeter.compute.peaks import peak_for_run

        self.peak, self.peak_missing, self._await_identity = peak_for_run(
            self.device_name, self.dtype, *self._device_key, gpu=self._m.extension("gpu") if self._m else None)

    def _update(self, whole_run: bool = False) -> None:
        """Recompute every figure: at a report over its window, at the end over the whole run."""
        m = self._m
        if m is None:
            return
        from trainmeter.compute.calibrate import of_achievable
        from trainmeter.compute.flops import flops_input, with_counted
        from trainmeter.compute.mfu import flops_spent, mfu, mfu_name

        out: dict[str, Derivation] = {}
        tokens, train_tps, session_tps = self._rates(whole_run)
        unit = m.token_unit or "tokens"  # a label only where no batch was read: every figure of it is None
        per_conv = {conv: flops_input(conv, f, unit) for conv, f in with_counted(self.fpt, self.counted).items()}
        for conv, f in per_conv.items():
            for pace, tps in (("training-only", train_tps), ("session", session_tps)):
                out[mfu_name(conv, pace)] = mfu(f, tps, 1, self.peak, pace=pace,  # type: ignore[arg-type]
                                                peak_missing=self.peak_missing, unit=unit)
            out[f"flops_spent[{conv}]"] = flops_spent(f, tokens, unit=unit)
        ceiling = self.ceiling()  # of_achievable: model FLOP/s over the measured ceiling, once tm.calibrate() ran
        if ceiling is not None:
            out.update({f"of_achievable[{conv}]": of_achievable(f, train_tps, ceiling, unit=unit)
                        for conv, f in per_conv.items()})
        out.update(self._budget(per_conv, whole_run=whole_run))
        self.derived = {name: replace(d, name=name) for name, d in out.items()}

    def _rates(self, whole_run: bool = False) -> tuple[int | None, float | None, float | None]:
        """Tokens seen, training-only and session tokens/s: over the last report window, or over the whole run."""
        m = self._m
        tokens = m.tokens if m.token_unit is not None else None  # no batch read: unknown, never 0 (spec section 2)
        if whole_run:
            return tokens, ratio(tokens, m.phases.totals_s.get("train", 0.0)), ratio(tokens, m.elapsed_s())
        interval, session = m.interval, m.session
        return (tokens, interval.train_tokens_per_s if interval else None,
                session.session_tokens_per_s if session else None)

    def ceiling(self) -> Any:
        """The last ``tm.calibrate()``'s ceiling for this run's device and dtype, or ``None``; any thread."""
        from trainmeter.compute.calibrate import last_calibration

        cal = last_calibration()
        c = cal.ceiling(self.run_dtype) if cal is not None else None
        return c if c is not None and c.device_name == (self.device_name or "cpu") else None

    def tiles(self) -> list[dict[str, Any]]:
        """MFU and FLOPs tiles for the widget (publisher thread; reads only)."""
        from trainmeter.compute.card import compute_section, compute_tiles

        return compute_tiles(compute_section(self, markdown=False), {d.name: d.to_dict() for d in self.derivations()})

    def progress_bar(self, recent: Any = None) -> dict[str, Any] | None:
        """The header's progress bar, live: the current step and tokens; the ETA by the one rule (compute/eta.py):
        at the ``recent`` pace (the publisher's recent figures) when given, else at the last window's."""
        from trainmeter.compute.card import progress_bar

        if self._m is None:
            return None
        figures = self._budget({}, recent=recent)
        return progress_bar({"unit": self._m.token_unit}, {name: d.to_dict() for name, d in figures.items()})

    def text_fields(self) -> dict[str, Any]:
        """``mfu`` (chosen convention only) and progress for the text line."""
        prog = getattr(self.derived.get("progress"), "value", None)
        out = {"mfu": getattr(self.view().mfu(), "value", None),
               "progress": None if prog is None else format_percent(prog)}  # as the widget's progress bar
        return {key: value for key, value in out.items() if value is not None}

    def _budget(self, per_conv: dict[str, Input], *, recent: Any = None,
                whole_run: bool = False) -> dict[str, Derivation]:
        """Progress, budget in tokens, ETA (the one rule) and the session ETA, FLOPs required by ``per_conv``'s F;
        over the training when resumed (docs/spec.md section 22)."""
        from trainmeter.compute.eta import REPORT_WINDOW, WHOLE_RUN, Pace, eta, eta_s, recent_pace
        from trainmeter.compute.mfu import budget_tokens, flops_required, progress

        m = self._m
        tokens, train_tps, session_tps = self._rates(whole_run)
        steps, tokens = training_counts(m, m.steps, tokens)
        out: dict[str, Derivation] = {}
        o = m.options
        chosen = self.fpt.get(o.convention) if o.convention is not None and self.fpt else None
        if o.budget_steps is not None:
            out["progress"] = progress(steps, o.budget_steps, steps=True)
            tps = tokens / steps if steps and tokens is not None else None
            budget = budget_tokens(steps=o.budget_steps, tokens_per_step=tps)
        elif o.budget_tokens is not None:
            budget = budget_tokens(tokens=o.budget_tokens)
            out["progress"] = progress(tokens, budget)
        elif o.budget_samples is not None:  # a budget in the run's counted unit only (docs/spec.md section 5)
            budget = budget_tokens(tokens=o.budget_samples)
            budget = replace(budget, inputs=tuple(replace(i, source="--budget-samples") for i in budget.inputs))
            out["progress"] = progress(tokens, budget)
            if m.token_unit not in (None, "samples"):
                why = f"--budget-samples counts samples; this run counts {m.token_unit}: give --budget-tokens"
                budget, out["progress"] = (replace(d, value=None, missing=why) for d in (budget, out["progress"]))
        elif o.budget_flops is not None:
            budget = budget_tokens(chosen, flops=o.budget_flops)
            if chosen is None:  # FLOPs per token differ by convention: do not pick one silently
                budget = replace(budget, missing="a FLOPs budget needs --convention to convert FLOPs to tokens")
            out["progress"] = progress(tokens, budget)
        else:
            budget = None
        if budget is not None:
            out["budget_tokens"] = budget
            training = Pace(name="training-only", per_s=train_tps, window=WHOLE_RUN if whole_run else REPORT_WINDOW)
            out["eta_s"] = eta(tokens, budget, recent=recent_pace(recent), training=training)
            session = Pace(name="session", per_s=session_tps,
                           window="the whole run's wall clock" if whole_run else "the session's wall clock so far")
            out["eta_s.session"] = eta_s(tokens, budget, session)
            for conv, f in per_conv.items():
                out[f"flops_required[{conv}]"] = (flops_required(f, flops=o.budget_flops) if o.budget_flops is not None
                                                  else flops_required(f, tokens=budget))
        if tokens is None:  # no batch read: say why and the call that declares one (docs/spec.md section 6)
            why = tokens_missing(m)
            out.update({k: replace(d, missing=f"{d.missing}: {why}") for k, d in out.items()
                        if d.value is None and d.missing == "tokens seen unknown"})
        return out

    def on_report(self, report: Report) -> dict[str, Any]:
        """FLOPs per token, MFU and progress for the run log's interval record."""
        if not self._ready:
            self._prepare(final=self._stopped)
        else:
            self._refresh_seq()
        if self._ahead is not None:  # the count's result, once its pass ran
            self._take_count(final=report.final)
        if self._await_identity:
            self._match_peak()
        self._update()
        return {name: d.value for name, d in self.derived.items()}

    def passport_section(self) -> dict[str, Any]:
        """The passport's ``compute`` section (see docs/spec.md)."""
        from trainmeter.compute.card import compute_section

        if not self._ready and self._m is not None:
            self._prepare(final=True)  # no final report (it failed): read the model now
        self._take_count(final=True)
        self._refresh_seq()
        self._update(whole_run=True)  # the passport holds whole-run figures
        trained = self._m.params.get("trained") if self._m is not None else None
        if self.params is not None and trained is not None and trained <= self.params["total"]:
            # the one trained figure (params.trained: what the run's optimizers train; docs/spec.md section 2)
            self.params = {**self.params, "trained": trained, "frozen": self.params["total"] - trained}
        return compute_section(self)

    def derivations(self) -> list[Derivation]:
        """Every compute derivation (F by convention, counted, each derived figure): the passport's ``derivations``."""
        from trainmeter.compute.flops import with_counted

        return [*with_counted(self.fpt, self.counted).values(), *self.derived.values()]


def _not_a_language_model(unit: str | None, shape: Any) -> str | None:
    """Why the FLOPs conventions do not apply (docs/spec.md section 5, "Units"), or ``None`` when they do."""
    if unit is None:
        return (f"the FLOPs conventions count per token, and no batch was read (no token ids seen): declare each "
                f"batch with {BATCH_CALL}")
    if unit != "tokens":
        return ("the FLOPs conventions apply to transformer language models; this run is counted in samples "
                "(its batch has no token ids): FLOPs per sample come from the counted pass")
    if shape.vocab is None:
        return ("the FLOPs conventions apply to transformer language models; this model has no token embedding "
                "table (nn.Embedding) or config vocab: FLOPs per token come from the counted pass")
    return None
