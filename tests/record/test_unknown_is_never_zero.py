"""Unknown is never zero (docs/spec.md sections 2, 6, 7, 12): a run whose batches trainmeter cannot read shows its
counts, rates and FLOPs as null / "—" with the reason and the call that declares them, never as 0, and still shows
what it knows (steps, losses, time)."""

from __future__ import annotations

import json
import re
import time

import pytest
import torch

import trainmeter as tm
from trainmeter.core.faults import MonitorWarning
from trainmeter.core.throughput import BATCH_CALL
from trainmeter.widget.view_model import build_state, facts_from_monitor, facts_from_run

STEPS = 4
COUNTED_TILES = ("tokens", "throughput", "mfu", "flops")  # counts, rates and FLOPs


class Batch:
    """A custom batch object no reader knows: its tensors are behind a method (none is an attribute, an item or a
    field), so no batch type's reader, present or future, finds a tensor in it."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.tensors = lambda: (x, y)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.lin(batch.tensors()[0])


def _train(run_root, capsys):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(name="custom-batch", run_dir=run_root, interval_s=0.1, budget_tokens=1000) as m:
        for _ in range(STEPS):
            batch = Batch(torch.randn(8, 4), torch.randn(8, 1))
            loss = torch.nn.functional.mse_loss(model(batch), batch.tensors()[1])
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.11)  # past the interval: every step reports
        live = build_state(facts_from_monitor(m.context))
    out = capsys.readouterr().out
    return m, live, out


def _counted_tiles(state):
    return [t for t in state["tiles"] if t["id"] in COUNTED_TILES or t["id"].startswith(("mfu", "flops"))]


def _says_unknown(tiles) -> None:
    assert {t["id"] for t in tiles} >= {"tokens", "throughput"}
    for tile in tiles:
        assert tile["value"] is None and not tile.get("text"), tile  # drawn "—" (js/src/tiles.ts), never 0
        assert tile.get("missing"), tile
    for tile in tiles[:2]:
        assert BATCH_CALL in tile["missing"] and tile["label"] != "tokens"


def test_a_run_with_no_readable_batch_shows_no_zero_count_rate_or_flops_anywhere(run_root, capsys):
    with pytest.warns(MonitorWarning, match="which trainmeter cannot read"):
        m, live, out = _train(run_root, capsys)
    passport = json.loads((m.run_dir / "passport.json").read_text())
    markdown = (m.run_dir / "passport.md").read_text()

    # passport.json: null where not read, the reason beside it; what is known is there
    assert (passport["steps"], passport["tokens"], passport["token_unit"]) == (STEPS, None, None)
    assert BATCH_CALL in passport["tokens_missing"]
    assert passport["throughput"]["train_tokens_per_s"] is None
    assert passport["throughput"]["session_tokens_per_s"] is None
    assert passport["throughput"]["seconds_per_step"] > 0
    assert passport["series"]["train_loss"]["count"] == STEPS
    compute = passport["compute"]
    assert compute["unit"] is None
    assert all(v is None for v in compute["flops_spent"].values()) and all(v is None for v in compute["mfu"].values())
    rates = {d["name"]: d for d in passport["derivations"] if d["name"].endswith("tokens_per_s")}
    assert all(d["value"] is None and BATCH_CALL in d["missing"] for d in rates.values()) and rates
    progress = next(d for d in passport["derivations"] if d["name"] == "progress")  # of the tokens budget
    assert compute["progress"] is None and progress["value"] is None and BATCH_CALL in progress["missing"]

    # the tiles, live and replayed: "—" with why and the call, never 0; the step and loss tiles hold their values
    run = tm.load(m.run_dir)
    replay = build_state(facts_from_run(run.passport, run.events(), str(run.dir)))
    for state in (live, replay):
        _says_unknown(_counted_tiles(state))
        tiles = {t["id"]: t for t in state["tiles"]}
        assert tiles["step"]["value"] == STEPS and tiles["loss"]["value"] is not None
        assert "throughput" not in {c["id"] for c in state["charts"]}  # no rate line drawn at 0
        assert state["progress"] is None  # no bar at 0 of the tokens budget

    # the text line of every report and the closing line
    lines = [line for line in out.splitlines() if line.startswith("[step ")]
    assert lines and all("rate=— (" in line and BATCH_CALL in line and "/s=" not in line for line in lines)
    assert all("loss=" in line for line in lines[1:])
    (closing,) = [line for line in out.splitlines() if line.startswith("trainmeter: run ")]
    assert f"after {STEPS} steps, samples/tokens — (" in closing and BATCH_CALL in closing
    assert not re.search(r"\b0(\.0)? (tokens|samples)", closing) and "tokens/s" not in closing

    # passport.md: no zero count or rate, the step time and the loss still there
    assert not re.search(r"(tokens|samples): 0\b|\b0(\.0)? (tokens|samples)(/s)?\b", markdown), markdown
    assert "tokens/s" not in markdown and "samples/s" not in markdown
    assert f"- Steps: {STEPS}; samples/tokens: — (" in markdown and BATCH_CALL in markdown
    assert "- Throughput: — (samples/tokens unknown" in markdown and "per step training-only" in markdown
    assert "- train_loss: last" in markdown
