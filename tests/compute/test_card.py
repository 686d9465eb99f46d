"""The MFU and FLOPs tiles and the model-card markdown (compute/card.py)."""

from __future__ import annotations

from trainmeter.compute.card import compute_tiles, render_compute_markdown
from trainmeter.compute.mfu import flops_spent, mfu
from trainmeter.core.provenance import Derivation, Input
from trainmeter.widget.view_model import badge_tiles

PEAK = Input(name="peak", value=1e15, unit="FLOP/s", provenance="declared", source="sheet")
PEAK_ROW = {"tflops": 1000.0, "card": "declared", "dtype": "bf16", "source": "sheet", "provenance": "declared"}


def _fpt(conv: str, value: float | None, provenance: str = "detected") -> Derivation:
    missing = None if value is not None else "needs --layers N --d-model D --seq-len S"
    return Derivation(name=f"flops_per_token.{conv}", formula="6 * N", value=value, unit="FLOP/token",
                      inputs=(Input(name="N", value=value and value / 6, unit="1", provenance=provenance),),
                      missing=missing)


def _figures(fpts: dict[str, Derivation], peak=PEAK, tokens=1_000_000):
    derived = {}
    for conv, f in fpts.items():
        derived[f"mfu[{conv}]"] = mfu(f, 5000.0, 1, peak)
        derived[f"flops_spent[{conv}]"] = flops_spent(f, tokens)
    section = {"convention": None, "mfu": {c: derived[f"mfu[{c}]"].value for c in fpts},
               "flops_spent": {c: derived[f"flops_spent[{c}]"].value for c in fpts}, "flops_required": {},
               "peak": PEAK_ROW if peak is not None else None,
               "mfu_missing": next((d.missing for n, d in derived.items() if n.startswith("mfu[") and d.missing),
                                   None)}
    by_name = {n: {**d.to_dict(), "name": n} for n, d in derived.items()}
    by_name.update({f.name: f.to_dict() for f in fpts.values()})
    return section, by_name


def _tiles(section, derivations):
    return {t["id"]: t for t in badge_tiles(compute_tiles(section, derivations))}


def test_a_named_convention_shows_its_mfu_works_it_out_and_puts_counted_second():
    section, derivs = _figures({"hf": _fpt("hf", 6e9), "counted": _fpt("counted", 5e9, "counted")})
    section["convention"] = "hf"
    tile = _tiles(section, derivs)["mfu"]
    assert tile["label"] == "MFU (hf)" and tile["value"] == derivs["mfu[hf]"]["value"]
    assert tile["derivation"]["name"] == "mfu[hf]" and "derivations" not in tile
    assert "counted (FlopCounterMode) 2.5%" in tile["sub"] and "1.0 PFLOP/s bf16" in tile["sub"]


def test_without_a_convention_the_tile_shows_the_range_and_the_popover_works_out_each_convention():
    section, derivs = _figures({"hf": _fpt("hf", 6e9), "megatron": _fpt("megatron", 7.2e9),
                                "titan": _fpt("titan", None), "counted": _fpt("counted", 5e9, "counted")})
    tile = _tiles(section, derivs)["mfu"]
    assert tile["label"] == "MFU (range over conventions)" and tile["text"] == "3.0%-3.6%"
    assert [d["name"] for d in tile["derivations"]] == ["mfu[hf]", "mfu[megatron]", "mfu[titan]"]
    assert "hf 3.0% · megatron 3.6%" in tile["sub"] and "not shown: titan" in tile["sub"]
    assert tile["derivations"][2]["missing"].startswith("FLOPs per token unknown")


def test_one_convention_with_a_value_is_one_percentage_not_a_range_of_one():
    section, derivs = _figures({"hf": _fpt("hf", 6e9), "titan": _fpt("titan", None)})
    assert _tiles(section, derivs)["mfu"]["text"] == "3.0%"


def test_flops_spent_takes_the_weakest_provenance_of_its_inputs_and_says_so():
    section, derivs = _figures({"hf": _fpt("hf", 6e9, "detected")})
    flops = _tiles(section, derivs)["flops"]
    assert flops["provenance"] == "detected"  # F detected x tokens counted: not "counted"
    assert flops["derivation"]["provenance_note"] == "detected: the weakest of its inputs (F detected, tokens counted)"
    section, derivs = _figures({"hf": _fpt("hf", 6e9, "counted")})
    assert _tiles(section, derivs)["flops"]["provenance"] == "counted"


def test_mfu_badge_is_the_declared_peak_when_that_is_the_weakest_input():
    section, derivs = _figures({"hf": _fpt("hf", 6e9, "counted")})
    assert _tiles(section, derivs)["mfu"]["provenance"] == "declared"


def test_a_missing_value_has_no_badge_and_names_the_input_that_would_enable_it():
    section, derivs = _figures({"hf": _fpt("hf", 6e9)}, peak=None)
    tile = _tiles(section, derivs)["mfu"]
    assert tile["value"] is None and "provenance" not in tile
    assert "--peak-tflops X --peak-source TEXT" in tile["missing"]
    section, derivs = _figures({"hf": _fpt("hf", None)})
    flops = _tiles(section, derivs)["flops"]
    assert "provenance" not in flops and "--layers N" in flops["missing"]


