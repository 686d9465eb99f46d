"""The hot state: one slotted object, set by two methods, so a new run (or a forked child) misses nothing."""

from __future__ import annotations

import sys
import weakref

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.hot_state import NO_ROOT, HotState
from trainmeter.core.scalars import StepLoss


def test_it_has_slots_only_so_a_misspelt_field_raises_instead_of_hiding():
    hot = HotState(FakeClock(), 10.0)
    assert not hasattr(hot, "__dict__")
    with pytest.raises(AttributeError):
        hot.held_stpe = 3  # type: ignore[attr-defined]


def test_a_new_run_forgets_counters_held_and_pending_losses_and_queued_values():
    hot = HotState(FakeClock(), 10.0)
    old_series = hot.step_series
    hot.steps, hot.tokens = 5, 500
    hot.held_step, hot.held_t_s, hot.held_value = 5, 1.5, 2.0
    hot.user_loss = True
    hot.losses.append(StepLoss.read("train_loss", 1.0))
    hot.queued.append(({"x": 1.0}, 5))
    hot.new_run(100.0)
    assert (hot.steps, hot.tokens, hot.held_step, hot.user_loss) == (0, 0, 0, False)
    assert not hot.losses and not hot.queued and hot.captured_series is None
    assert hot.step_series is not old_series and hot.step_series.end == 0
    assert hot.t0_s == 100.0 and hot.next_report_s == 110.0


def test_a_new_run_keeps_the_step_hook_and_calls_it_at_the_first_step():
    hot = HotState(FakeClock(), 10.0)
    assert hot.hook_at == sys.maxsize  # no hook: no step reaches it
    hot.step_hook = lambda: None
    hot.hook_at = 1000  # the parent's sampling schedule
    hot.new_run(0.0)
    assert hot.step_hook is not None and hot.hook_at == 0


def test_the_probe_state_starts_with_no_fast_path_and_no_loss_parts():
    hot = HotState(FakeClock(), 10.0)
    root = FakeClock()  # any object a weak reference can name
    hot.fast_ref, hot.call_impl = weakref.ref(root), len
    hot.steady, hot.fast_parts, hot.fast_sum, hot.fast_first = True, 2, 3.5, object()
    hot.new_probe_state()
    assert (hot.fast_ref, hot.call_impl, hot.steady, hot.fast_backward, hot.backward_on) == (
        NO_ROOT, None, False, False, False)
    assert NO_ROOT() is not None and NO_ROOT() is not root  # never a module: the call wrapper's test is false
    assert (hot.fast_parts, hot.fast_sum, hot.fast_divided, hot.fast_first) == (0, 0.0, True, None)


def test_clearing_the_fast_loss_leaves_the_flags_and_the_batch_signature():
    hot = HotState(FakeClock(), 10.0)
    root = FakeClock()
    ref = weakref.ref(root)
    hot.fast_ref, hot.last_tokens, hot.fast_parts, hot.fast_divided = ref, 32, 2, False
    hot.clear_fast_loss()
    assert (hot.fast_ref, hot.last_tokens) == (ref, 32)
    assert (hot.fast_parts, hot.fast_divided) == (0, True)


def test_a_deferred_read_turns_the_inline_step_off():
    hot = HotState(FakeClock(), 10.0)
    hot.inline = True
    hot.scalars.on_defer()  # what ScalarReader calls when a CUDA read is deferred: the next step polls it
    assert hot.inline is False
