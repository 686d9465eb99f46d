from trainmeter.core.throughput import interval_summary, ratio, session_summary


def test_interval_divides_by_training_seconds_only():
    s = interval_summary(tokens=1000, steps=10, train_s=2.0)
    assert s.train_tokens_per_s == 500 and s.seconds_per_step == 0.2


def test_session_divides_by_session_elapsed():
    assert session_summary(tokens=1000, elapsed_s=4.0).session_tokens_per_s == 250


def test_zero_durations_give_none_never_inf_or_zero():
    assert interval_summary(tokens=10, steps=0, train_s=0.0).train_tokens_per_s is None
    assert interval_summary(tokens=10, steps=0, train_s=1.0).seconds_per_step is None
    assert session_summary(tokens=10, elapsed_s=0.0).session_tokens_per_s is None
    assert ratio(1, -1) is None
