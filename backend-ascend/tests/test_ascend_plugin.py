"""The plugin contract: backend, targets, dialect registration, refusals on other backends."""

import pytest
import tilewright
import tilewright.language as portable
import tilewright_ascend.language as T
from tilewright.errors import KernelError, TargetError, UnsupportedOpError
from tilewright.ir import registered_ops
from tilewright.plugin import get_manager


def test_backend_declared_with_targets_and_executors():
    backend = get_manager().backends()["ascend"]
    assert backend.target_kinds == ("ascend", "ascend-950")
    assert "soc" in backend.target_options
    names = [e.name for e in backend.executors]
    assert names == ["bisheng", "emulator"]
    assert backend.executors[1].available()
    reason = backend.executors[0].available().reason
    assert "bisheng" in reason and "torch_npu" in reason


def test_dialect_ops_registered_for_ascend_only():
    ops = {n: s for n, s in registered_ops().items() if s.dialect == "ascend"}
    assert {"ascend.set_flag", "ascend.gemm_v0", "ascend.tile.add", "ascend.printf"} <= set(ops)
    assert all(s.backends == ("ascend",) for s in ops.values())
    ext = get_manager().collect("tilewright_language_extensions")
    assert any(e.module == "tilewright_ascend.language" for e in ext)


def _flag_kernel():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid), T.Scope("V"):
            T.set_flag("mte2", "v", 0)
            T.wait_flag("mte2", "v", 0)

    return main


def test_dialect_op_on_cpu_is_a_compile_time_error_naming_the_op():
    with pytest.raises(UnsupportedOpError, match=r"T\.ascend\.set_flag .*'ascend' dialect.*"
                                                 r"backend 'cpu' cannot lower it") as info:
        tilewright.lower(_flag_kernel(), target="cpu")
    assert "test_ascend_plugin.py" in str(info.value)


def test_soc_option_checked():
    tilewright.lower(_flag_kernel(), target="ascend -soc=910B4")
    with pytest.raises(TargetError, match="910B1, 910B2, 910B3, 910B4, A3"):
        tilewright.lower(_flag_kernel(), target="ascend -soc=910C")


def test_other_tree_names_say_which_dialect_this_is():
    with pytest.raises(AttributeError, match=r"T\.alloc_l1 belongs to TileLang mainline.*"
                                             r"use T\.alloc_L1"):
        T.alloc_l1  # noqa: B018
    assert callable(T.alloc_L1)


def test_dialect_checks_at_the_users_line():
    def bad():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, is_npu=True) as (cid, vid):
                T.set_flag("mte2", "v", 8)

    with pytest.raises(KernelError, match="event id 8 is out of range") as info:
        bad()
    assert "test_ascend_plugin.py" in str(info.value)
    with pytest.raises(KernelError, match="no hardware event V_FIX"):
        @T.prim_func
        def main2(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, is_npu=True) as (cid, vid):
                T.set_flag("v", "fix", 0)
    with pytest.raises(KernelError, match="1-D"):
        @T.prim_func
        def main3(A: T.Tensor((64,), "float32")):
            with T.Kernel(2, 2, is_npu=True) as (cid, vid):
                pass


def test_msprof_timers_unavailable_with_reason():
    from tilewright.profiler.timers import availability, timers

    found = timers()
    for name in ("msprof", "msprof_detail"):
        assert not availability(found[name])
        assert "msprof" in availability(found[name]).reason


def test_a_strided_tensor_is_refused_at_its_first_use():
    # no 'strided_tensors' feature: Ascend's data movement addresses tensors contiguously
    @portable.prim_func
    def main(A: portable.StridedTensor((4, 8), (16, 1), "float32"),
             B: portable.Tensor((4, 8), "float32")):
        with portable.Kernel(1, threads=1):
            for i, j in portable.Parallel(4, 8):
                B[i, j] = A[i, j]

    with pytest.raises(UnsupportedOpError, match=r"test_ascend_plugin.py:\d+: parameter 'A' is "
                                                 r"a T.StridedTensor, which backend 'ascend' "
                                                 r"does not take"):
        tilewright.lower(main, "ascend")
