"""A graph model whose ``forward(data)`` takes one graph batch object (PyG's ``Data``/``Batch``, or one defined here
like it): its samples are its graphs (a batch of graphs) or its nodes (one graph), and the run says which
(docs/spec.md section 2, "The batch rule")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport, printed_by_us  # noqa: E402

FEATURES, STEPS = 4, 5


class GraphBatch:
    """Graphs batched as PyG batches them: node features ``x``, ``edge_index``, the node-to-graph ``batch``
    vector and ``num_graphs`` (absent from one graph, as from PyG's ``Data``)."""

    def __init__(self, g, graphs=None, nodes=None):
        sizes = torch.randint(3, 8, (graphs,), generator=g) if graphs else torch.tensor([nodes])
        n = int(sizes.sum())
        self.x = torch.randn(n, FEATURES, generator=g)
        self.edge_index = torch.randint(0, n, (2, 3 * n), generator=g)
        self.batch = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
        self.y = torch.randn(len(sizes) if graphs else n, generator=g)
        if graphs:
            self.num_graphs = graphs


class GraphNet(torch.nn.Module):
    """One round of mean message passing, then a graph readout (``graph_level``) or a node readout."""

    def __init__(self, graph_level):
        super().__init__()
        self.graph_level = graph_level
        self.message = torch.nn.Linear(FEATURES, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, data):
        src, dst = data.edge_index
        h = torch.zeros(len(data.x), 8).index_add(0, dst, self.message(data.x)[src]).relu()
        if self.graph_level:
            h = torch.zeros(data.num_graphs, 8).index_add(0, data.batch, h)
        return torch.nn.functional.mse_loss(self.out(h).squeeze(-1), data.y)


def _train(graph_level):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = GraphNet(graph_level)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = {"graphs": 0, "nodes": 0}

    def count(module, args):  # the test's own count
        seen["graphs"] += getattr(args[0], "num_graphs", 1)
        seen["nodes"] += len(args[0].x)

    model.register_forward_pre_hook(count)
    losses = []
    for step in range(STEPS):
        data = GraphBatch(g, graphs=3 + step) if graph_level else GraphBatch(g, nodes=20 + step)
        loss = model(data)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, seen


@pytest.mark.parametrize(("graph_level", "unit"), [(True, "graphs"), (False, "nodes")])
def test_a_graph_model_counts_graphs_or_nodes_and_says_which(tmp_path, printed, graph_level, unit):
    with printed() as bare:
        bare_losses, _ = _train(graph_level)
    with printed() as ours, tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        losses, seen = _train(graph_level)
    assert all(torch.equal(a, b) for a, b in zip(losses, bare_losses, strict=True))
    p = passport(m)
    assert m.steps == STEPS and m.tokens == seen[unit] and m.token_unit == "samples"
    assert f"samples are {unit}" in p["series_info"]["tokens_per_step"]["note"]
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_a_pyg_graph_batch_counts_its_graphs():
    pyg = pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch, Data

    data = Batch.from_data_list([Data(x=torch.randn(n, FEATURES), edge_index=torch.zeros(2, n, dtype=torch.long))
                                 for n in (3, 5, 4)])
    from trainmeter.core.batch import BatchCounter

    counter = BatchCounter()
    assert counter.count((data,), None) == (3, "samples") and counter.kind == "graphs", pyg.__version__
