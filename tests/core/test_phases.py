from trainmeter.core.clock import FakeClock
from trainmeter.core.phases import PhaseClock


def test_training_segments_accumulate_and_aux_phases_are_credited_separately():
    clock = FakeClock()
    syncs = []
    pc = PhaseClock(clock, lambda: syncs.append(clock()))
    pc.begin()
    pc.resume_train()
    clock.advance(3)
    assert pc.pause_train() == 3
    start = clock()
    clock.advance(2)
    pc.finish_phase("eval", start)
    pc.resume_train()
    clock.advance(1)
    pc.pause_train()
    assert pc.totals_s["train"] == 4 and pc.totals_s["eval"] == 2
    assert pc.session_elapsed_s(clock()) == 6
    assert pc.take_window_train_s() == 4 and pc.window_train_s == 0
    assert len(syncs) == 6  # begin, resume, pause, finish, resume, pause: transitions only


def test_pause_without_open_segment_is_zero_and_does_not_sync():
    syncs = []
    pc = PhaseClock(FakeClock(), lambda: syncs.append(1))
    assert pc.pause_train() == 0.0
    assert syncs == []


def test_carve_moves_time_from_the_open_segment_without_sync():
    clock = FakeClock()
    syncs = []
    pc = PhaseClock(clock, lambda: syncs.append(1))
    pc.begin()
    pc.resume_train()
    n = len(syncs)
    clock.advance(10)
    pc.carve("data_wait", 4)
    assert len(syncs) == n
    pc.pause_train()
    assert pc.totals_s["train"] == 6 and pc.totals_s["data_wait"] == 4


def test_totals_now_includes_the_open_segment():
    clock = FakeClock()
    pc = PhaseClock(clock)
    pc.begin()
    pc.resume_train()
    clock.advance(5)
    assert pc.totals_now()["train"] == 5 and pc.totals_s["train"] == 0


def test_custom_phase_names_are_accepted():
    clock = FakeClock()
    pc = PhaseClock(clock)
    pc.finish_phase("warmup", clock())
    assert pc.totals_s["warmup"] == 0
