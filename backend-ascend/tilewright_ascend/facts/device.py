"""Whether this machine has an NPU: the probe the plugin, its executor and profiler use, and
the one its distribution declares (entry-point group ``tilewright.devices``) so that target
``"auto"`` asks it without importing the backend."""

from __future__ import annotations

import importlib.util
import os
import shutil

from tilewright.plugin import Availability


def npu_available() -> Availability:
    """Whether CANN, bisheng and torch_npu are present; never imports torch_npu."""
    missing = []
    if not os.environ.get("ASCEND_HOME_PATH"):
        missing.append("ASCEND_HOME_PATH is not set (source ascend-toolkit/set_env.sh)")
    if shutil.which("bisheng") is None:
        missing.append("bisheng is not on PATH (part of CANN)")
    if importlib.util.find_spec("torch_npu") is None:
        missing.append("torch_npu is not installed")
    return Availability(not missing, "; ".join(missing))


def device_present() -> Availability:
    """The backend's device probe: an NPU, else why not (kernels then run on the emulator)."""
    npu = npu_available()
    if npu:
        return npu
    return Availability(False, f"no NPU here ({npu.reason}); kernels run on the CPU emulator")
