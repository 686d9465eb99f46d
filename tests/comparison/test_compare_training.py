"""``tm.compare`` of a training (docs/spec.md sections 15 and 22): the last run of a lineage is one curve across
its runs, each earlier run up to the step the next resumed from."""

from __future__ import annotations

import json

import trainmeter as tm
from tests.lineage.test_axis import _two_cells


def test_a_resumed_run_compares_as_one_curve_over_its_whole_training(run_root):
    first, second = _two_cells(run_root)
    whole = tm.compare(second.run_dir, x="step", y="train_loss")
    line = whole.lines["train_loss"][0]
    assert line.x == [float(s) for s in range(1, 201)]  # steps 1-80 of the first run, 81-200 of the second
    own = json.loads((second.run_dir / "curves.json").read_text())["series"]["train_loss"]["value"]
    first_losses = json.loads((first.run_dir / "curves.json").read_text())["series"]["train_loss"]["value"]
    assert line.y == first_losses[:80] + own
    assert whole.rows[0]["steps"] == 200 and whole.rows[0]["tokens"] == 200 * 4 * 6
    tokens = tm.compare(second.run_dir, x="tokens", y="train_loss").lines["train_loss"][0]
    assert tokens.x[-1] == 200 * 4 * 6 and tokens.x == sorted(tokens.x)  # tokens of the training, in order
    alone = tm.compare(second.run_dir, x="step", y="train_loss", training=False)
    assert alone.lines["train_loss"][0].x == [float(s) for s in range(81, 201)] and alone.rows[0]["steps"] == 120
