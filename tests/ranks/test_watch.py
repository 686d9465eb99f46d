"""Following a run another process writes: ``tm.display(path, follow=True)`` and the watch behind it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainmeter as tm
from tests.ranks.test_follow import bytes_read
from trainmeter.ranks.watch import RunWatch, follow, resolve

SRC = Path(__file__).parents[2] / "src"
WRITER = """
import sys, time, torch, trainmeter as tm
model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
with tm.monitor(name="far", run_dir=sys.argv[1], interval_s=0.1):
    for _ in range(int(sys.argv[2])):
        model(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad(); time.sleep(0.02)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_watch_shows_the_steps_of_a_run_another_process_writes_rising(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRAINMETER_RUN_DIR", None)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "60"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: list[int] = []
    watch = None
    try:
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            folders = [p for p in tmp_path.iterdir() if p.is_dir()] if tmp_path.exists() else []
            if folders and watch is None:
                watch = RunWatch(folders[0], max_bytes=4096)
            if watch is not None:
                state = watch.poll()
                steps = watch.followers.sources.get("", None)
                if steps is not None and (not seen or steps.steps != seen[-1]):
                    seen.append(steps.steps)
                if watch.ended():
                    break
            time.sleep(0.05)
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0, writer.stderr.read()[-2000:]
    assert watch is not None and watch.ended() and state["status"] == "completed"
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == 60  # rising, to the end
    assert bytes_read(watch.followers) <= (watch.run_dir / "events.jsonl").stat().st_size * 2


def test_follow_outside_a_notebook_prints_the_run_until_it_ends(tmp_path, run_root):
    import torch

    with tm.monitor(name="done", run_dir=run_root) as m:
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.randn(1, 2)).sum().backward()
            opt.step()
    out = io.StringIO()
    watch = follow(m.run_dir / "passport.json", out=out, poll_s=0.01)
    assert watch.ended()
    assert "trainmeter: done [completed]" in out.getvalue() and "[step 3]" in out.getvalue()


def test_display_follow_goes_to_the_watch(run_root, capsys):
    run_dir = run_root / "20260101T000000Z-x"
    (run_dir / "rank-0").mkdir(parents=True)
    (run_dir / "rank-0" / "events.jsonl").write_text('{"kind":"rank","rank":0}\n')
    (run_dir / "passport.json").write_text('{"name":"x","status":"completed","steps":5,"tokens":0}')
    tm.display(run_dir / "rank-0", follow=True)  # a seat follows its launch
    assert "trainmeter: x [completed]" in capsys.readouterr().out


def test_nothing_live_to_follow_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no live run under"):
        resolve(None, root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no trainmeter run at"):
        resolve(tmp_path / "missing")


def test_in_a_notebook_a_widget_is_shown_and_updated_until_the_run_ends(tmp_path):
    pytest.importorskip("anywidget")
    run_dir = tmp_path / "20260101T000000Z-nb"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text('{"kind":"start","name":"nb","options":{"name":"nb"}}\n'
                                          '{"kind":"interval","step":3,"tokens":30,"elapsed_s":1.0}\n')

    class ZMQInteractiveShell:  # what follow() checks to decide a widget can be shown
        pass

    watch = follow(run_dir, shell=ZMQInteractiveShell(), poll_s=0.01)
    assert watch.widget.state["status"] == "running"
    with (run_dir / "events.jsonl").open("a") as f:
        f.write('{"kind":"interval","step":9,"tokens":90,"elapsed_s":2.0}\n')
    (run_dir / "passport.json").write_text('{"name":"nb","status":"completed","steps":9,"tokens":90}')
    watch.thread.join(timeout=30)
    assert not watch.thread.is_alive()
    assert watch.widget.state["status"] == "completed" and watch.widget.history


def test_a_launch_followed_without_a_parent_shows_the_tokens_of_every_rank(tmp_path):
    import json

    from trainmeter.ranks.seating import this_node

    for k, (step, tokens) in enumerate([(40, 1280), (38, 1216)]):
        seat = tmp_path / f"rank-{k}"
        seat.mkdir()
        records = [{"kind": "start", "name": "ddp", "token_unit": "tokens"},
                   {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": this_node(), "pid": None},
                   {"kind": "interval", "step": step, "tokens": tokens, "t_s": 1.0}]
        (seat / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    state = RunWatch(tmp_path).poll()
    tile = next(t for t in state["tiles"] if t["id"] == "tokens")
    assert tile["value"] == 1280 + 1216 and tile["label"].endswith("all ranks")
    assert tile["derivation"]["formula"].startswith("sum over ranks") and len(tile["derivation"]["inputs"]) == 2
    assert [t["id"] for t in state["tiles"]].count("tokens") == 1


def test_a_followed_run_draws_the_smoothed_loss_folded_over_every_step_it_read(run_root):
    from tests.widget.test_show import _saved_run
    from tests.widget.wire_types import decode_frame
    from trainmeter.optim.smoothing import LossEma

    m = _saved_run(run_root)
    watch = RunWatch(m.run_dir)
    watch.poll()
    by_name = {s.name: s for s in decode_frame(watch.history()).series}
    assert list(by_name["train_loss.ema"].xs) == list(by_name["train_loss"].xs)
    raw = list(by_name["train_loss"].ys)
    assert list(by_name["train_loss.ema"].ys) == pytest.approx(LossEma().twin("train_loss", range(len(raw)), raw)[1])
    assert "val_loss.ema" not in by_name
