"""tm.compare headless: bqplot figure objects, one line per run with its name, bounded data, the table."""

from __future__ import annotations

import math

import pytest

import trainmeter as tm
from trainmeter.comparison.figures import FIGURE_BUDGET_POINTS, compare
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runs import load, runs


def saved_run(root, name, *, steps=3000, lr=1.0, tokens=512, convention=None, val=True):
    """A finished run with a curves recorder: train_loss every step, val_loss every 500 steps."""
    from trainmeter.comparison.extension import CurvesRecorder

    clock = FakeClock()
    m = make_monitor(make_options(name=name, run_dir=root, interval_s=5, convention=convention), clock=clock,
                     text=False, probes=False, extensions=[CurvesRecorder()]).start()
    for step in range(1, steps + 1):
        clock.advance(0.1)
        m.record({"train_loss": 2.0 + math.exp(-lr * step / 1000)}, step=step)
        if val and step % 500 == 0:
            m.record({"val_loss": 2.1 + math.exp(-lr * step / 1000)}, step=step)
        m.on_step(tokens)
    m.finish("completed")
    return load(m.run_dir)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return root, [saved_run(root, "base"), saved_run(root, "fast-lr", lr=3.0), saved_run(root, "big-batch",
                                                                                          tokens=1024, val=False)]


def _lines(fig):
    return [m for m in fig.marks]


def test_no_argument_compares_the_last_runs_under_the_root_one_line_each(three_runs) -> None:
    root, _ = three_runs
    box = compare(root=root, y=("train_loss", "tokens_per_s")).widget()
    assert [type(f).__name__ for f in box.figures] == ["Figure", "Figure"]
    loss = box.figures[0]
    assert [m.labels[0] for m in loss.marks] == [r.name for r in runs(root)]  # folder order: oldest first
    assert sorted(m.labels[0] for m in loss.marks) == ["base", "big-batch", "fast-lr"]
    assert all(m.display_legend for m in loss.marks)
    assert len({m.colors[0] for m in loss.marks}) == 3
    assert loss.axes[0].label == "tokens trained"
    assert box.children[0].children[0] is loss and "tm-compare-table" in box.children[1].value


def test_line_data_is_bounded_and_placed_on_the_tokens_axis(three_runs) -> None:
    root, found = three_runs
    box = compare(found, y="train_loss").widget()
    for mark in box.figures[0].marks:
        assert 0 < len(mark.x) <= FIGURE_BUDGET_POINTS // 3 and len(mark.x) == len(mark.y)
        assert mark.x.dtype.name == "float32"
    big = box.figures[0].marks[2]
    assert float(big.x.max()) == pytest.approx(3000 * 1024, rel=1e-3)  # last loss point at the run's last token


def test_a_run_without_a_series_is_named_not_drawn(three_runs) -> None:
    _, found = three_runs
    c = compare(found, y="val_loss")
    fig = c.widget().figures[0]
    assert [m.labels[0] for m in fig.marks] == ["base", "fast-lr"] and fig.title == "val_loss vs tokens"
    assert "no line for big-batch: no val_loss recorded" in c.html


def test_flops_axis_needs_a_convention_and_says_so_without_an_empty_plot(three_runs) -> None:
    _, found = three_runs
    c = compare(found, x="flops", y="train_loss")
    assert c.drawn == [] and c.widget().figures == []
    assert "train_loss: no run has it (no FLOPs convention named)" in c.html and "<img" not in c.html


def test_one_run_is_drawn_alone_and_step_axis_is_labelled(three_runs) -> None:
    _, found = three_runs
    box = compare(found[0], x="step", y=("train_loss",)).widget()
    assert len(box.figures[0].marks) == 1 and box.figures[0].axes[0].label == "optimizer step"
    assert len(box.rows) == 1


def test_table_has_the_numbers_and_what_differs(three_runs) -> None:
    _, found = three_runs
    rows = compare(found, y="train_loss").widget().rows
    assert [r["run"] for r in rows] == ["base", "fast-lr", "big-batch"]
    assert rows[0]["steps"] == 3000 and rows[2]["tokens"] == 3000 * 1024
    assert rows[1]["best_loss"] == pytest.approx(2.0 + math.exp(-9.0))
    assert rows[0]["goodput"] is not None and rows[0]["differs"] == {}


