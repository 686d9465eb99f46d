"""The counted pass's model copy: a separate module tree on the meta device; the live module is never changed."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch
from torch import nn

from trainmeter.compute.counted_pass import model_copy, unwrap
from trainmeter.compute.flop_count import counted_flops_per_token


class Net(nn.Module):
    def __init__(self, config: SimpleNamespace | None = None) -> None:
        super().__init__()
        width = config.width if config is not None else 8
        self.config = config
        self.emb = nn.Embedding(16, width)
        self.body = nn.Linear(width, width)
        self.head = nn.Linear(width, 16)
        self.norm = nn.BatchNorm1d(width)
        self.register_buffer("seen", torch.zeros(1))
        self.cache = torch.ones(3)  # a plain tensor attribute

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.body(self.emb(idx)).mean(1)
        self.seen += 1  # in-place on a buffer: on the copy only
        return self.head(self.norm(h))


def _snapshot(model: nn.Module) -> tuple:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ids = [id(p) for p in model.parameters()]
    hooks = [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()]
    return state, ids, hooks, [p.grad for p in model.parameters()], model.training


def test_the_counted_pass_leaves_state_dict_hooks_and_parameter_identities_unchanged() -> None:
    model = Net()
    calls = []
    model.body.register_forward_hook(lambda *a: calls.append("hook"))
    before = _snapshot(model)
    result = counted_flops_per_token(model, (torch.randint(0, 16, (4, 5)),), method="real")
    assert result.flops_per_unit is not None and result.copy == "real copy"
    after = _snapshot(model)
    assert before[1:] == after[1:]
    assert before[0].keys() == after[0].keys()
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert calls == []  # the user's hook ran on no copy either
    meta = counted_flops_per_token(model, (torch.randint(0, 16, (4, 5)),), method="meta")
    assert meta.method == "meta" and meta.copy == "meta copy" and meta.total_flops == result.total_flops
    assert _snapshot(model)[1:] == before[1:] and calls == []


def test_meta_copy_shares_no_tensor_and_keeps_ties_and_requires_grad() -> None:
    model = Net()
    model.head.weight = model.emb.weight if model.head.weight.shape == model.emb.weight.shape else model.head.weight
    model.emb.weight.requires_grad_(False)
    model.tables = {"rotary": [torch.ones(4), (torch.zeros(2),)]}  # tensors nested in a plain attribute
    clone, how, why = model_copy(model)
    assert clone.tables["rotary"][0].device.type == "meta" and clone.tables["rotary"][1][0].device.type == "meta"
    assert why is None and how == "meta copy" and clone is not model
    assert all(p.device.type == "meta" for p in clone.parameters())
    assert all(b.device.type == "meta" for b in clone.buffers()) and clone.cache.device.type == "meta"
    live = {id(t) for t in [*model.parameters(), *model.buffers()]}
    assert not live & {id(t) for t in [*clone.parameters(), *clone.buffers()]}
    assert [p.requires_grad for p in clone.parameters()] == [p.requires_grad for p in model.parameters()]
    assert model.emb.weight.device.type == "cpu" and model.emb.weight.requires_grad is False


def test_compiled_and_ddp_style_wrappers_are_read_through() -> None:
    inner = Net()
    assert unwrap(SimpleNamespace(_orig_mod=inner)) is inner

    class DistributedDataParallel(nn.Module):
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

    assert unwrap(DistributedDataParallel(inner)) is inner


def test_an_uncopyable_model_is_rebuilt_from_its_config_on_the_meta_device() -> None:
    class Locked(Net):
        def __init__(self, config: SimpleNamespace) -> None:
            super().__init__(config)
            self.lock = threading.Lock()  # deepcopy cannot copy a lock

    model = Locked(SimpleNamespace(width=8))
    model.body.weight.requires_grad_(False)
    clone, how, why = model_copy(model)
    assert why is None and how == "rebuilt from its config on the meta device"
    assert all(p.device.type == "meta" for p in clone.parameters())
    assert clone.body.weight.requires_grad is False and clone.head.weight.requires_grad is True


def test_an_uncopyable_model_without_config_is_skipped_with_the_reason() -> None:
    model = Net()
    model.lock = threading.Lock()
    result = counted_flops_per_token(model, (torch.randint(0, 16, (4, 5)),), method="meta")
    assert result.flops_per_unit is None
    assert "meta pass skipped: the model could not be copied (TypeError" in result.reason
    assert "no config to rebuild it from" in result.reason


def test_the_copy_holds_no_trainer_or_data_the_live_module_links_to() -> None:
    class Trainer:  # any object of a class named Trainer: never deep-copied
        def __deepcopy__(self, memo):
            raise AssertionError("the trainer was copied")

    class Dataset(torch.utils.data.Dataset):
        def __deepcopy__(self, memo):
            raise AssertionError("the dataset was copied")

    model = nn.Linear(2, 2)
    trainer, data = Trainer(), Dataset()
    model._trainer, model.run, model.data = trainer, trainer, data
    clone, how, why = model_copy(model)
    assert why is None and how == "meta copy"
    assert clone._trainer is None and clone.run is None and clone.data is None
    assert model._trainer is trainer and model.run is trainer and model.data is data


class _Policy(nn.Module):
    """Holds its own optimizer and the distribution of its last forward (as stable-baselines3's policy does); trained
    through ``evaluate``, whose two outputs both enter the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.pi, self.v = nn.Linear(4, 2), nn.Linear(4, 1)
        self.optimizer = torch.optim.Adam(self.parameters())
        self.dist = SimpleNamespace(last=None)

    def evaluate(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.dist.last = torch.distributions.Categorical(logits=self.pi(obs), validate_args=False)
        return self.v(obs).squeeze(-1), self.dist.last.entropy()


def test_a_method_the_model_is_trained_through_is_counted_on_a_copy_without_its_optimizer_state() -> None:
    policy = _Policy()
    values, entropy = policy.evaluate(torch.ones(8, 4))
    (values.sum() + entropy.sum()).backward()
    policy.optimizer.step()  # its state holds tensors; the distribution's logits hold a graph
    clone, how, why = model_copy(policy)
    assert why is None and clone.optimizer is None and policy.optimizer.param_groups[0]["params"][0] is policy.pi.weight
    assert clone.dist.last.logits.device.type == "meta" and policy.dist.last.logits.device.type == "cpu"
    for method in ("meta", "real"):
        result = counted_flops_per_token(policy, (torch.ones(8, 4),), call="evaluate", method=method)
        # both heads, forward and weight gradient: (2 * 4 * 2 + 2 * 4 * 1) * 2 FLOP per sample
        assert result.flops_per_unit == 48 and result.unit == "samples", result.reason
        assert result.copy == f"{method} copy's evaluate"
