"""The batch rule (docs/spec.md section 2): every column of a batch counts once, known batch objects through the
registry, anything else unknown (never 0) until ``tm.batch`` declares it."""

import dataclasses
import json
import warnings

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from trainmeter.core.batch import count_batch  # noqa: E402


def _ids(rows, seq):
    return torch.zeros(rows, seq, dtype=torch.long)


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
    assert counter.count((torch.zeros(4, 6, dtype=torch.long),), {"input_ids": torch.zeros(9, 9, dtype=torch.long)}) == (
        81, "tokens")  # keywords are read: a token keyword comes first
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


def test_every_column_of_a_contrastive_batch_counts_its_token_ids_once():
    anchor = {"input_ids": _ids(4, 7), "attention_mask": _ids(4, 7), "token_type_ids": _ids(4, 7)}
    positive = {"input_ids": _ids(4, 11), "attention_mask": _ids(4, 11)}
    assert count_batch(([anchor, positive], None), None) == (4 * 7 + 4 * 11, "tokens")  # a loss(features, labels)
    assert count_batch(({"anchor": anchor, "positive": positive},), None) == (72, "tokens")  # columns by name
    assert count_batch((), {"features": [anchor, positive]}) == (72, "tokens")


def test_columns_flattened_into_one_mapping_each_count_their_token_ids():
    flat = {"anchor_input_ids": _ids(4, 7), "anchor_attention_mask": _ids(4, 7), "positive_input_ids": _ids(4, 11),
            "positive_attention_mask": _ids(4, 11), "return_loss": True}  # sentence-transformers' training inputs
    assert count_batch((flat,), None) == (4 * 7 + 4 * 11, "tokens")
    assert count_batch((), {"input_ids": _ids(2, 5), "decoder_input_ids": _ids(2, 9)}) == (10, "tokens")  # plain first


def test_a_column_s_mask_and_labels_and_a_positional_pair_s_target_are_not_counted_again():
    assert count_batch((), {"input_ids": _ids(2, 5), "attention_mask": _ids(2, 5), "labels": _ids(2, 5)}) == (
        10, "tokens")
    assert count_batch((torch.randn(8, 3), torch.randn(8)), None) == (8, "samples")  # (x, y): x once
    assert count_batch((torch.randn(8, 3),), {"labels": torch.randn(8)}) == (8, "samples")  # model(x, labels=y)


def test_a_multi_column_batch_s_s_is_its_token_weighted_sequence_length():
    from trainmeter.core.batch import batch_seq

    features = [{"input_ids": _ids(4, 6)}, {"input_ids": _ids(4, 12)}]
    assert batch_seq((features,), None) == (24 * 6 + 48 * 12) / 72
    assert batch_seq(([{"input_ids": _ids(2, 9)}, {"input_ids": _ids(3, 9)}],), None) == 9


class Graph:
    """A graph batch as PyG's Batch holds one (its library not imported): node features, edges, graphs."""

    def __init__(self, nodes, graphs=None):
        self.x = torch.randn(nodes, 4)
        self.edge_index = torch.zeros(2, 3 * nodes, dtype=torch.long)
        if graphs is not None:
            self.num_graphs = graphs


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


def test_a_graph_batch_counts_its_graphs_else_its_nodes_and_says_which():
    from trainmeter.core.batch import SAMPLE_KINDS, BatchCounter

    counter = BatchCounter()
    assert counter.count((Graph(30, graphs=3),), None) == (3, "samples") and counter.kind == "graphs"
    assert counter.count((Graph(30),), None) == (30, "samples") and counter.kind == "nodes"
    sampled = Graph(30)
    sampled.batch_size = 8  # a sampled subgraph around 8 seed nodes (PyG's NeighborLoader)
    assert counter.count((sampled,), None) == (8, "samples") and counter.kind == "seeds"
    assert "nodes" in SAMPLE_KINDS["nodes"] and "graphs" in SAMPLE_KINDS["graphs"]


def test_an_unknown_batch_object_is_unknown_with_its_reason_never_zero():
    from trainmeter.core.batch import BatchCounter

    counter = BatchCounter()
    assert counter.count((Pair(torch.randn(3, 2), torch.randn(3, 2)),), None) is None
    assert counter.unread == "a Pair"


class PairModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def forward(self, batch):
        return (self.layer(batch.left) - self.layer(batch.right)).pow(2).mean()


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def test_a_run_of_graph_batches_counts_graphs_and_its_passport_says_samples_are_graphs(run_root):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, data):
            return self.layer(data.x).mean()

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for nodes, graphs in ((30, 3), (20, 2), (50, 5)):
            model(Graph(nodes, graphs)).backward()
            opt.step()
            opt.zero_grad()
    info = _passport(m)["series_info"]["tokens_per_step"]
    assert m.tokens == 10 and m.token_unit == "samples" and "samples are graphs" in info["note"]
    assert m.warnings == []


def test_an_unreadable_batch_warns_naming_tm_batch_and_tm_batch_declares_it(run_root):
    model = PairModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = Pair(torch.randn(6, 2), torch.randn(6, 2))
    with warnings.catch_warnings(record=True) as caught, tm.monitor(run_dir=run_root, interval_s=3600) as m:
        warnings.simplefilter("always")
        for _ in range(2):
            model(batch).backward()
            opt.step()
    ours = [str(w.message) for w in caught if "cannot read" in str(w.message)]
    assert m.tokens == 0 and len(ours) == 1 and "a Pair" in ours[0] and "tm.batch(samples=...)" in ours[0]
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(3):
            for _micro in range(2):  # two micro-batches a step: declared batches add up
                model(batch).backward()
                tm.batch(samples=6)
            opt.step()
    assert m.steps == 3 and m.tokens == 36 and m.token_unit == "samples" and m.warnings == []
    p = _passport(m)
    assert p["series_info"]["tokens_per_step"]["provenance"] == "declared"
    counted = next(d for d in p["derivations"] if d["name"] == "flops_per_token.counted")  # per declared sample
    assert counted["value"] is not None and [i["value"] for i in counted["inputs"] if i["name"] == "B"] == [6]


def test_a_declared_batch_replaces_what_was_counted_of_its_step_and_no_batch_is_counted_after_it(run_root):
    model = torch.nn.Embedding(10, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = _ids(4, 5)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        model(ids).sum().backward()
        opt.step()  # 20 tokens counted
        model(ids).sum().backward()
        tm.batch(tokens=7)  # this step's 20 counted give way
        opt.step()
        tm.batch(tokens=9)  # before its batch, which is not counted
        model(ids).sum().backward()
        opt.step()
    assert m.tokens == 20 + 7 + 9 and m.token_unit == "tokens"


def test_tm_batch_takes_one_non_negative_count_and_does_nothing_without_a_run():
    tm.batch(samples=3)
    for bad in ({}, {"samples": 1, "tokens": 2}, {"samples": -1}, {"tokens": 2.5}, {"samples": "8"}):
        with pytest.raises(ValueError):
            tm.batch(**bad)


def test_a_0_d_first_argument_is_skipped_and_the_batch_after_it_counted_at_every_call(run_root):
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 2)

        def forward(self, scale, ids):
            return self.embed(ids).sum() * scale

    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scale = torch.tensor(0.5)
    assert count_batch((scale, _ids(2, 3)), None) == (6, "tokens")
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for rows in (2, 2, 3, 3, 1):
            model(scale, _ids(rows, 4)).backward()
            opt.step()
    assert m.tokens == 4 * (2 + 2 + 3 + 3 + 1)


def test_a_framework_s_own_batch_counts_in_the_model_s_stead_and_one_the_rule_cannot_read_falls_back_to_it(run_root):
    model = torch.nn.Embedding(10, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pair = {"anchor_input_ids": _ids(2, 3), "positive_input_ids": _ids(2, 5)}  # the model is called with one column
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        # the integration wing's call, as an adapter makes it (HF's training_step inputs, skorch's X, ...)
        wing = next(wing for wing in m.extensions if wing.name == "frameworks")
        for batch in (pair, pair, Pair(torch.randn(2, 2), torch.randn(2, 2)), pair):
            for _micro in range(2):  # two micro-batches a step: each counts
                wing.framework_batch("fw", "step batch", batch)
                model(pair["anchor_input_ids"]).sum().backward()
                wing.framework_batch("fw", "step batch", None)
            opt.step()
    info = _passport(m)["series_info"]["tokens_per_step"]
    assert m.steps == 4 and m.tokens == 3 * 2 * (6 + 10) + 2 * 6 and m.token_unit == "tokens"  # 6: the model's
    assert info["provenance"] == "counted" and info["source"] == "fw step batch"
    assert "where fw step batch are a Pair, the calls of Embedding counted the batch" in info["note"]
    assert m.warnings == []
