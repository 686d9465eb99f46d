"""tm.doctor(): one line per check, with fixes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.fakes.gpu.fake import FakeNvml, open_fake
from trainmeter.checkup import Check, doctor, format_doctor
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import REASON_LIBRARY_NOT_FOUND, REASON_PYNVML_MISSING, GpuBackendResult

VERSIONS = {"anywidget": "0.11.0", "ipywidgets": "8.1.9", "ipykernel": "7.4.0", "psutil": "7.2.2"}


class ZMQInteractiveShell:
    pass


class TerminalInteractiveShell:
    pass


def _torch(cuda: str | None = "12.8", available: bool = True, count: int = 2) -> Any:
    return SimpleNamespace(
        __version__="2.13.0",
        version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(is_available=lambda: available, device_count=lambda: count),
    )


def _run(**kw: Any) -> dict[str, Check]:
    kw.setdefault("ipython", ZMQInteractiveShell())
    kw.setdefault("version_of", VERSIONS.get)
    kw.setdefault("torch_module", _torch())
    kw.setdefault("modules", {})
    kw.setdefault("env", {})
    kw.setdefault("open_backend", lambda: open_fake(failure="library_missing"))
    return {c.name: c for c in doctor(**kw)}


def test_all_good_on_a_hopper_jupyter_machine() -> None:
    fake = FakeNvml(["h100_sxm", "a100"], clock=FakeClock())
    checks = _run(backend=fake)
    assert checks["front end"].ok and "Jupyter" in checks["front end"].detail
    assert checks["widget manager"].ok and checks["ipykernel"].ok and checks["torch"].ok
    assert checks["CUDA"].ok and "2 device(s)" in checks["CUDA"].detail
    assert checks["NVML"].ok and "595.45.04" in checks["NVML"].detail
    assert checks["GPU 0"].ok and "H100" in checks["GPU 0"].detail
    assert checks["GPM GPU 0"].ok is True
    assert checks["GPM GPU 1"].ok is None and "Hopper" in checks["GPM GPU 1"].detail
    assert checks["psutil"].ok
    assert not fake.closed  # a backend passed in is not closed


def test_ipykernel_7_mentions_explicit_parent_routing() -> None:
    assert "explicit parent routing" in _run()["ipykernel"].detail
    older = _run(version_of={**VERSIONS, "ipykernel": "6.29.5"}.get)["ipykernel"]
    assert older.ok and "most recently run cell" in older.detail


def test_missing_widget_packages_fail_with_pip_fix() -> None:
    c = _run(version_of={"ipykernel": "7.4.0", "psutil": "7"}.get)["widget manager"]
    assert c.ok is False and c.fix == "pip install anywidget ipywidgets, then restart the kernel"


def test_colab_gets_custom_widget_manager_fix() -> None:
    c = _run(modules={"google.colab": object()})
    assert "Google Colab" in c["front end"].detail
    assert "enable_custom_widget_manager" in (c["widget manager"].fix or "")


def test_outside_jupyter_front_end_is_not_applicable() -> None:
    assert _run(ipython=None)["front end"].ok is None
    assert _run(ipython=TerminalInteractiveShell())["front end"].ok is None


def test_cpu_only_machine_marks_cuda_and_nvml_not_applicable() -> None:
    checks = _run(torch_module=_torch(cuda=None, available=False, count=0))
    assert checks["CUDA"].ok is None and checks["NVML"].ok is None
    assert REASON_LIBRARY_NOT_FOUND in checks["NVML"].detail


def test_nvml_missing_with_cuda_present_fails_with_fix() -> None:
    checks = _run(open_backend=lambda: GpuBackendResult(backend=None, reason=REASON_PYNVML_MISSING))
    assert checks["NVML"].ok is False and checks["NVML"].fix == "pip install nvidia-ml-py"


def test_torch_missing_and_cuda_unusable_fail() -> None:
    assert _run(torch_module=None)["torch"].ok is False
    assert _run(torch_module=_torch(available=False))["CUDA"].ok is False


def test_opened_backend_is_closed_and_mig_and_unopenable_devices_explained() -> None:
    fake = FakeNvml(["h100_mig", "h200"], clock=FakeClock())
    fake.inject(1, "unopenable")
    checks = _run(open_backend=lambda: open_fake(fake))
    assert checks["GPM GPU 0"].ok is None and "MIG" in checks["GPM GPU 0"].detail
    assert checks["GPU 1"].ok is False and "no permission" in checks["GPU 1"].detail
    assert fake.closed


def test_backend_that_raises_is_reported_not_raised() -> None:
    def boom() -> GpuBackendResult:
        raise RuntimeError("bad lib")

    assert "bad lib" in _run(open_backend=boom)["NVML"].detail


def test_psutil_missing_fails_with_fix() -> None:
    c = _run(version_of={k: v for k, v in VERSIONS.items() if k != "psutil"}.get)["psutil"]
    assert c.ok is False and c.fix == "pip install psutil"


def test_format_doctor_one_line_per_check_with_fix() -> None:
    text = format_doctor(
        [
            Check(name="NVML", ok=True, detail="driver 1"),
            Check(name="psutil", ok=False, detail="missing", fix="pip install psutil"),
            Check(name="GPM GPU 0", ok=None, detail="no GPM"),
        ]
    )
    assert text.splitlines() == [
        "[ ok ] NVML: driver 1",
        "[FAIL] psutil: missing  (fix: pip install psutil)",
        "[n/a ] GPM GPU 0: no GPM",
    ]


def test_real_doctor_on_this_machine_never_raises() -> None:
    checks = doctor()
    assert {"front end", "widget manager", "ipykernel", "torch", "NVML", "psutil"} <= {c.name for c in checks}
    assert len(format_doctor(checks).splitlines()) == len(checks)


def test_a_gpu_line_prints_memory_and_utilisation_as_the_widget_does() -> None:
    from trainmeter.sizes import format_bytes, format_percent

    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    info, sample = fake.device_info(0), fake.sample(0)
    detail = _run(backend=fake)["GPU 0"].detail
    assert f", {format_bytes(info.mem_total_bytes)};" in detail
    assert f"GPU-Util {format_percent(sample.util_gpu)}," in detail


def test_every_host_patch_is_listed_with_what_it_touches_its_switch_and_its_check() -> None:
    from trainmeter.core.host_patches import PATCHES

    checks = _run(env={"TRAINMETER_DISABLE": "reload"}, modules={})
    for patch in PATCHES:
        line = checks[f"patch {patch.key}"]
        assert patch.touches in line.detail and "check: " in line.detail
    reload = checks["patch reload"]
    assert reload.ok is None and "switched off by TRAINMETER_DISABLE" in reload.detail and "reload" in reload.fix
    assert checks["patch taps"].ok and "enabled" in checks["patch taps"].detail
    assert "TRAINMETER_DISABLE" not in checks  # every key was known


def test_a_host_patch_whose_private_name_is_missing_is_shown_refused_or_on_its_fallback() -> None:
    fake_torch = SimpleNamespace(amp=SimpleNamespace(grad_scaler=SimpleNamespace(GradScaler=type("GradScaler", (), {}))),
                                 compiler=SimpleNamespace())
    checks = _run(modules={"torch": fake_torch})
    scaler = checks["patch grad-scaler"]
    assert scaler.ok is False and "refused" in scaler.detail and "GradScaler.scale not found" in scaler.detail
    call = checks["patch call-wrapper"]
    assert call.ok is True and "torch.compiler.is_compiling() is read instead" in call.detail


def test_unknown_kill_switch_keys_are_named_with_the_valid_ones() -> None:
    c = _run(env={"TRAINMETER_DISABLE": "reload,relaod"})["TRAINMETER_DISABLE"]
    assert c.ok is False and "relaod" in c.detail
    assert c.fix is not None and "autostart" in c.fix and "reload" in c.fix


def test_doctor_says_which_gpu_backend_is_in_use() -> None:
    from tests.fakes.gpu.amdsmi_fake import FakeAmdSmi
    from trainmeter.gpu.amdsmi_backend import open_amdsmi

    nvidia = _run(backend=FakeNvml(["h100_sxm"], clock=FakeClock()))
    assert nvidia["GPU backend"].ok and "FakeNvml" in nvidia["GPU backend"].detail
    amd = _run(backend=open_amdsmi(module=FakeAmdSmi()).backend)
    assert amd["GPU backend"].detail == "amdsmi (ROCm) is in use"
    assert amd["amdsmi"].ok and "1 GPU(s)" in amd["amdsmi"].detail
    assert "MI300X" in amd["GPU 0"].detail and "GFX activity 87.0%" in amd["GPU 0"].detail
    assert amd["counters GPU 0"].ok is None and "matrix core" in amd["counters GPU 0"].detail


def test_nvml_backend_is_named_nvml() -> None:
    from trainmeter.gpu.backend import backend_name
    from trainmeter.gpu.nvml import NvmlBackend

    assert backend_name(NvmlBackend.__new__(NvmlBackend)) == "NVML (nvidia-ml-py)"


class _Kernel:
    kernel_info = {"supported_features": ["kernel subshells"]}


def test_ipykernel_7_kernel_subshells_are_reported_and_advertised() -> None:
    shell = ZMQInteractiveShell()
    shell.kernel = _Kernel()
    checks = _run(ipython=shell, lab_settings=[])
    assert checks["kernel subshells"].ok and "advertises them" in checks["kernel subshells"].detail
    old = _run(version_of={**VERSIONS, "ipykernel": "6.29.5"}.get, lab_settings=[])["kernel subshells"]
    assert old.ok is False and old.fix == "pip install 'ipykernel>=7', then restart the kernel"


def test_jupyterlab_comms_over_subshells_setting_is_read_from_the_settings_files(tmp_path) -> None:
    versions = {**VERSIONS, "jupyterlab": "4.5.1"}.get
    unset = _run(version_of=versions, lab_settings=[str(tmp_path / "missing.json")])["comms over subshells"]
    assert unset.ok and "default applies" in unset.detail and "19719" in unset.detail
    settings = tmp_path / "tracker.jupyterlab-settings"
    settings.write_text('{\n  // comment\n  "commsOverSubshells": "disabled"\n}\n')
    off = _run(version_of=versions, lab_settings=[str(settings)])["comms over subshells"]
    assert off.ok is False and "'disabled'" in off.detail and "perCommTarget" in off.fix
    settings.write_text('{"commsOverSubshells": "perComm"}')
    on = _run(version_of=versions, lab_settings=[str(settings)])["comms over subshells"]
    assert on.ok and "'perComm'" in on.detail


def test_comms_over_subshells_not_applicable_without_jupyterlab_or_before_4_4() -> None:
    assert _run(lab_settings=[])["comms over subshells"].ok is None
    old = _run(version_of={**VERSIONS, "jupyterlab": "4.3.8"}.get, lab_settings=[])["comms over subshells"]
    assert old.ok is None and "predates" in old.detail


def test_settings_directory_is_searched_by_default(tmp_path) -> None:
    folder = tmp_path / "@jupyterlab" / "notebook-extension"
    folder.mkdir(parents=True)
    (folder / "tracker.jupyterlab-settings").write_text('{"commsOverSubshells": "disabled"}')
    checks = _run(version_of={**VERSIONS, "jupyterlab": "4.5.1"}.get, env={"JUPYTERLAB_SETTINGS_DIR": str(tmp_path)})
    assert checks["comms over subshells"].ok is False
