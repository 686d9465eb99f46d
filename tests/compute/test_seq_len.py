"""S for the attention terms: packed sequences from cu_seqlens / position_ids, token-weighted."""

from __future__ import annotations

import torch

from trainmeter.compute.shape_module import lengths_from, packed_read, weighted_length


def test_weighted_length_weights_each_sequence_by_its_tokens() -> None:
    assert weighted_length([64, 64]) == 64
    assert weighted_length([10, 30]) == (100 + 900) / 40
    assert weighted_length([]) is None and weighted_length([0]) is None


def test_lengths_from_position_id_resets_and_cu_seqlens_boundaries() -> None:
    assert lengths_from("position_ids", [[0, 1, 2, 0, 1, 0, 1, 2, 3]]) == [3, 2, 4]
    assert lengths_from("position_ids", [0, 1, 0]) == [2, 1]
    assert lengths_from("cu_seqlens", [0, 3, 5, 9]) == [3, 2, 4]


def test_a_packed_example_gives_the_token_weighted_length_of_its_sequences_not_the_row_length() -> None:
    lengths = [64, 40, 64, 23, 64]  # 255 tokens in one row
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    read = packed_read(((), {"input_ids": torch.zeros(1, 255, dtype=torch.long), "position_ids": positions}))
    s, sequences = read.result()
    assert sequences == 5 and s == sum(n * n for n in lengths) / 255 and s < 64
    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    assert packed_read(((), {"cu_seqlens": bounds})).result() == (s, 5)


def test_unpacked_position_ids_and_batches_without_them_are_not_packing() -> None:
    plain = torch.arange(8).repeat(3, 1)  # one sequence per row: dim 1 is S
    assert packed_read(((), {"position_ids": plain})).result() is None
    assert packed_read(((torch.zeros(2, 8, dtype=torch.long),), {})) is None
    assert packed_read(None) is None


def test_a_device_read_is_pending_until_its_copy_is_done_and_never_waits() -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    read = packed_read(((), {"position_ids": positions}))

    class Event:
        done = False

        def query(self) -> bool:
            return self.done

    read._event = Event()  # stands for the CUDA event recorded after the non-blocking copy
    assert read.result() is False
    read._event.done = True
    assert read.result() == ((9 + 4) / 5, 2)
