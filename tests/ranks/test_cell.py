"""A ``%%trainmeter`` cell that launches ranks with a fork launcher is monitored with no code change."""

from __future__ import annotations

import json

import pytest

CELL = """%%trainmeter --name nb --no-widget --interval 0.1
from accelerate import Accelerator, debug_launcher

def training_function():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    for _ in range(6):
        loss = model(torch.randint(0, 50, (3, 4))).pow(2).mean()
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()

debug_launcher(training_function, num_processes=2)
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_accelerate_fork_launch_from_a_cell_is_recorded_as_ranks_of_the_cell_run(ip, in_tmp, capfd):
    pytest.importorskip("accelerate")
    ip.run_cell("import torch")
    result = ip.run_cell(CELL)
    assert result.error_in_exec is None
    (run_dir,) = (in_tmp / ".trainmeter" / "runs").iterdir()
    passport = json.loads((run_dir / "passport.json").read_text())
    d = passport["distributed"]
    assert (d["world_size"], d["ranks_recorded"], d["backend"]) == (2, 2, "gloo")
    assert [(r["seat"], r["status"], r["steps"], r["tokens"]) for r in d["ranks"]] == [
        ("rank-0", "completed", 6, 6 * 12), ("rank-1", "completed", 6, 6 * 12)]
    assert (d["global_steps"], d["global_tokens"]) == (6, 144)  # the cell trained nothing: it speaks for its launch
    assert (passport["steps"], passport["tokens"], passport["token_unit"]) == (6, 144, "tokens")
    lines = [w for w in passport["warnings"] if "recorded as ranks (rank-0, rank-1)" in w]
    assert len(lines) == 1
    out = capfd.readouterr().out
    assert "[step" not in out and out.count("trainmeter: run ") == 1  # no child printed its text line
    assert "completed after 6 steps (global, over 2 rank(s)), 144 tokens, " in out
