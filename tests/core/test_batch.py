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
    from trainmeter.core.batch import BatchCounter

    counter = BatchCounter()
    ids = torch.zeros(4, 6, dtype=torch.long)
    assert counter.count((ids,), {}) == (24, "tokens")
    assert counter.count((torch.ones(4, 6, dtype=torch.long),), {}) == (24, "tokens")
    assert counter.count((torch.zeros(4, 6),), {}) == (4, "samples")  # same shape, other dtype
    assert counter.count((torch.zeros(2, 6, dtype=torch.long),), {}) == (12, "tokens")
    assert counter.count((torch.zeros(4, 6, dtype=torch.bool),), {}) == (4, "samples")
    assert counter.count((torch.zeros(4, 6, dtype=torch.long),), {"mask": torch.zeros(9, 9)}) == (9, "samples")
    assert counter.count((torch.zeros(4, 6, dtype=torch.long),), {}) == (24, "tokens")


def test_the_last_counted_batch_s_is_dim_1_of_its_token_ids_and_0_without_one():
    from trainmeter.core.batch import BatchCounter, batch_seq

    counter = BatchCounter()
    counter.count((torch.zeros(4, 24, dtype=torch.long),), None)
    assert counter.seq == 24
    counter.count((torch.zeros(4, 24, dtype=torch.long),), None)  # the cached positional path says it too
    assert counter.seq == 24
    counter.count((), {"input_ids": torch.zeros(2, 40, dtype=torch.long)})
    assert counter.seq == 40
    counter.count((torch.zeros(4, 3, 8, 8),), None)  # images: samples, no S
    assert counter.seq == 0
    assert batch_seq((), {"input_ids": torch.zeros(2, 7, dtype=torch.long)}) == 7
    assert batch_seq((torch.zeros(9, dtype=torch.long),), None) == 0


def test_counters_keep_their_own_last_batch_and_count_batch_keeps_none():
    from trainmeter.core.batch import BatchCounter

    one, two = BatchCounter(), BatchCounter()
    one.count((torch.zeros(4, 24, dtype=torch.long),), None)
    two.count((torch.zeros(2, 8, dtype=torch.long),), None)
    assert count_batch((torch.zeros(3, 5, dtype=torch.long),), None) == (15, "tokens")
    assert (one.seq, two.seq) == (24, 8)
    assert one.count((torch.ones(4, 24, dtype=torch.long),), None) == (96, "tokens") and one.seq == 24


def test_token_key_names_the_keyword_a_keyword_only_batch_is_counted_by():
    from trainmeter.core.batch import token_key

    ids = torch.zeros(2, 16, dtype=torch.long)
    assert token_key({"input_ids": ids, "labels": ids}) == ("input_ids", ())
    assert token_key({"labels": ids, "x": ids}) == ("x", ("input_ids", "idx", "tokens", "input"))
    assert token_key({"input_ids": [ids], "x": ids}) is None  # not a tensor itself: count_batch's general path
    assert token_key({"labels": ids}) is None
