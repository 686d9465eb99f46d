"""The launch's MFU: global tokens x F over the wall clock, over every rank's device (devices = world size)."""

from __future__ import annotations

import json

import pytest

from trainmeter.core.provenance import Input
from trainmeter.ranks.launch_mfu import RankCompute, launch_mfu, launch_mfu_figures
from trainmeter.ranks.merge import distributed_section, read_launch, write_launch_passport
from trainmeter.ranks.seating import this_node

F_HF = 6.0e9


def peak(flops_per_s: float, source: str = "H100 SXM dense bf16: datasheet") -> Input:
    return Input(name="peak", value=flops_per_s, unit="FLOP/s", provenance="detected", source=source)


def rank(k: int, *, tflops: float | None = 989.0, f: float = F_HF, wall_s: float = 2.0, train_s: float = 1.5,
         tokens: int = 1000) -> RankCompute:
    return RankCompute(label=f"rank {k}", tokens=tokens, wall_s=wall_s, train_s=train_s,
                       flops_per_token={"hf": f}, peak=peak(tflops * 1e12) if tflops else None,
                       peak_missing=None if tflops else "CPU")


def test_two_ranks_with_equal_peaks_divide_by_world_size_times_the_peak():
    d = launch_mfu([rank(0, wall_s=2.0), rank(1, wall_s=2.5)], 2, "hf")
    # 6e9 FLOP/token x 2000 tokens / 2.5 s (the longest rank) / (2 x 989e12 FLOP/s)
    assert d.value == pytest.approx(0.0024266936299292, rel=1e-12)
    assert d.formula == "F * global_tokens / wall_s / (devices * peak)" and d.missing is None
    inputs = {i.name: i for i in d.inputs}
    assert inputs["devices"].value == 2 and inputs["global_tokens"].value == 2000
    assert inputs["global_tokens"].provenance == "counted" and inputs["wall_s"].provenance == "measured"
    assert inputs["peak"].value == 989e12 and "H100 SXM" in inputs["peak"].source
    train = launch_mfu([rank(0, train_s=1.5), rank(1, train_s=2.0)], 2, "hf", pace="training-only")
    assert train.name == "distributed.mfu[hf]" and train.value == pytest.approx(0.0030333670374115, rel=1e-12)


def test_different_peaks_are_summed_rank_by_rank():
    d = launch_mfu([rank(0, tflops=989.0, wall_s=2.5), rank(1, tflops=312.0, wall_s=2.5)], 2, "hf")
    assert d.value == pytest.approx(4.8e12 / 1301e12, rel=1e-12)
    assert [i.name for i in d.inputs][-2:] == ["peak[rank 0]", "peak[rank 1]"]
    assert "sum over ranks of peak" in d.formula


def test_a_rank_without_a_peak_leaves_the_launch_mfu_missing_with_its_reason():
    d = launch_mfu([rank(0), rank(1, tflops=None)], 2, "hf")
    assert d.value is None and "no dense peak for rank 1 (CPU)" in d.missing and "--peak-tflops" in d.missing


def test_a_missing_rank_or_a_sharded_model_is_not_guessed():
    d = launch_mfu([rank(0)], 2, "hf", missing_ranks=[1])
    assert d.value is None and d.missing.startswith("no record from rank(s) 1 of world size 2")
    d = launch_mfu([rank(0, f=6e9), rank(1, f=3e9)], 2, "hf")
    assert d.value is None and "different FLOPs per token" in d.missing


def test_figures_cover_every_convention_a_rank_has():
    r0 = RankCompute(label="rank 0", tokens=10, wall_s=1.0, train_s=1.0, flops_per_token={"hf": 1.0, "titan": 2.0},
                     peak=peak(10.0))
    out = launch_mfu_figures([r0], 1)
    assert out["mfu_session"] == {"hf": 1.0, "titan": 2.0} and out["mfu_devices"] == 1
    assert {d.name for d in out["derivations"]} >= {"distributed.mfu.session[hf]", "distributed.mfu[titan]"}


