"""FLOPs and MFU wired into a real CPU run."""

import json
import time

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.conftest import tiny_model_and_data, train_steps  # noqa: E402


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def test_cpu_run_withholds_mfu_and_names_the_flag_that_enables_it(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root) as m:
        train_steps(model, opt, batches)
    c = _passport(m)["compute"]
    assert all(v is None for v in c["mfu"].values())
    assert "--peak-tflops X --peak-source TEXT" in c["mfu_missing"]
    assert c["convention"] is None and c["flops_per_token_range"][0] <= c["flops_per_token_range"][1]
    assert set(c["flops_per_token"]) == {"hf", "megatron", "titan", "embeddings"}
    assert c["counted_flops_per_token"] is not None


def test_declared_peak_gives_mfu_under_the_chosen_convention_with_derivation(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf", peak_tflops=0.001, peak_source="test figure",
                    budget_steps=40) as m:
        train_steps(model, opt, batches)
    p = _passport(m)
    c = p["compute"]
    assert list(c["flops_per_token"]) == ["hf"]
    trained = p["params"]["trained"]
    emb = 32 * 8
    assert c["flops_per_token"]["hf"] == 6 * (trained - emb)
    train_tps = p["throughput"]["train_tokens_per_s"]
    assert c["mfu"]["hf"] == pytest.approx(6 * (trained - emb) * train_tps / 1e9)
    assert c["peak"] == {"tflops": 0.001, "card": "declared", "dtype": "any", "source": "test figure",
                         "provenance": "declared"}
    assert c["progress"] == pytest.approx(0.5)
    assert c["eta_s"] > 0
    d = {x["name"]: x for x in p["derivations"]}["mfu[hf]"]
    assert d["formula"] == "F * tokens_per_s / (devices * peak)"
    assert {i["provenance"] for i in d["inputs"]} >= {"declared", "measured"}
    assert "<details>" in (m.run_dir / "passport.md").read_text()


def test_flags_override_the_detected_shape_as_declared(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="titan", layers=3, d_model=10, seq_len=7) as m:
        train_steps(model, opt, batches)
    derivs = {x["name"]: x for x in _passport(m)["derivations"]}
    inputs = {i["name"]: i for i in derivs["flops_per_token.titan"]["inputs"]}
    assert inputs["L"]["value"] == 3 and inputs["L"]["provenance"] == "declared"
    assert inputs["S"]["value"] == 7


def test_the_counted_flops_pass_adds_no_tokens_steps_or_losses(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=0.1) as m:
        for _i in range(4):
            train_steps(model, opt, batches)
    assert m.tokens == 80 * 24 and m.steps == 80
    assert m.series["train_loss"].stats().count == 80


def test_widget_tiles_show_the_mfu_range_and_a_flops_budget_needs_a_convention(run_root):
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=0.1, peak_tflops=0.001, peak_source="test",
                    budget_flops="1e9") as m:
        train_steps(model, opt, batches)
        time.sleep(0.15)  # past --interval: the next step reports, so MFU has a window
        train_steps(model, opt, batches[:1])
        assert m.reports >= 1
        state = build_state(facts_from_monitor(m.context))
    mfu_tile = next(t for t in state["tiles"] if t["id"] == "mfu")
    assert mfu_tile["label"] == "MFU (range over conventions)" and mfu_tile["text"].endswith("%")
    assert mfu_tile["derivation"]["formula"] == "F * tokens_per_s / (devices * peak)"
    p = _passport(m)
    derivs = {d["name"]: d for d in p["derivations"]}
    assert derivs["budget_tokens"]["value"] is None
    assert "--convention" in derivs["budget_tokens"]["missing"]


def test_replayed_run_shows_the_same_compute_tiles_and_progress(run_root):
    from trainmeter.widget.view_model import build_state, facts_from_run

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf", peak_tflops=0.001, peak_source="test",
                    budget_steps=40) as m:
        train_steps(model, opt, batches)
    run = tm.load(m.run_dir)
    state = build_state(facts_from_run(run.passport, run.events(), str(run.dir)))
    tile = next(t for t in state["tiles"] if t["id"] == "mfu")
    assert tile["value"] == pytest.approx(run.passport["compute"]["mfu"]["hf"])
    assert state["progress"]["fraction"] == pytest.approx(0.5) and state["progress"]["label"] == "20 / 40 steps"