def test_runs_without_curves_json_are_read_from_the_run_log(tmp_path) -> None:
    run = saved_run(tmp_path, "old", steps=600)
    (run.dir / "curves.json").unlink()
    fig = compare(run, x="time", y="train_loss").widget().figures[0]
    assert len(fig.marks) == 1 and float(fig.marks[0].x.max()) == pytest.approx(60.0, rel=1e-3)
    assert (run.dir / "curves.json").exists()  # cached for next time


def test_bad_axes_name_what_is_valid(three_runs) -> None:
    _, found = three_runs
    with pytest.raises(ValueError, match="valid are tokens, flops, time, step"):
        compare(found, x="epochs")
    with pytest.raises(ValueError, match="valid are train_loss, val_loss, tokens_per_s, mfu"):
        compare(found, y=("loss",))


def test_no_saved_runs_gives_a_box_saying_so(tmp_path) -> None:
    c = compare(root=tmp_path / "empty")
    assert c.widget().figures == [] and "no saved runs" in c.html


def _img_svgs(html: str) -> list[str]:
    import base64
    import re

    return [base64.b64decode(u).decode() for u in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)]


def test_the_comparison_displays_as_static_html_and_svg_with_readable_ticks(three_runs) -> None:
    """A reopened notebook and nbconvert show the saved text/html: no widget model, no widget repr."""
    _, found = three_runs
    from IPython.core.formatters import DisplayFormatter  # IPython's own rich display, without a shell

    c = compare(found, y=("train_loss", "tokens_per_s", "mfu"))
    bundle, _ = DisplayFormatter().format(c)
    assert set(bundle) == {"text/html", "text/plain"}
    assert bundle["text/plain"].startswith("<trainmeter comparison of 3 run(s) by tokens")
    assert "HBox" not in bundle["text/plain"]
    svgs = _img_svgs(bundle["text/html"])
    assert len(svgs) == len(c.drawn) >= 2 and "mfu" not in c.drawn  # no empty MFU plot
    assert "mfu: no run has it" in bundle["text/html"]
    assert all("e+" not in svg for svg in svgs)  # SI ticks: 1M, not 1e+6
    assert "tokens trained" in svgs[0] and "overflow-x:auto" in bundle["text/html"]


def test_compare_is_a_lazy_name_of_the_package(three_runs) -> None:
    assert tm.compare is compare and runs(three_runs[0])


def test_flops_axis_and_mfu_use_the_runs_convention(tmp_path) -> None:
    from trainmeter.comparison.extension import CurvesRecorder
    from trainmeter.core.provenance import Derivation

    class Compute:
        name = "compute"
        derived = {"mfu[hf]": Derivation(name="mfu[hf]", formula="", value=0.4, unit="fraction")}

        def start(self, m) -> None: ...

        def stop(self) -> None: ...

        def passport_section(self):
            return {"convention": "hf", "flops_per_token": {"hf": 1e9}, "mfu": {"hf": 0.4}}

        def view(self):
            from trainmeter.compute.view import ComputeView

            return ComputeView(convention="hf", derived=self.derived)

    clock = FakeClock()
    m = make_monitor(make_options(name="conv", run_dir=tmp_path, interval_s=5, convention="hf"), clock=clock,
                     text=False, probes=False, extensions=[Compute(), CurvesRecorder()]).start()
    for step in range(1, 101):
        clock.advance(1.0)
        m.record({"train_loss": 1.0}, step=step)
        m.on_step(10)
    m.finish("completed")
    box = compare(load(m.run_dir), x="flops", y=("train_loss", "mfu")).widget()
    loss, mfu = box.figures
    assert loss.axes[0].label == "training FLOPs (hf convention)"
    assert float(loss.marks[0].x.max()) == pytest.approx(100 * 10 * 1e9, rel=1e-3)
    assert mfu.axes[1].label == "MFU (hf, 0-1)" and mfu.marks[0].y.tolist() == pytest.approx([0.4] * len(mfu.marks[0].y))
    assert box.rows[0]["mfu"] == 0.4 and box.rows[0]["convention"] == "hf"
