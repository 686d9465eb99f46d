import pytest

torch = pytest.importorskip("torch")

from trainmeter.core.batch import count_batch  # noqa: E402


def test_integer_2d_ids_count_batch_times_sequence():
    assert count_batch((torch.zeros(4, 128, dtype=torch.long),), {}) == (512, "tokens")


def test_hugging_face_style_kwargs_are_read_first():
    kwargs = {"input_ids": torch.zeros(2, 16, dtype=torch.long), "attention_mask": torch.ones(2, 16)}
    assert count_batch((), kwargs) == (32, "tokens")


def test_packed_1d_ids_count_their_length():
    assert count_batch((torch.zeros(300, dtype=torch.int32),), None) == (300, "tokens")


def test_float_inputs_count_samples():
    assert count_batch((torch.randn(8, 3, 32, 32),), None) == (8, "samples")


def test_nested_dict_batch_and_no_tensor():
    assert count_batch(({"x": torch.zeros(3, 5, dtype=torch.long)},), None) == (15, "tokens")
    assert count_batch(("text", 3), None) is None


def test_a_positional_batch_like_the_last_one_is_counted_the_same_and_a_changed_one_is_recounted():
    import torch

    ids = torch.zeros(4, 6, dtype=torch.long)
    assert count_batch((ids,), {}) == (24, "tokens")
    assert count_batch((torch.ones(4, 6, dtype=torch.long),), {}) == (24, "tokens")
    assert count_batch((torch.zeros(4, 6),), {}) == (4, "samples")  # same shape, other dtype
    assert count_batch((torch.zeros(2, 6, dtype=torch.long),), {}) == (12, "tokens")
    assert count_batch((torch.zeros(4, 6, dtype=torch.bool),), {}) == (4, "samples")
    assert count_batch((torch.zeros(4, 6, dtype=torch.long),), {"mask": torch.zeros(9, 9)}) == (9, "samples")
    assert count_batch((torch.zeros(4, 6, dtype=torch.long),), {}) == (24, "tokens")


def test_the_last_counted_batch_s_is_dim_1_of_its_token_ids_and_0_without_one():
    from trainmeter.core.batch import batch_seq, last_seq

    count_batch((torch.zeros(4, 24, dtype=torch.long),), None)
    assert last_seq() == 24
    count_batch((torch.zeros(4, 24, dtype=torch.long),), None)  # the cached positional path says it too
    assert last_seq() == 24
    count_batch((), {"input_ids": torch.zeros(2, 40, dtype=torch.long)})
    assert last_seq() == 40
    count_batch((torch.zeros(4, 3, 8, 8),), None)  # images: samples, no S
    assert last_seq() == 0
    assert batch_seq((), {"input_ids": torch.zeros(2, 7, dtype=torch.long)}) == 7
    assert batch_seq((torch.zeros(9, dtype=torch.long),), None) == 0
