"""The compare table and MFU as the dashboard showed them (issue 42 item 7): MFU read where the run records it, under
the convention its tile showed; every missing value is "—"; the table scrolls and wraps in a narrow output."""

from __future__ import annotations

import json

import torch

import trainmeter as tm
from trainmeter.comparison.figures import compare, table_html, table_rows


def _lm_run(run_root, name: str, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with tm.monitor(name=name, run_dir=run_root, peak_tflops=1, peak_source="test sheet", **options) as m:
        for step in range(1, 31):
            x = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(step))
            torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
            opt.step()
            opt.zero_grad()
    return m.run_dir


def test_a_run_with_no_convention_named_compares_by_the_mfu_its_dashboard_showed(run_root):
    run = _lm_run(run_root, "plain")
    mfu = json.loads((run / "passport.json").read_text())["compute"]["mfu"]
    lowest = min((c for c, v in mfu.items() if c != "counted" and v is not None), key=mfu.get)
    c = compare(run, x="step")
    assert "mfu" in c.drawn and "no run has it" not in c.html.split("mfu vs")[0].split("</table>")[-1]
    assert c.rows[0]["mfu"] == mfu[lowest] and c.rows[0]["convention"] == lowest  # the tile's value: the range's low
    assert f"({lowest})" in c.html


def test_every_missing_value_in_the_table_is_a_dash_never_none_or_a_hyphen():
    passport = {"status": "completed", "steps": 3, "tokens": None, "series": {}, "throughput": {},
                "compute": {}, "goodput": None, "energy": {}, "environment": {}, "options": {"resume": None}}
    other = {**passport, "options": {"resume": "../first"}}
    html = table_html(table_rows(["a", "b"], [passport, other]))
    cells = [c.split(">", 1)[1].split("</td>")[0] for c in html.split("<td")[1:]]
    assert "—" in cells and "-" not in cells and "None" not in html
    assert "resume=—" in html
    assert "overflow-x:auto" in html and "overflow-wrap:anywhere" in html  # scrolls sideways, the last column wraps
