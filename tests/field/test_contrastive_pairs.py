"""A contrastive pair batch in plain torch: a loss module called with a list of two feature dicts (anchor,
positive), as sentence-transformers calls its losses; every column's token ids count once (docs/spec.md section 2,
"The batch rule")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport, printed_by_us  # noqa: E402

VOCAB, DIM, BATCH, STEPS = 50, 8, 4, 6


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.proj = torch.nn.Linear(DIM, DIM)

    def forward(self, features):
        mask = features["attention_mask"].unsqueeze(-1).float()
        return self.proj((self.embed(features["input_ids"]) * mask).sum(1) / mask.sum(1))


class InBatchNegatives(torch.nn.Module):
    """Anchor i's positive is column 2's row i; the other rows are its negatives."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, features, labels=None):
        anchor, positive = (self.encoder(f) for f in features)
        scores = anchor @ positive.T
        return torch.nn.functional.cross_entropy(scores, torch.arange(len(scores)))


def _column(g, longest):
    seq = int(torch.randint(2, longest, (1,), generator=g))  # each column padded to its own longest row
    ids = torch.randint(1, VOCAB, (BATCH, seq), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}


def _train(monitored_dir=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    loss_fn = InBatchNegatives(Encoder())
    opt = torch.optim.AdamW(loss_fn.parameters(), lr=1e-2)
    seen = {"tokens": 0}

    def count(module, args, kwargs):  # the test's own count: every column's input_ids
        seen["tokens"] += sum(column["input_ids"].numel() for column in args[0])

    loss_fn.register_forward_pre_hook(count, with_kwargs=True)
    losses = []
    for _ in range(STEPS):
        loss = loss_fn([_column(g, 9), _column(g, 14)], None)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, seen["tokens"]


def test_a_contrastive_pair_batch_counts_both_columns_tokens_and_changes_no_loss(tmp_path, printed):
    with printed() as bare:
        bare_losses, bare_tokens = _train()
    with printed() as ours, tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        losses, tokens = _train()
    assert all(torch.equal(a, b) for a, b in zip(losses, bare_losses, strict=True))
    assert m.steps == STEPS and m.tokens == tokens == bare_tokens and m.token_unit == "tokens"
    p = passport(m)
    assert p["series_info"]["tokens_per_step"]["provenance"] == "counted"
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []
