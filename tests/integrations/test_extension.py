"""The integration wing's adapters: fit entry points wrapped for the run only, callbacks added to a copy, steps
counted once."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from trainmeter.core.monitor import MonitorWarning  # noqa: E402
from trainmeter.integrations.adapter import Site  # noqa: E402
from trainmeter.integrations.frameworks import FastaiAdapter  # noqa: E402
from trainmeter.integrations.keras import KerasAdapter  # noqa: E402

KERAS = Site(module="m", owner="C", attr="fit", callbacks_at=5, callbacks_name="callbacks")


def test_the_callback_joins_a_copy_of_the_users_list_positional_or_keyword():
    keras, fastai_adapter = KerasAdapter(None), FastaiAdapter(None)
    mine = ["a"]
    args, kwargs = keras.with_callback(KERAS, (1, 2, 3, 4, 5, mine), {}, "ours")
    assert args[5] == ["a", "ours"] and mine == ["a"]
    args, kwargs = keras.with_callback(KERAS, (1,), {"callbacks": ("a",)}, "ours")
    assert args == (1,) and kwargs == {"callbacks": ["a", "ours"]}
    assert keras.with_callback(KERAS, (), {}, "ours") == ((), {"callbacks": ["ours"]})
    fastai = Site(module="m", owner="C", attr="fit", callbacks_at=3, callbacks_name="cbs")

    class Many:  # a list type of the framework's own (fastcore's L)
        def __iter__(self):
            return iter(["a", "b"])

    assert fastai_adapter.with_callback(fastai, (), {"cbs": Many()}, "ours") == ((), {"cbs": ["a", "b", "ours"]})
    theirs = Many()  # keras' CallbackList: left as given
    assert keras.with_callback(KERAS, (), {"callbacks": theirs}, "ours") == ((), {"callbacks": theirs})
    one = object()  # one callback
    assert fastai_adapter.with_callback(fastai, (), {"cbs": one}, "ours") == ((), {"cbs": [one, "ours"]})


def _learner(opt_func=None):
    from fastai.basics import DataLoaders, Learner, MSELossFlat

    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    rows = list(zip(x, x.sum(1, keepdim=True), strict=True))
    dls = DataLoaders.from_dsets(rows[:24], rows[24:], bs=8, shuffle=False, num_workers=0)
    extra = {"opt_func": opt_func} if opt_func is not None else {}
    return Learner(dls, torch.nn.Linear(4, 1), loss_func=MSELossFlat(), **extra)


def test_fastai_fit_is_wrapped_for_the_run_only_and_its_callback_leaves_with_the_fit(run_root):
    pytest.importorskip("fastai")
    from fastai.learner import Learner

    original = Learner.fit
    learn = _learner()
    mine: list = []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        assert Learner.fit is not original
        assert m.extension("frameworks").control is None  # no fit yet
        with learn.no_logging():
            learn.fit(1, 1e-2, cbs=mine)
        assert m.extension("frameworks").framework == "fastai"
    assert Learner.fit is original and mine == []
    assert not any("Trainmeter" in type(cb).__name__ for cb in learn.cbs)
    assert m.steps == 3 and m.tokens == 24


def test_a_fastai_learner_on_a_torch_optimizer_is_counted_once(run_root):
    pytest.importorskip("fastai")
    from functools import partial

    from fastai.optimizer import OptimWrapper

    learn = _learner(opt_func=partial(OptimWrapper, opt=torch.optim.SGD))
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        with learn.no_logging():
            learn.fit(1, 1e-2)
    assert m.steps == 3 == learn.train_iter
    assert "fastai" not in _section(m)["explicit_steps"]  # the torch step hook counted them


def test_switched_off_the_adapters_leave_fastai_untouched_and_say_its_steps_are_unknown(run_root, monkeypatch):
    pytest.importorskip("fastai")
    from fastai.learner import Learner

    monkeypatch.setenv("TRAINMETER_DISABLE", "frameworks")
    original = Learner.fit
    learn = _learner()
    with pytest.warns(MonitorWarning, match="tm.step"):
        with tm.monitor(run_dir=run_root, interval_s=3600) as m:
            assert Learner.fit is original
            with learn.no_logging():
                learn.fit(1, 1e-2)
    assert m.steps == 0 and _section(m)["fits"] == {} and _passport(m)["steps_unknown"] is True


def _passport(m):
    import json

    return json.loads((m.run_dir / "passport.json").read_text())


def _section(m):
    return _passport(m)["frameworks"]


def test_a_step_count_that_differs_from_the_frameworks_own_is_said():
    from types import SimpleNamespace

    from trainmeter.integrations.extension import Integrations

    said: list[str] = []
    wing = Integrations()
    wing.monitor = SimpleNamespace(steps=5, warn_once=lambda key, message: said.append(message))
    wing.fits = {"hf": 1}
    wing.compare_steps("hf", 5)
    assert said == []
    wing.compare_steps("hf", 6)
    assert said == ["hf counted 6 optimizer steps, trainmeter 5: the step series and rates follow trainmeter's "
                    "count (passport frameworks.framework_steps)"]


def test_one_framework_is_switched_off_alone(run_root, monkeypatch):
    pytest.importorskip("fastai")
    from fastai.learner import Learner

    from trainmeter.core import host_patches

    monkeypatch.setenv("TRAINMETER_DISABLE", "framework-fastai")
    original = Learner.fit
    with tm.monitor(run_dir=run_root, interval_s=3600):
        assert Learner.fit is original
    assert {"framework-hf", "framework-lightning", "framework-keras", "framework-accelerate", "framework-fabric",
            "framework-ignite"} <= set(host_patches.KEYS)


def test_fastai_fit_one_cycle_goes_through_the_adapted_fit(run_root):
    pytest.importorskip("fastai")
    import fastai.callback.schedule  # noqa: F401  (adds Learner.fit_one_cycle)

    learn = _learner()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        with learn.no_logging():
            learn.fit_one_cycle(1, 1e-2)
    assert m.steps == 3 == learn.train_iter and m.tokens == 24


@pytest.mark.slow
def test_hf_evaluate_after_train_records_its_eval_loss_once_as_evaluate_inside_train_does(run_root, tmp_path):
    import json

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, eval_strategy="steps", eval_steps=2, logging_steps=2,
        per_device_train_batch_size=2, per_device_eval_batch_size=4, report_to=[], save_strategy="no",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4])
    with tm.monitor(run_dir=run_root, interval_s=3600, name="hf-eval") as run:
        trainer.train()
        after = trainer.evaluate()["eval_loss"]
    points = [(s, v) for line in (run.run_dir / "events.jsonl").read_text().splitlines()
              for e in [json.loads(line)] if e.get("kind") == "series" and e.get("name") == "eval_loss"
              for s, v in zip(e["step"], e["value"], strict=True)]
    assert [s for s, _ in points] == [2, 4, 4]  # the two evaluations of train, then the one after it, once each
    assert points[-1][1] == pytest.approx(after)
    assert not any(cb.__class__.__name__ == "TrainmeterTrainerCallback" for cb in trainer.callback_handler.callbacks)
