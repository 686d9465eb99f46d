"""The cell magic through IPython's testing shell."""

import pytest

from trainmeter.magic import parse_flags


def _run(ip, cell):
    return ip.run_cell(cell)


def test_cell_runs_unchanged_in_the_user_namespace_and_returns_last_value(ip, in_tmp):
    ip.user_ns["counter"] = 0
    r = _run(ip, "%%trainmeter --name magic --no-widget\ncounter += 41\ncounter + 1")
    assert r.error_in_exec is None and r.result == 42 and ip.user_ns["counter"] == 41
    runs = list((in_tmp / ".trainmeter" / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.endswith("-magic")
    assert (runs[0] / "passport.json").exists() and (runs[0] / "events.jsonl").exists()


def test_training_cell_is_monitored(ip, in_tmp):
    pytest.importorskip("torch")
    _run(ip, "import torch\nm = torch.nn.Linear(3, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)")
    r = _run(ip, "%%trainmeter --budget-steps 5 --interval 0.1\nfor _ in range(5):\n"
                 "    loss = m(torch.ones(2, 3)).sum()\n    opt.zero_grad(); loss.backward(); opt.step()\n")
    assert r.error_in_exec is None
    import trainmeter as tm

    run = tm.runs(in_tmp / ".trainmeter" / "runs")[-1]
    assert run.passport["steps"] == 5 and run.passport["options"]["budget_steps"] == 5


@pytest.mark.parametrize(
    ("flags", "needle"),
    [("--budget-tokens 20Q", "'20Q'"), ("--interval -1", "--interval"), ("--bogus 3", "--bogus"),
     ("--budget-tokens 1B --budget-steps 3", "not allowed with"), ("--convention foo", "foo"),
     ("--peak-tflops -1 --peak-source x", "--peak-tflops"), ("--budget-flops abc", "--budget-flops"),
     ("--peak-tflops 900", "--peak-source"), ("--gpus foo", "--gpus"),
     ("--memory-snapshot-step 0", "--memory-snapshot-step")],
)
def test_bad_flag_errors_before_anything_runs_or_a_folder_exists(ip, in_tmp, flags, needle):
    ip.user_ns["ran"] = False
    r = _run(ip, f"%%trainmeter {flags}\nran = True")
    assert r.error_in_exec is not None and needle in str(r.error_in_exec)
    assert ip.user_ns["ran"] is False
    assert not (in_tmp / ".trainmeter").exists()


def test_unknown_flag_error_lists_valid_flags():
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as err:
        parse_flags("--nope")
    assert "--budget-tokens" in str(err.value) and "--nope" in str(err.value)


def test_user_exception_propagates_and_run_is_failed(ip, in_tmp):
    r = _run(ip, "%%trainmeter --name boom\nraise ZeroDivisionError('x')")
    assert isinstance(r.error_in_exec, ZeroDivisionError)
    import trainmeter as tm

    assert tm.runs(in_tmp / ".trainmeter" / "runs")[-1].passport["status"] == "failed"


def test_a_failing_cells_traceback_names_its_own_execution_count(ip, in_tmp):
    r = ip.run_cell("%%trainmeter --name count --no-widget\nraise ValueError('x')", store_history=True)
    tb = ip.InteractiveTB.text(type(r.error_in_exec), r.error_in_exec, r.error_in_exec.__traceback__)
    import re

    assert r.execution_count is not None and len(re.findall(r"Cell In\[\d+\]", tb)) == 2, tb
    assert set(re.findall(r"Cell In\[(\d+)\]", tb)) == {str(r.execution_count)}, tb  # the body's frame too


def test_keyboard_interrupt_gives_interrupted_status(ip, in_tmp):
    _run(ip, "%%trainmeter --name stop\nraise KeyboardInterrupt")
    import trainmeter as tm

    assert tm.runs(in_tmp / ".trainmeter" / "runs")[-1].passport["status"] == "interrupted"


def test_line_magic_runs_lists_saved_runs(ip, in_tmp, capsys):
    _run(ip, "%%trainmeter --name listed\npass")
    ip.run_line_magic("trainmeter", "runs")
    assert "listed" in capsys.readouterr().out


def test_line_magic_rejects_unknown_verbs(ip):
    r = ip.run_cell("%trainmeter frobnicate")
    assert "unknown verb 'frobnicate'" in str(r.error_in_exec)


def test_text_line_is_printed_outside_a_notebook(ip, in_tmp, capsys):
    _run(ip, "%%trainmeter --name text\nimport trainmeter as tm\ntm.emit(train_loss=1.25)")
    out = capsys.readouterr().out
    assert "trainmeter: run 'text' completed" in out


def test_line_magic_doctor_prints_one_line_per_check(ip, capsys):
    ip.run_line_magic("trainmeter", "doctor")
    out = capsys.readouterr().out
    assert "NVML" in out and "psutil" in out and len(out.strip().splitlines()) >= 5


def test_grid_flags_parse_and_a_bad_value_is_a_usage_error() -> None:
    from IPython.core.error import UsageError

    from trainmeter.magic import parse_flags

    o = parse_flags("--grid-gco2-per-kwh 120 --grid-source 'grid operator 2025'")
    assert o.grid_gco2_per_kwh == 120.0 and o.grid_source == "grid operator 2025"
    with pytest.raises(UsageError, match="--grid-gco2-per-kwh"):
        parse_flags("--grid-gco2-per-kwh lots --grid-source x")


def test_help_lists_every_flag_of_options_and_every_verb(ip, capsys):
    from dataclasses import fields

    from trainmeter.magic import VERBS
    from trainmeter.options import FLAGS, MonitorOptions

    ip.run_line_magic("trainmeter", "help")
    out = capsys.readouterr().out
    by_field = {f.field: f.flag for f in FLAGS}
    for option in fields(MonitorOptions):
        assert by_field[option.name] in out, option.name
    for verb in VERBS:
        assert f"%trainmeter {verb}" in out
    assert "..." not in out and "--convention NAME" in out and "hf, megatron, titan" in out


def test_the_parser_accepts_every_flag_help_lists():
    from trainmeter.options import FLAGS

    values = {"--convention": "hf", "--gpus": "all", "--dir": "runs", "--interval": "5", "--name": "x",
              "--peak-source": "sheet", "--grid-source": "report", "--alert": "nan:stop"}
    for f in FLAGS:
        if (f.group and f.flag != "--budget-tokens") or f.flag == "--resume":  # --resume: tests/lineage
            continue
        line = f.flag if not f.metavar else f"{f.flag} {values.get(f.flag, '3')}"
        if f.flag in ("--peak-source", "--peak-tflops"):
            line = "--peak-tflops 900 --peak-source sheet"
        if f.flag in ("--grid-source", "--grid-gco2-per-kwh"):
            line = "--grid-gco2-per-kwh 300 --grid-source report"
        parse_flags(line)


def test_runs_verb_prints_a_table_newest_first_and_takes_last_n(ip, in_tmp, capsys):
    _run(ip, "%%trainmeter --name first --no-widget\npass")
    _run(ip, "%%trainmeter --name second --no-widget\npass")
    capsys.readouterr()
    ip.run_line_magic("trainmeter", "runs --last 1")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["started", "(UTC)", "name"]
    assert "first" not in out[1] and ("second" in out[1])
    assert out[2].startswith("+1 more")


@pytest.mark.parametrize("line", ["runs --last 0", "runs --last x", "runs --dir", "runs --bogus", "help me"])
def test_runs_and_help_reject_bad_arguments_naming_them(ip, line):
    r = ip.run_cell(f"%trainmeter {line}")
    assert r.error_in_exec is not None and "usage: %trainmeter" in str(r.error_in_exec)


def test_an_alert_that_stops_ends_the_cell_with_one_line_and_no_traceback(ip, in_tmp, capsys):
    import json

    pytest.importorskip("torch")
    cell = """%%trainmeter --name nanstop --no-widget --alert nan:stop
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for i in range(1, 101):
    loss = torch.nn.functional.mse_loss(model(x), y) * (float("nan") if i == 40 else 1.0)
    opt.zero_grad()
    loss.backward()
    opt.step()
after_loop = True
"""
    r = _run(ip, cell)
    out = capsys.readouterr()
    assert r.error_in_exec is None and "after_loop" not in ip.user_ns
    assert "Traceback" not in out.out + out.err and "StopTraining" not in out.out + out.err
    assert "run 'nanstop' stopped by alert:nan:stop at step 40 after 40 steps" in out.out
    (run,) = (in_tmp / ".trainmeter" / "runs").iterdir()
    p = json.loads((run / "passport.json").read_text())
    assert p["status"] == "stopped" and p["stopped_at_step"] == 40 and p["alerts"][0]["rule"] == "nan:stop"


def test_a_bad_alert_rule_is_a_usage_error_naming_it_and_what_is_valid():
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as caught:
        parse_flags("--alert nan:explode")
    assert "invalid alert rule 'nan:explode'" in str(caught.value) and "checkpoint-stop" in str(caught.value)


def test_in_a_notebook_help_and_doctor_display_html_that_wraps_at_spaces(ip, monkeypatch):
    """Saved, reopened and converted notebooks show the same text; JupyterLab's stream output would break words."""
    from trainmeter import magic

    shown = []
    monkeypatch.setattr(magic, "_in_notebook", lambda shell: True)
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    ip.run_line_magic("trainmeter", "help")
    ip.run_line_magic("trainmeter", "doctor")
    assert [b.kind for b in shown] == ["help", "doctor"]
    for block in shown:
        bundle = block._repr_mimebundle_()
        assert bundle["text/plain"] == block.text and "--budget-tokens" in shown[0].text
        assert "word-break:normal" in bundle["text/html"] and "<pre" in bundle["text/html"]
    help_html = shown[0]._repr_mimebundle_()["text/html"]
    from trainmeter.options import FLAGS

    for f in FLAGS:  # a flag with a hyphen inside is never split at it
        if "-" in f.flag[2:]:
            assert f'<span style="white-space:nowrap">{f.flag}' in help_html, f.flag
