"""Reading the learning rate from param_groups: one value when groups agree, one per group when they differ."""

import torch

from trainmeter.optim.extension import group_label, read_lrs


def test_one_group_gives_lr_only():
    assert read_lrs([{"lr": 3e-4}]) == {"lr": 3e-4}


def test_groups_that_agree_give_lr_only():
    assert read_lrs([{"lr": 0.1}, {"lr": 0.1, "name": "head"}]) == {"lr": 0.1}


def test_groups_that_differ_are_listed_by_name_or_index():
    assert read_lrs([{"lr": 0.1, "name": "body"}, {"lr": 0.01}]) == {"lr": 0.1, "lr/body": 0.1, "lr/1": 0.01}


def test_tensor_rates_are_returned_as_tensors_and_never_compared():
    rate = torch.tensor(0.1)
    out = read_lrs([{"lr": rate}, {"lr": rate}])
    assert out["lr"] is rate and out["lr/0"] is rate and out["lr/1"] is rate


def test_a_name_that_is_not_a_string_falls_back_to_the_index():
    assert group_label({"name": 3}, 2) == "2" and group_label({"name": ""}, 0) == "0"