def test_flops_use_the_one_flops_formatter_in_the_tile_and_the_card():
    section, derivs = _figures({"hf": _fpt("hf", 7.28e8)})
    section["flops_required"] = {"hf": 7.28e11}
    assert _tiles(section, derivs)["flops"]["sub"] == "of 728 GFLOP required"
    s = {"hardware": {"devices": 1, "device": "cpu", "dtype": None}, "convention": "hf",
         "flops_per_token": {"hf": 7.28e8}, "counted_flops_per_token": 7.1e8, "flops_spent": {"hf": 7.28e14},
         "mfu": {}, "mfu_missing": None, "peak": None}
    md = render_compute_markdown(s, [flops_spent(_fpt("hf", 7.28e8), 1_000_000)])
    assert "728 MFLOP/token" in md and "710 MFLOP/token" in md and "728 TFLOP" in md
    assert "e+" not in md and "728B" not in md


def test_the_progress_label_shows_two_different_counts_differently():
    from trainmeter.compute.card import progress_bar

    prog = {"value": 1_100 / 1_150, "inputs": [{"name": "steps", "value": 1_100},
                                               {"name": "budget_steps", "value": 1_150}]}
    assert progress_bar({}, {"progress": prog})["label"] == "1,100 / 1,150 steps"
    prog = {"value": 0.99, "inputs": [{"name": "tokens_seen", "value": 1_100_000},
                                      {"name": "budget_tokens", "value": 1_150_000}]}
    assert progress_bar({}, {"progress": prog})["label"] == "1.10M / 1.15M tokens"


def test_a_run_in_samples_shows_the_counted_mfu_and_says_why_the_conventions_are_withheld():
    section, derivs = _figures({"counted": _fpt("counted", 5e9, "counted")})
    section.update(unit="samples", conventions_missing="the FLOPs conventions apply to transformer language models")
    tiles = _tiles(section, derivs)
    assert tiles["mfu"]["label"] == "MFU (counted)" and tiles["mfu"]["value"] == derivs["mfu[counted]"]["value"]
    assert "FLOPs conventions not shown: the FLOPs conventions apply" in tiles["mfu"]["sub"]
    assert tiles["flops"]["label"] == "FLOPs spent (counted)" and tiles["flops"]["value"] is not None


def test_markdown_states_total_trained_and_frozen_parameters_and_the_unit():
    section = {"hardware": {"devices": 1, "device": "cpu", "dtype": None}, "convention": None, "unit": "samples",
               "parameters": {"total": 26144, "trained": 896, "frozen": 25248},
               "conventions_missing": "not a language model", "flops_per_token": {},
               "counted_flops_per_token": 2.5e6, "flops_spent": {}, "mfu": {}, "mfu_missing": None, "peak": None}
    md = render_compute_markdown(section, [])
    assert "- Parameters: 26,144 total; 896 trained; 25,248 frozen" in md
    assert "Counted (FlopCounterMode, one step): 2.5 MFLOP/sample" in md
    assert "FLOPs conventions not shown: not a language model" in md


def test_the_mfu_tile_on_the_cpu_without_a_declared_peak_does_not_apply_here():
    from trainmeter.compute.card import compute_tiles

    section = {"hardware": {"device": "cpu"}, "peak": None, "convention": None, "mfu": {"hf": None},
               "mfu_missing": "the model is on the CPU: there is no dense datasheet peak to divide by"}
    mfu = compute_tiles(section, {})[0]
    assert mfu["value"] is None and mfu["not_here"] is True and "on the CPU" in mfu["missing"]
    on_gpu = compute_tiles({**section, "hardware": {"device": "NVIDIA H100"}}, {})[0]
    assert on_gpu["not_here"] is False


def test_a_samples_run_names_its_rates_samples_per_s_and_is_not_told_to_budget_tokens(run_root):
    import json

    import pytest

    torch = pytest.importorskip("torch")
    import trainmeter as tm
    from trainmeter.widget.show import replay

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tm.monitor(run_dir=run_root, peak_tflops=1, peak_source="a test's figure") as m:
        for _ in range(6):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    tiles = {t["id"]: t for t in replay(m.run_dir)[0]["tiles"]}
    assert tiles["tokens"]["label"] == "samples" and tiles["mfu"]["value"] is not None
    names = [i["name"] for d in [tiles["mfu"]["derivation"], tiles["throughput"]["derivation"]] for i in d["inputs"]]
    assert "samples_per_s" in names and not any("token" in n for n in names)
    assert tiles["mfu"]["derivation"]["formula"] == "F * samples_per_s / (devices * peak)"
    assert tiles["throughput"]["derivation"]["name"] == "train_samples_per_s"
    assert "--budget-samples N or --budget-steps N" in tiles["flops"]["sub"]
    assert "tokens_per_s" not in json.dumps(tiles["mfu"])