def _seat(root, k, *, elapsed_s, peak_tflops=989.0):
    d = root / f"rank-{k}"
    d.mkdir(parents=True)
    ident = {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": this_node(), "pid": None}
    (d / "events.jsonl").write_text(json.dumps({"kind": "start"}) + "\n" + json.dumps(ident) + "\n")
    peak = {"tflops": peak_tflops, "card": "H100 SXM", "dtype": "bf16", "source": "datasheet",
            "provenance": "detected"}
    (d / "passport.json").write_text(json.dumps({
        "name": "ddp", "status": "completed", "steps": 10, "tokens": 1000, "elapsed_s": elapsed_s,
        "phases_s": {"train": elapsed_s - 0.5}, "token_unit": "tokens",
        "compute": {"convention": "hf", "flops_per_token": {"hf": F_HF}, "counted_flops_per_token": None,
                    "mfu": {"hf": 0.001}, "peak": peak, "mfu_missing": None},
        "distributed": {"role": "rank", "backend": "nccl"}}))


def test_the_merged_passport_holds_the_launch_mfu_with_its_derivation(tmp_path):
    _seat(tmp_path, 0, elapsed_s=2.0)
    _seat(tmp_path, 1, elapsed_s=2.5)
    section = distributed_section(read_launch(tmp_path))
    assert section["mfu_devices"] == 2 and section["mfu_convention"] == "hf"
    assert section["mfu_session"]["hf"] == pytest.approx(0.0024266936299292, rel=1e-12)
    assert section["mfu"]["hf"] == pytest.approx(1.2e13 / 2.0 / 1.978e15, rel=1e-12)
    d = next(d for d in section["derivations"] if d["name"] == "distributed.mfu.session[hf]")
    assert d["value"] == section["mfu_session"]["hf"] and {i["name"] for i in d["inputs"]} >= {"F", "devices"}
    passport = write_launch_passport(tmp_path, "ddp")
    assert "MFU over all 2 devices (wall clock): `hf` 0.2%" in (tmp_path / "passport.md").read_text()
    assert passport["distributed"]["mfu_session"] == section["mfu_session"]


def test_a_launch_of_one_rank_gets_the_runs_own_figure_from_the_one_mfu_formula():
    from trainmeter.compute.mfu import mfu

    one = launch_mfu([rank(0, wall_s=2.0, tokens=1000)], 1, "hf")
    run = mfu(F_HF, 1000 / 2.0, 1, 989e12, pace="session")
    assert one.value == pytest.approx(run.value, rel=1e-12) and one.missing is None
    no_peak = launch_mfu([rank(0, tflops=None)], 1, "hf")
    assert no_peak.value is None and "--peak-tflops X --peak-source TEXT" in no_peak.missing


def test_the_launch_takes_computes_conventions_names_and_f_provenance():
    """One rule with a run's (compute/flops.py): the named convention and ``counted``, ``counted`` badged counted,
    a convention's F at most detected; the names are compute's with the prefix ``distributed.``."""
    from trainmeter.compute.flops import mfu_conventions
    from trainmeter.compute.mfu import mfu_name

    r0 = RankCompute(label="rank 0", tokens=10, wall_s=1.0, train_s=1.0, peak=peak(10.0),
                     flops_per_token={"counted": 3.0, "hf": 1.0, "titan": 2.0})
    named = launch_mfu_figures([r0], 1, "hf")
    assert list(named["mfu"]) == ["hf", "counted"] == mfu_conventions(r0.flops_per_token, "hf")
    every = launch_mfu_figures([r0], 1)
    assert list(every["mfu"]) == ["hf", "titan", "counted"] and every["mfu"]["counted"] == 3.0
    f = {d.name: next(i for i in d.inputs if i.name == "F") for d in every["derivations"]}
    assert f[mfu_name("counted", "session", "distributed.")].provenance == "counted"
    assert f[mfu_name("titan", "training-only", "distributed.")].provenance == "detected"


def test_a_passport_read_back_gives_the_ranks_counted_f_and_its_peak():
    from trainmeter.ranks.launch_mfu import rank_compute

    row = {"tflops": 989.0, "card": "H100 SXM", "dtype": "bf16", "source": "datasheet", "provenance": "declared"}
    r = rank_compute("rank 0", {"tokens": 5, "compute": {
        "flops_per_token": {"hf": 1.0}, "counted_flops_per_token": 2.0, "peak": row}})
    assert r.flops_per_token == {"hf": 1.0, "counted": 2.0}
    assert r.peak == Input(name="peak", value=989e12, unit="FLOP/s", provenance="declared",
                           source="H100 SXM dense bf16: datasheet")
    assert rank_compute("rank 0", {"compute": {"peak": {"tflops": "x"}}}).peak is None
