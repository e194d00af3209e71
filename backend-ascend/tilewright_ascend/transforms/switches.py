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

These keys, and ``ascend.exception_dump``, belong to the adapter tree only. A kernel written in
the mainline dialect (``tilewright_ascend.language.mainline``) with any of them is refused with
the seed's explanation, and a kernel of either dialect tree compiled for the target of the
other is refused naming both (:func:`check_tree`).
"""

from __future__ import annotations

import tvm_ffi
from tilewright.errors import ConfigError, KernelError, span_location
from tilewright.ir import tile_ops_in
from tilewright.plugin import PassConfigKey
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.accesses import has_manual_sync
from ..facts import ops
from ..facts.arch import arch_of
from ..facts.keys import PORTABLE_KEY, TREE_KEY
from ..language.trees import MAINLINE, TREES

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
# the pass configs of the adapter tree that TileLang mainline's Ascend dialect does not have
# (A tree: tilelang/transform/pass_config.py; the plugin declares ascend.exception_dump)
ADAPTER_ONLY = {**_TILELANG, "ascend.exception_dump": "TL_ASCEND_EXCEPTION_DUMP"}


def _off(ctx, key: str) -> bool:
    return ctx.pass_configs.get(key, True) is False


def _kernel(func) -> str:
    return str((func.attrs or {}).get("global_symbol", "main"))


def _named(key: str) -> str:
    return f"pass config {key!r} (TileLang {_TILELANG[key]})"


def tree_of(func):
    """The dialect tree a kernel is written in and its kernel loop, or (None, None)."""
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: found.append(f)
                                        if TREE_KEY in f.annotations else None))
    return (TREES[str(found[0].annotations[TREE_KEY])], found[0]) if found else (None, None)


def check_tree(ctx):
    """A dialect kernel is compiled for the target its tree speaks; a mainline kernel takes
    none of the adapter tree's pass configs."""
    arch = arch_of(ctx.target)
    given = [key for key in ADAPTER_ONLY if key in ctx.pass_configs]

    def run(func):
        tree, loop = tree_of(func)
        if tree is None:
            return func
        if tree.target != arch.kind:
            other = next(t for t in TREES.values() if t.target == arch.kind)
            raise KernelError(
                f"kernel {_kernel(func)!r} is written in {tree.describe()}, but target "
                f"{arch.kind!r} ({arch.family}, {arch.name}) compiles kernels of "
                f"{other.describe()} and portable ones: compile it for target "
                f"{tree.target!r}", span_location(loop.span))
        if tree is MAINLINE and given:
            names = ", ".join(f"{k!r} ({ADAPTER_ONLY[k]})" for k in given)
            raise ConfigError(
                f"pass config{'s' if len(given) > 1 else ''} {names} exist"
                f"{'' if len(given) > 1 else 's'} only in the tilelang-ascend adapter tree (its "
                "tilelang/transform/pass_config.py); kernel "
                f"{_kernel(func)!r} is written in {MAINLINE.describe()}, which has no "
                "TL_ASCEND_* keys: it always synchronises, plans memory and combines cube and "
                "vector work itself. Copied into a mainline kernel such keys do nothing at best "
                "and are unknown keys at worst; remove them from pass_configs.")
        return func

    return prim_func_pass("AscendCheckTree", run)


def before_portable(ctx) -> list:
    """Checks on the kernel as written, run before the portable phase converts it."""
    if not _off(ctx, AUTO_SYNC):
        return [check_tree(ctx)]

    def run(func):
        if not has_manual_sync(func):
            raise ConfigError(
                f"{_named(AUTO_SYNC)} is False, but kernel {_kernel(func)!r} has no hand-written "
                "intra-core synchronisation (T.set_flag / T.wait_flag / T.pipe_barrier / "
                "T.barrier_all): tilewright-ascend always inserts the flags of such a kernel "
                "itself. Remove the key (or set it True), or synchronise the kernel by hand.")
        return func

    return [check_tree(ctx), prim_func_pass("AscendCheckManualSync", run)]


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
