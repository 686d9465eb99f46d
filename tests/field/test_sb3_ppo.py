"""stable-baselines3 PPO on CartPole: the policy is trained through ``evaluate_actions`` and never called for training;
rollouts put it in eval mode under ``no_grad``. Tiny (a few hundred timesteps on CPU), nothing downloaded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")
pytest.importorskip("stable_baselines3")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

N_STEPS, BATCH, EPOCHS, TIMESTEPS = 64, 32, 2, 256
ROLLOUTS = TIMESTEPS // N_STEPS
STEPS = ROLLOUTS * EPOCHS * (N_STEPS // BATCH)  # optimizer steps: one per minibatch
STEP_SLEEP_S = 0.002  # inside each env.step of a rollout: 256 of them
EVAL_SLEEP_S = 0.01  # inside each env.step of EvalCallback's evaluation (two episodes of 10-50 steps)


class SlowStep(gym.Wrapper):
    """CartPole whose ``step`` sleeps (the rollout's own environment work, longer); ``slept_s``: the sleeps' time as
    they took it (a short sleep overruns on a loaded machine)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.seconds = seconds
        self.slept_s = 0.0

    def step(self, action):
        started_s = time.perf_counter()
        time.sleep(self.seconds)
        self.slept_s += time.perf_counter() - started_s
        return self.env.step(action)


def _ppo(sleep_s: float = 0.0):
    from stable_baselines3 import PPO

    env = SlowStep(sleep_s) if sleep_s else "CartPole-v1"
    return PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=BATCH, n_epochs=EPOCHS, seed=0, verbose=0, device="cpu")


def _counts(policy) -> dict[str, int]:
    """The test's own counts: optimizer steps (a step hook) and samples (training calls of the value head)."""
    counts = {"steps": 0, "samples": 0}

    def on_step(*_):
        counts["steps"] += 1

    def on_value_head(_module, args):
        if torch.is_grad_enabled():
            counts["samples"] += args[0].shape[0]

    policy.optimizer.register_step_post_hook(on_step)
    policy.value_net.register_forward_pre_hook(on_value_head)
    return counts


def test_sb3_ppo_trains_the_policy_counted_exactly_with_rollouts_in_their_own_phase(tmp_path, printed):
    bare = _ppo(STEP_SLEEP_S)  # the same sleeps: its wall time is the slack for the rollouts' own work under load
    with printed() as bare_printed:
        started_s = time.perf_counter()
        bare.learn(total_timesteps=TIMESTEPS)
        bare_s = time.perf_counter() - started_s
    model = _ppo(STEP_SLEEP_S)
    counts = _counts(model.policy)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=TIMESTEPS)
    p = passport(m)
    for name, value in bare.policy.state_dict().items():  # bit-identical, with and without trainmeter
        assert torch.equal(value, model.policy.state_dict()[name]), name
    assert bare.logger.name_to_value["train/loss"] == model.logger.name_to_value["train/loss"]
    assert m.steps == STEPS == counts["steps"] == model._n_updates * (N_STEPS // BATCH)  # SB3 counts epochs
    assert m.tokens == counts["samples"] == STEPS * BATCH and m.token_unit == "samples"
    assert logged(m, "train_loss")[-1][1] == pytest.approx(model.logger.name_to_value["train/loss"], rel=1e-6)
    # the model is the policy (every parameter in the optimizer), not a head it calls
    policy_params = sum(q.numel() for q in model.policy.parameters())
    assert p["params"]["trained"] == p["params"]["root_total"] == policy_params == 9155
    assert [lane["model"] for lane in p["lanes"]] == ["ActorCriticPolicy"]
    assert p["compute"]["parameters"] == {"total": policy_params, "trained": policy_params, "frozen": 0}
    # its FLOPs are a pass of the method it is trained through (never the head's): 52,352 FLOP/sample
    assert p["compute"]["counted_flops_per_token"] == 52352 and p["compute"]["counted_missing"] is None
    # the rollouts (policy in eval mode, under no_grad) are their own phase, not evaluation
    assert p["phases_s"]["eval"] == 0.0
    slept_s = model.get_env().envs[0].env.slept_s  # inside SB3's Monitor wrapper
    assert TIMESTEPS * STEP_SLEEP_S <= slept_s
    assert within(p["phases_s"]["rollout"], slept_s, bare_s), (p["phases_s"], bare_s)
    assert p["frameworks"]["fits"] == {"stable-baselines": 1}
    assert printed_by_us(bare_printed, ours) == [] and p["warnings"] == []


def test_sb3_ppo_counted_flops_are_one_evaluate_actions_pass_as_flop_counter_mode_counts_it(tmp_path, monkeypatch):
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.policies import ActorCriticPolicy
    from torch.utils.flop_counter import FlopCounterMode

    class ReportAfterFirstUpdate(BaseCallback):  # the counted pass runs mid-training, between two train() calls
        def _on_rollout_start(self):
            if self.model._n_updates >= EPOCHS:
                m.report_now()

        def _on_step(self):
            return True

    bare = _ppo()
    bare.learn(total_timesteps=TIMESTEPS)
    model = _ppo()
    first = []  # the test's own batch: the first training call of evaluate_actions
    evaluate_actions = ActorCriticPolicy.evaluate_actions

    def keep_first(policy, *args):
        if policy is model.policy and torch.is_grad_enabled() and not first:
            first.append(args)
        return evaluate_actions(policy, *args)

    monkeypatch.setattr(ActorCriticPolicy, "evaluate_actions", keep_first)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=TIMESTEPS, callback=ReportAfterFirstUpdate())
    p = passport(m)
    for name, value in bare.policy.state_dict().items():  # the pass mid-training changed nothing of theirs
        assert torch.equal(value, model.policy.state_dict()[name]), name
    assert bare.logger.name_to_value["train/loss"] == model.logger.name_to_value["train/loss"]
    assert m.steps == STEPS and m.tokens == STEPS * BATCH  # the copy's pass counted no step or sample
    obs, actions = first[0]
    with FlopCounterMode(display=False) as counter:  # one forward and backward of every output, as PPO's loss
        values, log_prob, entropy = model.policy.evaluate_actions(obs, actions)
        torch.autograd.grad(values.sum() + log_prob.sum() + entropy.sum(), list(model.policy.parameters()))
    assert p["compute"]["counted_flops_per_token"] == counter.get_total_flops() / obs.shape[0] == 52352
    counted = next(d for d in p["derivations"] if d["name"] == "flops_per_token.counted")
    assert counted["unit"] == "FLOP/sample" and [i["provenance"] for i in counted["inputs"]] == ["counted"] * 2
    assert "evaluate_actions" in counted["inputs"][0]["source"] and p["warnings"] == []


