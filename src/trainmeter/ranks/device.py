"""Which GPU this rank trains on, by UUID (docs/spec.md section 19, "Each rank's device and ladder").

Never creates a CUDA context or imports torch. Any thread; never raises.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any


def _uuid_text(raw: Any) -> str:
    text = str(raw)
    return text if text[:4].upper() in ("GPU-", "MIG-") else "GPU-" + text


def rank_device(environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """This rank's device ``{"uuid", "cuda_ordinal", "nvml_index", "how", "provenance"}`` (``uuid`` ``None`` with an
    assumed ``nvml_index``), or ``None`` (no GPU, or nothing says which); ``environ``, ``modules``: for tests."""
    env = os.environ if environ is None else environ
    mods = sys.modules if modules is None else modules
    torch = mods.get("torch")
    if torch is not None:
        try:
            cuda = torch.cuda
            if not cuda.is_initialized():
                return None
            held = [i for i in range(int(cuda.device_count())) if cuda.memory_reserved(i) > 0]
            if len(held) == 1:
                ordinal, how = held[0], "the one CUDA device where this rank's allocator holds memory"
            else:
                ordinal, how = int(cuda.current_device()), "torch.cuda.current_device() of this rank"
            uuid = _uuid_text(cuda.get_device_properties(ordinal).uuid)
            return {"uuid": uuid, "cuda_ordinal": ordinal, "nvml_index": None, "how": how, "provenance": "detected"}
        except Exception:  # noqa: BLE001 - detection never raises into training
            return None
    try:
        ordinal = int(env.get("LOCAL_RANK", ""))
    except ValueError:
        return None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return {"uuid": None, "cuda_ordinal": ordinal, "nvml_index": ordinal, "provenance": "assumed",
                "how": "LOCAL_RANK as the CUDA ordinal; CUDA order assumed equal to NVML order"}
    entries = [e.strip() for e in cvd.split(",") if e.strip()]
    if ordinal >= len(entries):
        return None
    entry = entries[ordinal]
    if entry.upper().startswith("GPU-"):
        return {"uuid": "GPU-" + entry[4:].lower(), "cuda_ordinal": ordinal, "nvml_index": None,
                "provenance": "detected", "how": "CUDA_VISIBLE_DEVICES entry LOCAL_RANK (a UUID)"}
    if entry.isdigit():
        return {"uuid": None, "cuda_ordinal": ordinal, "nvml_index": int(entry), "provenance": "assumed",
                "how": "CUDA_VISIBLE_DEVICES entry LOCAL_RANK; CUDA order assumed equal to NVML order"}
    return None
