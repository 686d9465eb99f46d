"""format_text: docs/spec.md section 7's step line from a run (memory, framework aliases, extension fields)."""

from types import SimpleNamespace

from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.memory import MemoryReading
from trainmeter.core.series import Series
from trainmeter.core.throughput import interval_summary
from trainmeter.record.recorder import format_text


def _run(series, memory=None, extensions=()):
    store = {}
    for name, value in series.items():
        store[name] = Series(name)
        store[name].append(10, 1.0, value)
    return SimpleNamespace(steps=10, token_unit="tokens", series=store, memory=memory,
                           text_fields=Dispatcher(extensions).text_fields,  # the context's fan-out (core/context.py)
                           interval=interval_summary(tokens=125_000, steps=10, train_s=1.0))


class _Ext:
    name = "optim"

    def text_fields(self):
        return {"loss_ema": (2.41, 50)}


def test_cuda_line_shows_the_interval_peak_over_the_device_total_and_the_smoothed_loss():
    cuda = {"allocated_bytes": 60 * 2**30, "peak_allocated_bytes": int(71.2 * 2**30), "device_total_bytes": 80 * 2**30}
    run = _run({"train_loss": 2.34, "lr": 3e-4, "grad_norm": 1.2},
               memory=MemoryReading(rss_bytes=1, rss_peak_bytes=1, cuda=cuda), extensions=[_Ext()])
    assert format_text(run) == ("[step 10] loss=2.34 (ema~50 2.41) | lr=3.00e-04 | grad_norm=1.2 | train_tok/s=125k"
                                " | mem=71.2/80GiB")


def test_cpu_line_shows_rss_over_host_memory():
    memory = MemoryReading(rss_bytes=2**30, rss_peak_bytes=2**30, cuda=None, host_total_bytes=16 * 2**30)
    assert format_text(_run({}, memory=memory)) == "[step 10] train_tok/s=125k | mem=1.0/16GiB"


def test_hugging_face_and_lightning_names_fill_lr_and_grad_norm():
    line = format_text(_run({"loss": 1.5, "learning_rate": 5e-5, "grad_2.0_norm_total": 0.25}))
    assert line == "[step 10] loss=1.5 | lr=5.00e-05 | grad_norm=0.25 | train_tok/s=125k"  # loss in its own place


def test_the_closing_line_prints_the_session_rate_as_a_rate():
    from trainmeter.core.throughput import session_summary
    from trainmeter.record.recorder import summary_line

    run = SimpleNamespace(options=SimpleNamespace(name="r"), status="completed", steps=1_150, tokens=1_150_000,
                          token_unit="tokens", run_dir="runs/r", session=session_summary(tokens=8_504, elapsed_s=10.0))
    assert summary_line(run) == ("trainmeter: run 'r' completed after 1150 steps, 1.1M tokens, 850 tokens/s (session); "
                                 "passport in runs/r")
