"""Ascend C generation and compile-time memory checks."""

import ascend_kernels as K
import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from tilewright.errors import KernelError


def _source(func):
    return tilewright.lower(func, target="ascend").source.text


def test_elementwise_source_structure():
    src = _source(K.vec_add(256, 256, 64, 128))
    assert 'extern "C" __global__ __aicore__ void main_kernel(GM_ADDR A_addr' in src
    assert "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);" in src
    assert "TBuf<TPosition::VECCALC> ub_mem;" in src
    assert "if ASCEND_IS_AIV {" in src and "ASCEND_IS_AIC" not in src
    assert "int32_t cid = GetBlockIdx() / 2;" in src
    assert src.count("PipeBarrier<PIPE_ALL>();") == 2
    assert "Add(c_ub, a_ub, b_ub, 4096);" in src
    assert "main_kernel<<<8, nullptr, stream>>>(A, B, C);" in src
    # buffers are planned 32-byte aligned, one after another
    assert "ub_mem.GetWithOffset<float>(4096, 16384)" in src


def test_gemm_source_structure():
    src = _source(K.gemm(128, 128, 256, 64, 64, 128))
    assert "if ASCEND_IS_AIC {" in src and "ASCEND_IS_AIV" not in src
    for piece in ("TBuf<TPosition::A1> l1_mem;", "TBuf<TPosition::CO1> l0c_mem;",
                  "LoadData(", "SetFlag<HardEvent::MTE1_M>(0);", "Mmad(C_L0, gemm0_l0a",
                  "mp.cmatrixInitVal = ((k == 0)) && kk == 0;",
                  "Nd2NzParams(1, 64, 128, 0, 256, 64, 1, 0)",
                  "Fixpipe<half, float, CFG_ROW_MAJOR>(C[",
                  "LoadData2DParams{0, 8, 4, 0, 0, false, 0}"):
        assert piece in src, piece


def _ub_kernel(rows, cols, address=None):
    @T.prim_func
    def main(A: T.Tensor((rows, cols), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            big_ub = T.alloc_ub((rows, cols), "float32")
            if address is not None:
                T.annotate_address({big_ub: address})
            with T.Scope("V"):
                T.copy(A[0, 0], big_ub)
                T.barrier_all()
                T.copy(big_ub, A[0, 0])

    return main


def test_ub_overflow_names_buffer_bytes_and_limit():
    with pytest.raises(KernelError, match=r"buffer 'big_ub' needs 262144 bytes of UB at offset "
                                          r"0, but UB holds 196608 bytes") as info:
        _source(_ub_kernel(256, 256))
    assert "test_ascend_codegen.py" in str(info.value)


def test_l0c_overflow_is_a_compile_time_error():
    with pytest.raises(KernelError, match=r"'C_L0' needs 262144 bytes of L0C .* holds 131072"):
        _source(K.gemm(256, 256, 256, 256, 256, 64))


def test_unaligned_ub_placement_is_an_error():
    with pytest.raises(KernelError, match=r"'big_ub' \(4096 bytes\) is placed at UB offset 100, "
                                          r"which is not 32-byte aligned"):
        _source(_ub_kernel(32, 32, address=100))


def test_no_data_path_between_cores():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            acc = T.alloc_L0C((16, 16), "float32")
            ub = T.alloc_ub((16, 16), "float32")
            with T.Scope("V"):
                T.copy(acc, ub)

    with pytest.raises(KernelError, match="no Ascend data path from L0C to UB"):
        _source(main)


def test_exception_dump_appends_the_descriptor_argument():
    low = tilewright.lower(K.vec_add(64, 128, 64, 128), target="ascend",
                           pass_configs={"ascend.exception_dump": True})
    assert "GM_ADDR C_addr, GM_ADDR tw_exception_desc)" in low.source.text
    assert "(A, B, C, tw_exception_desc);" in low.source.text


def test_manual_sync_kept_and_automatic_sync_inserted():
    manual = _source(K.vec_add_pipelined(128, 128, 128, 128, 32))
    assert manual.count("SetFlag<") == 6 and manual.count("WaitFlag<") == 6
    assert "PipeBarrier" not in manual
    auto = _source(K.vec_add_pipelined_auto(128, 256, 128, 256, 32))
    # two versions per tile: one id per version, raised before the loop, drained after it
    assert "LocalTensor<float> a_ub = ub_mem.GetWithOffset<float>(8192, 0);" in auto
    for line in ("SetFlag<HardEvent::V_MTE2>(1);", "WaitFlag<HardEvent::V_MTE2>((mm % 2));",
                 "SetFlag<HardEvent::MTE2_V>((mm % 2));", "WaitFlag<HardEvent::MTE3_V>(1);"):
        assert line in auto, line


def test_flags_beyond_the_six_ids_of_an_event_become_a_barrier():
    """Ids 6 and 7 are the vendor's: automatic synchronisation has 0-5 of each event; a
    seventh tile's MTE2 -> V and V -> MTE3 dependencies are ordered by PipeBarrier<PIPE_ALL>
    (its MTE2 -> MTE3 one by the first of them)."""
    @T.prim_func
    def main(A: T.Tensor((2, 7, 64), "float32"), B: T.Tensor((2, 7, 64), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            tiles = [T.alloc_ub((64,), "float32") for _ in range(7)]
            with T.Scope("V"):
                for n, tile in enumerate(tiles):  # Python loops: unrolled while tracing
                    T.copy(A[vid, n, 0], tile)
                for tile in tiles:
                    T.tile.adds(tile, tile, 1.0)
                for n, tile in enumerate(tiles):
                    T.copy(tile, B[vid, n, 0])

    text = _source(main)
    assert "SetFlag<HardEvent::MTE2_V>(5);" in text and "MTE2_V>(6)" not in text
    assert text.count("PipeBarrier<PIPE_ALL>();") == 2
    a = torch.randn(2, 7, 64)
    kernel = tilewright.compile(main, out_idx=[-1], target="ascend")
    torch.testing.assert_close(kernel(a), a + 1)


def test_portable_kernel_needing_both_cores_is_split():
    import tilewright.language as P

    @P.prim_func
    def main(A: P.Tensor((64, 64), "float16"), C: P.Tensor((64, 64), "float32")):
        with P.Kernel(1, threads=128) as _:
            a_s = P.alloc_shared((64, 64), "float16")
            acc = P.alloc_fragment((64, 64), "float32")
            out = P.alloc_shared((64, 64), "float32")
            P.copy(A[0, 0], a_s)
            P.gemm(a_s, a_s, acc, clear_accum=True)
            P.copy(acc, out)
            for i, j in P.Parallel(64, 64):  # an epilogue: (a bare acc -> out -> C is one
                out[i, j] = out[i, j] * 2.0  # Fixpipe to C, see portable._fold_staging)
            P.copy(out, C[0, 0])

    src = _source(main)  # the cube hands acc over through a GM workspace (split.py)
    assert "Fixpipe<float, float, CFG_ROW_MAJOR>(ws_acc_0, acc_l0c, fp);" in src
    assert "CrossCoreSetFlag<2, PIPE_FIX>(0);" in src and "CrossCoreWaitFlag(0);" in src
