"""Fake GPU backends: ``fake`` (NVML, with ``fake_profiles``, ``fake_timeline``, ``fake_mig``) and ``amdsmi_fake``."""