def test_a_first_step_longer_than_the_interval_still_counts_flops_from_a_dict_batch(run_root):
    import torch.nn as nn
    import torch.nn.functional as F

    class DictLM(nn.Module):  # called as model(**batch), like a Hugging Face model
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32, 8)
            self.head = nn.Linear(8, 32)

        def forward(self, input_ids, labels):
            time.sleep(0.12)  # every step is longer than the report interval
            logits = self.head(self.emb(input_ids))
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    model = DictLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=0.1) as m:
        for _ in range(3):
            batch = {"input_ids": torch.randint(0, 32, (2, 5)), "labels": torch.randint(0, 32, (2, 5))}
            loss = model(**batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert m.tokens == 3 * 10
    c = _passport(m)["compute"]
    assert c["counted_flops_per_token"] is not None


def test_a_large_declared_peak_the_flag_accepts_gives_mfu(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf", peak_tflops=5e5, peak_source="test figure") as m:
        train_steps(model, opt, batches)
    c = _passport(m)["compute"]
    assert c["peak"]["tflops"] == 5e5 and c["mfu"]["hf"] is not None and c["mfu"]["hf"] > 0


class _PackedLM(torch.nn.Module):
    """A Hugging Face style LM taking position_ids (padding-free packing passes resets there)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 8)
        self.pos = torch.nn.Embedding(64, 8)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
                                          for _ in range(2))
        self.head = torch.nn.Linear(8, 32)

    def forward(self, input_ids, position_ids=None):
        h = self.emb(input_ids) + (self.pos(position_ids) if position_ids is not None else 0)
        for block in self.blocks:
            h = block(h)
        return torch.nn.functional.cross_entropy(self.head(h).flatten(0, 1), input_ids.flatten())


def _train_lm(model, opt, batches):
    for batch in batches:
        opt.zero_grad()
        model(**batch).backward()
        opt.step()


def _s_input(m, convention="megatron"):
    d = {x["name"]: x for x in _passport(m)["derivations"]}[f"flops_per_token.{convention}"]
    return {i["name"]: i for i in d["inputs"]}["S"]


def test_s_under_padding_free_packing_is_the_token_weighted_length_of_the_packed_sequences(run_root):
    lengths = [64, 40, 64, 23, 64]  # one row of 255 tokens, no sequence longer than 64
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    batches = [{"input_ids": torch.randint(0, 32, (1, 255)), "position_ids": positions} for _ in range(3)]
    model = _PackedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, convention="megatron") as m:
        _train_lm(model, opt, batches)
    s = _s_input(m)
    assert s["value"] == pytest.approx(sum(n * n for n in lengths) / 255) and s["value"] < 64
    assert "packed batch" in s["source"] and s["provenance"] == "detected"


def test_s_is_token_weighted_over_the_whole_run_not_taken_from_the_first_batch(run_root):
    g = torch.Generator().manual_seed(0)
    seqs = [24, 24, 40, 40, 40, 8]  # length-bucketed batches of 4 sequences
    batches = [{"input_ids": torch.randint(0, 32, (4, n), generator=g)} for n in seqs]
    model = _PackedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, convention="titan") as m:
        _train_lm(model, opt, batches)
    s = _s_input(m, "titan")
    assert s["value"] == pytest.approx(sum(4 * n * n for n in seqs) / sum(4 * n for n in seqs))
    assert "token-weighted over the run" in s["source"]
    assert m.tokens == sum(4 * n for n in seqs)


def test_while_a_packed_batch_is_read_from_the_device_the_attention_conventions_say_s_waits(run_root):
    from trainmeter.compute.extension import ComputeExtension

    class Pending:
        def result(self):
            return False  # the non-blocking copy has not finished

    lengths = [4, 4]
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    batches = [{"input_ids": torch.randint(0, 32, (1, 8)), "position_ids": positions} for _ in range(2)]
    model = _PackedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        _train_lm(model, opt, batches)
        ext = next(e for e in m.dispatch.extensions if isinstance(e, ComputeExtension))
        ext._prepare()
        ext._packed = Pending()
        ext._refresh_seq(force=True)
        assert ext.fpt["hf"].value is not None
        assert ext.fpt["megatron"].value is None and "S waits" in ext.fpt["megatron"].missing


def test_the_compute_wing_settles_an_ambiguous_name_by_the_gpu_wings_device_identity(tmp_path):
    """A family-only "NVIDIA H100": the PCI id NVML read (GPU wing's view) gives H100 SXM, matched again once
    NVML, opening on the sampler's thread, has it; until then the reason names the variants."""
    import dataclasses
    import threading

    from tests.fakes.gpu.fake import PROFILES, FakeNvml, fake_uuid, open_fake
    from trainmeter.compute.extension import ComputeExtension
    from trainmeter.core.clock import FakeClock
    from trainmeter.extensions import make_monitor
    from trainmeter.gpu.extension import GpuExtension
    from trainmeter.options import make_options

    clock = FakeClock(0.0)
    family = dataclasses.replace(PROFILES["h100_sxm"], name="NVIDIA H100", pci_device_id=0x2330)
    fake = FakeNvml([family], clock=clock)
    release = threading.Event()

    def slow_open(**_):
        release.wait(10.0)
        return open_fake(fake)

    compute, gpu = ComputeExtension(), GpuExtension(open_backend=slow_open, node_wide=True)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[compute, gpu]).start()
    try:
        compute.device_name, compute.dtype = "NVIDIA H100", "bf16"
        compute._device_key = (None, fake_uuid(0)[4:], "torch.bfloat16")  # torch's UUID has no GPU- prefix
        compute._match_peak()
        assert compute.peak is None and "H100 SXM, PCIe or NVL" in compute.peak_missing
        release.set()
        deadline = time.monotonic() + 10.0
        while m.extension("gpu").opening() and time.monotonic() < deadline:
            time.sleep(0.01)
        compute.on_report(None)
        assert compute.peak is not None and compute.peak.card == "H100 SXM" and compute.peak_missing is None
        assert m.extension("compute").peak.tflops == 989.5
    finally:
        release.set()
        m.finish("completed")


def test_the_tiles_read_the_compute_section_without_rendering_its_model_card(run_root, monkeypatch):
    from trainmeter.compute import card

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf", peak_tflops=0.001, peak_source="test") as m:
        train_steps(model, opt, batches)
        ext = next(e for e in m.extensions if e.name == "compute")
        full = card.compute_section(ext)
        assert card.compute_section(ext, markdown=False) == {k: v for k, v in full.items() if k != "markdown"}
        expected = card.compute_tiles(full, {d.name: d.to_dict() for d in ext.derivations()})

        def no_card(*args, **kwargs):
            raise AssertionError("the model card was rendered for a tile")

        monkeypatch.setattr(card, "render_compute_markdown", no_card)
        assert ext.tiles() == expected and ext.tiles()[0]["id"] == "mfu"
        monkeypatch.undo()
    assert "### Compute" in json.loads((m.run_dir / "passport.json").read_text())["compute"]["markdown"]
