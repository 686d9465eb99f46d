"""A GAN (two optimizers, the discriminator called three times per iteration) and a generator of dict batches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us  # noqa: E402

BATCH = 8


def _gan():
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    disc = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    real_data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4 * BATCH, 6)),
                                            batch_size=BATCH)
    bce = nn.BCEWithLogitsLoss()
    d_losses, g_losses = [], []
    for (real,) in real_data:  # the DCGAN tutorial's loop
        fake = gen(torch.randn(BATCH, 4))
        opt_d.zero_grad()
        err_real = bce(disc(real), torch.ones(BATCH, 1))
        err_real.backward()
        err_fake = bce(disc(fake.detach()), torch.zeros(BATCH, 1))
        err_fake.backward()
        opt_d.step()
        d_losses.append(err_real.item() + err_fake.item())
        opt_g.zero_grad()
        err_g = bce(disc(fake), torch.ones(BATCH, 1))
        err_g.backward()
        opt_g.step()
        g_losses.append(err_g.item())
    return d_losses, g_losses


def test_a_gan_keeps_each_optimizers_loss_apart_and_says_what_its_sample_count_is(tmp_path, printed):
    with printed() as bare:
        _gan()
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        d_losses, g_losses = _gan()
    p = passport(m)
    assert m.steps == 4  # the discriminator's optimizer steps first: it is the primary one
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(d_losses, rel=1e-6)
    assert [v for _, v in logged(m, "train_loss.optimizer2")] == pytest.approx(g_losses, rel=1e-6)
    # the discriminator's own step sees the real and the generated batch: both are counted, and said so
    assert m.tokens == 4 * 2 * BATCH and m.token_unit == "samples"
    assert "called up to 2 times per step" in p["series_info"]["tokens_per_step"]["note"]
    assert printed_by_us(bare, ours) == [] and m.warnings == []


def _dict_batches(n: int, seq: int):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        ids = torch.randint(0, 64, (2, seq), generator=g)
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def test_dict_batches_from_a_generator_count_tokens_detect_s_and_a_model_in_eval_mode_counts(tmp_path, printed):
    transformers = pytest.importorskip("transformers")

    def train():
        transformers.set_seed(0)
        model = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=1, n_head=2))
        model.eval()  # fine-tuning with dropout off
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for batch in _dict_batches(5, 16):
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return model, losses  # the model outlives the run, as in a notebook: read at the end (no report before)

    with printed() as bare:
        _, bare_losses = train()
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model, losses = train()
    p = passport(m)
    assert losses == bare_losses
    assert m.steps == 5 and m.tokens == 5 * 2 * 16
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(losses, rel=1e-6)
    s_input = next(i for d in p["derivations"] if d["name"] == "flops_per_token.megatron" for i in d["inputs"]
                   if i["name"] == "S")
    assert s_input["value"] == 16 and s_input["provenance"] == "detected"
    assert p["time"]["eval_spans"] == 0  # eval() before training, then training: not an evaluation
    assert printed_by_us(bare, ours) == [] and m.warnings == []
