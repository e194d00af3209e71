"""TileLang-Ascend's pass configs (TL_ASCEND_AUTO_SYNC, ..._MEMORY_PLANNING, ..._AUTO_CV_SYNC,
..._AUTO_CV_COMBINE, ..._EXCEPTION_DUMP): True is what this backend always does, so ported
kernels compile unchanged; False asks for the manual mode, which a kernel that needs the
automation is refused with a ConfigError."""

import pytest
import tilewright
import tilewright.language as T
import tilewright_ascend.language as A
import torch
from tilewright.errors import ConfigError, KernelError
from tilewright_ascend.transforms.memory import read_plan

Key = tilewright.PassConfigKey
ALL_ON = {Key.TL_ASCEND_AUTO_SYNC: True, Key.TL_ASCEND_MEMORY_PLANNING: True,
          Key.TL_ASCEND_AUTO_CV_SYNC: True, Key.TL_ASCEND_AUTO_CV_COMBINE: True}


def scale_add(n=64, block=32):
    """Portable vector kernel: two UB tiles whose lives do not overlap."""

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"),
             Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            a = T.alloc_shared((block,), "float32")
            b = T.alloc_shared((block,), "float32")
            T.copy(X[bx * block], a)
            for i in T.Parallel(block):
                a[i] = a[i] * 2.0
            T.copy(a, Z[bx * block])
            T.copy(Y[bx * block], b)
            for i in T.Parallel(block):
                b[i] = b[i] + Z[bx * block + i]
            T.copy(b, Z[bx * block])

    return main


def hand_synced(n=64):
    @A.prim_func
    def main(X: A.Tensor((n,), "float32"), Z: A.Tensor((n,), "float32")):
        with A.Kernel(1, is_npu=True) as (cid, vid):
            x = A.alloc_ub((n,), "float32")
            with A.Scope("V"):
                if vid == 0:
                    A.copy(X[0], x)
                    A.barrier_all()
                    A.tile.muls(x, x, 3.0)
                    A.barrier_all()
                    A.copy(x, Z[0])

    return main


def gemm_relu(M=32, N=32, K=32):
    @T.prim_func
    def main(P: T.Tensor((M, K), "float16"), Q: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1) as (bx, by):
            P_s = T.alloc_shared((M, K), "float16")
            Q_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            T.copy(P[0, 0], P_s)
            T.copy(Q[0, 0], Q_s)
            T.gemm(P_s, Q_s, C_f)
            for i, j in T.Parallel(M, N):
                C_f[i, j] = T.max(C_f[i, j], 0.0)
            T.copy(C_f, C[0, 0])

    return main


def _plan(lowered) -> dict:
    (_, func), = list(lowered.module.functions.items())
    return {str(b.name): v[1] for b, v in read_plan(func).items()}


def test_names_map_to_the_ascend_keys():
    assert Key.TL_ASCEND_AUTO_SYNC == "ascend.auto_sync"
    assert Key.TL_ASCEND_AUTO_CV_SYNC == "ascend.auto_cv_sync"
    assert Key.TL_ASCEND_EXCEPTION_DUMP == "ascend.exception_dump"
    assert {"TL_ASCEND_MEMORY_PLANNING", "TL_ASCEND_AUTO_CV_COMBINE"} <= set(dir(Key))
    from tilewright.engine import validate

    assert validate({"tl.ascend_auto_cross_core_sync": True, "tl.ascend_exception_dump": False}) \
        == {"ascend.auto_cv_sync": True, "ascend.exception_dump": False}


def test_switches_on_compile_unchanged_and_run():
    plain = tilewright.lower(scale_add(), target="ascend").source.text
    assert tilewright.lower(scale_add(), target="ascend", pass_configs=ALL_ON).source.text \
        == plain
    kernel = tilewright.compile(scale_add(), out_idx=[2], target="ascend", pass_configs=ALL_ON)
    x, y = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(kernel(x, y), y + 2 * x)


def test_auto_sync_off_needs_hand_written_flags():
    with pytest.raises(ConfigError, match=r"'ascend.auto_sync' \(TileLang TL_ASCEND_AUTO_SYNC\) "
                                          r"is False, but kernel 'main' has no hand-written "
                                          r"intra-core synchronisation.*always inserts"):
        tilewright.lower(scale_add(), target="ascend",
                         pass_configs={Key.TL_ASCEND_AUTO_SYNC: False})
    # a hand-synchronised kernel is the manual mode: exactly its own flags, as by default
    plain = tilewright.lower(hand_synced(), target="ascend").source.text
    manual = tilewright.lower(hand_synced(), target="ascend",
                              pass_configs={"tl.ascend_auto_sync": False}).source.text
    assert manual == plain and "SetFlag" not in manual


def test_memory_planning_off_gives_every_buffer_its_own_bytes():
    shared = _plan(tilewright.lower(scale_add(), target="ascend"))
    assert shared["a"] == shared["b"], shared  # never live together: one place
    linear = _plan(tilewright.lower(scale_add(), target="ascend",
                                    pass_configs={Key.TL_ASCEND_MEMORY_PLANNING: False}))
    assert linear["a"] != linear["b"], linear


def test_memory_planning_off_can_overflow_where_reuse_fits():
    from test_ascend_liveness import two_phases

    tilewright.lower(two_phases(), target="ascend")
    with pytest.raises(KernelError, match="UB holds 196608 bytes"):
        tilewright.lower(two_phases(), target="ascend",
                         pass_configs={"ascend.memory_planning": False})


@pytest.mark.parametrize("name", ["TL_ASCEND_AUTO_CV_SYNC", "TL_ASCEND_AUTO_CV_COMBINE"])
def test_cross_core_automation_off_refuses_a_kernel_that_needs_the_split(name):
    with pytest.raises(ConfigError, match=rf"\(TileLang {name}\) False, but kernel 'main' uses "
                                          r"both the cube and the vector cores.*T\.Scope"):
        tilewright.lower(gemm_relu(), target="ascend", pass_configs={getattr(Key, name): False})
    # kernels that need no split (vector only, or hand-written dialect kernels) still compile
    tilewright.lower(scale_add(), target="ascend", pass_configs={getattr(Key, name): False})
