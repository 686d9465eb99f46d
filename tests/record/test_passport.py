import json

import trainmeter as tm
from trainmeter.record.passport import render_markdown, throughput_derivations


def test_throughput_derivations_can_be_redone_by_hand():
    ds = {d.name: d for d in throughput_derivations(tokens=1000, steps=10, train_s=4.0, elapsed_s=5.0, unit="tokens")}
    assert ds["train_tokens_per_s"].value == 250 and ds["train_tokens_per_s"].formula == "tokens / train_s"
    assert ds["session_tokens_per_s"].value == 200 and ds["seconds_per_step"].value == 0.4
    assert {i.provenance for i in ds["train_tokens_per_s"].inputs} == {"counted", "measured"}


def test_passport_json_has_documented_keys_and_markdown_is_readable(run_root):
    with tm.monitor(run_dir=run_root, name="pp") as m:
        tm.emit(train_loss=2.0, val_loss=2.5)
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["series"]["val_loss"] == {"last": 2.5, "min": 2.5, "max": 2.5, "count": 1, "last_step": 0}
    assert {d["name"] for d in p["derivations"]} >= {"train_tokens_per_s", "session_tokens_per_s"}
    md = render_markdown(p)
    assert "Status: **completed**" in md and "val_loss: last 2.5" in md
    assert "host" not in json.dumps(p["environment"]).lower()


def test_passport_md_shows_75_seconds_as_the_widget_does():
    from trainmeter.widget.snapshot import progress_text

    p = {"name": "clock", "status": "completed", "steps": 1150, "tokens": 2_000_000, "elapsed_s": 75.0,
         "phases_s": {"train": 75.0}, "throughput": {"train_tokens_per_s": 850.4, "session_tokens_per_s": 49_100.0}}
    md = render_markdown(p)
    assert progress_text({"status": "completed", "elapsed_s": 75.0}) == "finished in 0:01:15"
    assert "session 0:01:15" in md and "Time: train 0:01:15" in md
    assert "Steps: 1,150; tokens: 2,000,000" in md and "850 tokens/s training-only, 49.1k tokens/s session" in md


def _md(**extra):
    p = {"name": "r", "status": "completed", "steps": 0, "tokens": 0, "elapsed_s": 10.0, "goodput": 1.0,
         "phases_s": {"train": 10.0}, "throughput": {}, **extra}
    return render_markdown(p)


def test_passport_md_shows_the_eval_loss_hugging_face_and_trl_log():
    md = _md(series={"eval_loss": {"last": 1.25, "min": 1.0, "max": 2.0, "count": 2, "last_step": 6}})
    assert "eval_loss: last 1.25, min 1 (2 points)" in md


def test_a_launch_parents_passport_md_speaks_for_the_launch():
    launch = {"role": "launch", "global_steps": 12, "global_tokens": 1536, "token_unit": "tokens", "world_size": 2,
              "ranks_recorded": 2, "notes": ["rank-1 failed at step 3"]}
    md = _md(distributed=launch, goodput=None)
    assert "Steps: 12 (global, over 2 rank(s) of world size 2); tokens: 1,536 (sum over ranks)" in md
    assert "Steps: 0" not in md and "Goodput" not in md and "Launch: rank-1 failed at step 3" in md


def test_steps_unknown_is_said_instead_of_zero_steps():
    md = _md(steps_unknown=True, goodput=None)
    assert "Steps: unknown" in md and "tm.step()" in md and "Steps: 0" not in md


def test_passport_json_is_one_key_a_line_and_parses_to_the_indented_cleaned_passport(run_root, monkeypatch):
    import json.encoder

    from trainmeter.record import passport as passport_module
    from trainmeter.record.runlog import clean

    built = []
    real_json_lines = passport_module.json_lines
    monkeypatch.setattr(passport_module, "json_lines", lambda doc: built.append(doc) or real_json_lines(doc))
    with tm.monitor(run_dir=run_root, name="lines") as m:
        for step in range(5):
            tm.emit(train_loss=float("nan") if step == 2 else 1.0 / (step + 1), step=step)
    text = (m.run_dir / "passport.json").read_text()
    files = json.loads(text)["files"]  # the last key, added once the other files are written (spec section 6)
    assert json.loads(text) == {**json.loads(json.dumps(clean(built[-1]), indent=2)), "files": files}
    assert len(text.splitlines()) == len(built[-1]) + 3
    assert "Status: **completed**" in (m.run_dir / "passport.md").read_text()

    def python_encoder(*args, **kwargs):
        raise AssertionError("json's pure-Python encoder ran")

    with monkeypatch.context() as patched:  # a NaN, an inf or a bool key still takes the C encoder
        patched.setattr(json.encoder, "_make_iterencode", python_encoder)
        odd = {"complete": True, "odd": [float("nan"), float("-inf")], "keys": {True: 1}}
        passport_module.write_passport(m.context, odd)
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["record"] == {"complete": True, "odd": [None, None], "keys": {"True": 1}}
    assert p == {**json.loads(json.dumps(clean(built[-1]), indent=2)), "files": p["files"]}
