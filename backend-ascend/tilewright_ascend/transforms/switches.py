"""TileLang-Ascend's automation switches as pass configs.

TileLang-Ascend kernels switch on automatic synchronisation, memory planning and cube/vector
handling with ``TL_ASCEND_AUTO_SYNC``, ``TL_ASCEND_MEMORY_PLANNING``, ``TL_ASCEND_AUTO_CV_SYNC``
and ``TL_ASCEND_AUTO_CV_COMBINE``. This backend does each of these by default, so the keys
default to True and setting them True changes nothing. False asks for the manual mode:

- ``ascend.auto_sync``: the kernel's own intra-core flags are its only synchronisation. The
  backend does exactly that for a kernel with any ``set_flag``/``wait_flag``/``pipe_barrier``/
  ``barrier_all``; a kernel with none of them is refused (it would race).
- ``ascend.memory_planning``: no reuse by liveness: every on-chip buffer gets bytes of its own
  (``T.annotate_address`` placements are kept), as TileLang-Ascend's linear placement.
- ``ascend.auto_cv_sync`` / ``ascend.auto_cv_combine``: the cube/vector structure and the
  cross-core flags are the kernel's own (``T.Scope``, ``T.set_cross_flag``); a portable kernel
  that needs both cores, which the backend would split into two programs joined by flags it
  inserts, is refused.
"""

from __future__ import annotations

from tilewright.errors import ConfigError
from tilewright.ir import tile_ops_in
from tilewright.plugin import PassConfigKey
from tilewright.transform.walk import prim_func_pass

from ..analysis.accesses import has_manual_sync
from ..facts import ops
from ..facts.keys import PORTABLE_KEY

AUTO_SYNC = "ascend.auto_sync"
MEMORY_PLANNING = "ascend.memory_planning"
AUTO_CV_SYNC = "ascend.auto_cv_sync"
AUTO_CV_COMBINE = "ascend.auto_cv_combine"

KEYS = (
    PassConfigKey(AUTO_SYNC, bool, True,
                  "insert intra-core set/wait flags in kernels without hand-written ones; False: "
                  "the kernel's own flags are its only synchronisation (a kernel without any is "
                  "refused)", owner="ascend",
                  tilelang="TL_ASCEND_AUTO_SYNC", tilelang_value="tl.ascend_auto_sync"),
    PassConfigKey(MEMORY_PLANNING, bool, True,
                  "on-chip buffers never live together share bytes; False: every buffer gets "
                  "bytes of its own", owner="ascend",
                  tilelang="TL_ASCEND_MEMORY_PLANNING", tilelang_value="tl.ascend_memory_planning"),
    PassConfigKey(AUTO_CV_SYNC, bool, True,
                  "insert the cross-core flags of a portable kernel split into cube and vector "
                  "programs; False: refuse kernels that need the split", owner="ascend",
                  tilelang="TL_ASCEND_AUTO_CV_SYNC",
                  tilelang_value="tl.ascend_auto_cross_core_sync"),
    PassConfigKey(AUTO_CV_COMBINE, bool, True,
                  "split a portable kernel that uses both cores into cube and vector programs "
                  "of one mixed kernel; False: refuse kernels that need the split",
                  owner="ascend",
                  tilelang="TL_ASCEND_AUTO_CV_COMBINE", tilelang_value="tl.ascend_auto_cv_combine"),
)

_TILELANG = {k.name: k.tilelang for k in KEYS}


def _off(ctx, key: str) -> bool:
    return ctx.pass_configs.get(key, True) is False


def _kernel(func) -> str:
    return str((func.attrs or {}).get("global_symbol", "main"))


def _named(key: str) -> str:
    return f"pass config {key!r} (TileLang {_TILELANG[key]})"


def before_portable(ctx) -> list:
    """Checks on the kernel as written, run before the portable phase converts it."""
    if not _off(ctx, AUTO_SYNC):
        return []

    def run(func):
        if not has_manual_sync(func):
            raise ConfigError(
                f"{_named(AUTO_SYNC)} is False, but kernel {_kernel(func)!r} has no hand-written "
                "intra-core synchronisation (T.set_flag / T.wait_flag / T.pipe_barrier / "
                "T.barrier_all): tilewright-ascend always inserts the flags of such a kernel "
                "itself. Remove the key (or set it True), or synchronise the kernel by hand.")
        return func

    return [prim_func_pass("AscendCheckManualSync", run)]


def after_portable(ctx) -> list:
    """Checks on the converted kernel: whether the portable phase split it over the cores."""
    off = [key for key in (AUTO_CV_SYNC, AUTO_CV_COMBINE) if _off(ctx, key)]
    if not off:
        return []
    cross = ops.SET_CROSS_FLAG.name

    def run(func):
        split = bool((func.attrs or {}).get(PORTABLE_KEY)) and any(
            call.name == cross for call in tile_ops_in(func))
        if split:
            raise ConfigError(
                f"{' and '.join(_named(k) for k in off)} False, but kernel {_kernel(func)!r} "
                "uses both the cube and the vector cores: tilewright-ascend always splits such a "
                "portable kernel into cube and vector programs and inserts their cross-core "
                "flags itself. Remove the key (or set it True), or write the kernel in the "
                "Ascend dialect with T.Scope('C') / T.Scope('V') and T.set_cross_flag / "
                "T.wait_cross_flag.")
        return func

    return [prim_func_pass("AscendCheckManualCrossCore", run)]


def plan_reuse(ctx) -> bool:
    """Whether the memory plan lets buffers that are never live together share bytes."""
    return not _off(ctx, MEMORY_PLANNING)
