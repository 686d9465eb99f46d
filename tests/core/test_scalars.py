import pytest

from trainmeter.core.scalars import ScalarReader


def test_python_numbers_are_read_directly():
    r = ScalarReader()
    assert r.read(2, "k") == 2.0 and r.read(1.5, "k") == 1.5


def test_cpu_zero_dim_tensor_is_read_without_deferral():
    torch = pytest.importorskip("torch")
    r = ScalarReader()
    assert r.read(torch.tensor(3.5, requires_grad=True) * 1, "k") == 3.5
    assert r.pending == 0


def test_non_scalars_are_rejected_with_the_shape():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"\(2,\)"):
        ScalarReader().read(torch.zeros(2), "k")
    with pytest.raises(TypeError, match="str"):
        ScalarReader().read("x", "k")


def test_numpy_scalars_are_accepted():
    np = pytest.importorskip("numpy")
    assert ScalarReader().read(np.float32(0.5), "k") == 0.5


class DeferringReader(ScalarReader):
    """Defers every value as a CUDA read would; ``poll()`` makes every copy land."""

    def read(self, value, key):
        self.queue.append((key, float(value), None))
        return None

    def poll(self):
        done = [(key, value) for key, value, _ in self.queue]
        self.queue.clear()
        return done


def test_a_step_loss_is_the_sum_of_value_over_scale_once_every_deferred_part_is_read():
    from trainmeter.core.scalars import StepLoss

    reader = DeferringReader()
    loss = StepLoss("train_loss")
    loss.add(reader, 65536.0 * 1.5, 65536.0, divided=True)
    loss.add(reader, 2.5, divided=True)
    assert not loss.ready and loss.value() is None
    for (step_loss, index, field), value in reader.poll():
        step_loss.resolve(index, field, value)
    assert loss.ready and loss.value() == 4.0
    assert loss.scaled and loss.divided and not loss.ambiguous


def test_several_backward_calls_without_a_division_are_ambiguous():
    from trainmeter.core.scalars import StepLoss

    loss = StepLoss("train_loss")
    reader = ScalarReader()
    loss.add(reader, 1.0, divided=False)
    loss.add(reader, 2.0, divided=True)
    assert loss.ready and loss.value() == 3.0 and loss.ambiguous


def test_a_part_with_no_sync_free_read_leaves_the_step_out():
    from trainmeter.core.scalars import StepLoss

    class Unreadable(ScalarReader):
        def read(self, value, key):
            return None  # neither read nor deferred (an MPS tensor)

    loss = StepLoss("train_loss")
    loss.add(Unreadable(), 1.0)
    assert loss.ready and loss.broken and loss.value() is None


def test_deferred_step_losses_reach_the_series_in_step_order_after_the_next_step():
    from trainmeter.core.monitor import Monitor
    from trainmeter.core.scalars import StepLoss
    from trainmeter.options import make_options

    m = Monitor(make_options(run_dir=None, interval_s=3600), text=False, probes=False)
    reader = DeferringReader()
    m.steps_state.scalars = reader
    for i in range(3):
        loss = StepLoss("train_loss")
        loss.add(reader, float(i))
        m.on_step(1, loss)  # the read completes at the next poll, not now
    assert "train_loss" not in m.series or m.series["train_loss"].stats().count < 3
    m.steps_state.poll_scalars()
    m.steps_state.flush_losses(float("inf"))
    assert m.series["train_loss"].read(0)[1:4:2] == ([1, 2, 3], [0.0, 1.0, 2.0])