def test_sb3_eval_callback_evaluation_is_eval_inside_a_rollout(tmp_path):
    from stable_baselines3.common.callbacks import EvalCallback

    model = _ppo()
    env = SlowStep(EVAL_SLEEP_S)
    evals = EvalCallback(env, n_eval_episodes=1, eval_freq=2 * N_STEPS, verbose=0, warn=False)
    spent_s = []  # the test's own clock around the callback's steps, which hold every evaluation
    on_step = evals._on_step

    def timed() -> bool:
        started_s = time.perf_counter()
        try:
            return on_step()
        finally:
            spent_s.append(time.perf_counter() - started_s)

    evals._on_step = timed
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=TIMESTEPS, callback=evals)
    p = passport(m)
    assert sum(sum(lengths) for lengths in evals.evaluations_length) * EVAL_SLEEP_S <= env.slept_s
    # the sleeps inside the evaluations, and no more than the callback's own time (a busy machine stretches the
    # policy's own work there, so a fixed slack over the sleeps alone failed beside other tests)
    assert env.slept_s <= p["phases_s"]["eval"] <= sum(spent_s), (p["phases_s"], env.slept_s, sum(spent_s))
    assert m.steps == STEPS and p["warnings"] == []


def test_sb3_stop_control_ends_learn_at_the_next_env_step(tmp_path):
    from stable_baselines3.common.callbacks import BaseCallback

    model = _ppo()

    class StopAfterFirstUpdate(BaseCallback):
        def _on_rollout_start(self):
            if self.model._n_updates:  # the second rollout: one train() done
                control = m.extension("frameworks").control
                assert control.name == "stable-baselines" and control.request_stop() is True

        def _on_step(self):
            return True

    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=TIMESTEPS, callback=StopAfterFirstUpdate())
    assert m.steps == EPOCHS * (N_STEPS // BATCH) and model.num_timesteps == N_STEPS + 1
    assert m.extension("frameworks").control is None  # learn is over


def test_sb3_model_save_is_one_checkpoint_of_the_zip_it_wrote(tmp_path):
    model = _ppo()
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=N_STEPS)
        model.save(tmp_path / "ppo")
    p = passport(m)
    zipped = tmp_path / "ppo.zip"
    assert [(Path(c["path"]), c["bytes"]) for c in p["checkpoints"]] == [(zipped, zipped.stat().st_size)]


def test_sb3_an_exception_inside_a_rollout_reaches_the_user_unchanged(tmp_path):
    from stable_baselines3.common.callbacks import BaseCallback

    class Fails(BaseCallback):
        def _on_step(self):
            raise KeyError("the user's own")

    model = _ppo()
    with pytest.raises(KeyError, match="the user's own"), tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.learn(total_timesteps=N_STEPS, callback=Fails())
    p = passport(m)
    assert p["status"] == "failed" and p["phases_s"]["rollout"] > 0 and p["warnings"] == []
    assert m.extension("frameworks").control is None
