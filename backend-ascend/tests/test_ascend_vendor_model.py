"""The emulator models the vendor's documented behaviour (asc-devkit headers and the Ascend C
API documentation), so that generated code that gets it wrong fails here: TPipe's pre-raised
events, reserved event ids, the events each core has, and the code that respects them."""

import ascend_kernels as K
import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from test_ascend_cube import _gemm
from tilewright.errors import KernelError
from tilewright_ascend.executor import EmulatorError, compile_and_run_source


def _edit(low, old, new):
    text = low.source.text
    assert old in text, old
    return text.replace(old, new, 1)


def _run(low, text, tensors, tmp_path, name="k"):
    work = tmp_path / name
    work.mkdir()
    return compile_and_run_source(text, low.source.payload, tensors, work)


def _gemm_case():
    low = tilewright.lower(K.gemm(64, 64, 128, 64, 64, 128, kL0Size=64), target="ascend")
    x, y = torch.randn(64, 128).half(), torch.randn(128, 64).half()
    return low, (x, y, torch.empty(64, 64).half())


# -- TPipe (impl/basic_api/kernel_tpipe_impl.h) ------------------------------------------------
def test_tpipe_holds_m_mte1_ids_0_to_2_on_the_cube_core(tmp_path):
    low, tensors = _gemm_case()
    text = _edit(low, "if ASCEND_IS_AIC {", "if ASCEND_IS_AIC {\n"
                 "SetFlag<HardEvent::M_MTE1>(1); WaitFlag<HardEvent::M_MTE1>(1);")
    with pytest.raises(EmulatorError, match=r"SetFlag<M_MTE1>\(1\).*already set"):
        _run(low, text, tensors, tmp_path)


def test_gemm_v0_waits_for_the_l0_buffers_tpipe_raised():
    """The GEMM lowering uses TPipe's M_MTE1 id 0 as 'L0A/L0B free': wait before the loads of
    each K step, set after its Mmad; it never sets the raised flag again."""
    low, (x, y, _) = _gemm_case()
    lines = [line.strip() for line in low.source.text.splitlines()]
    step = lines.index(next(line for line in lines if line.startswith("for (int32_t kk")))
    body = lines[step + 1:]
    assert body[0] == "WaitFlag<HardEvent::M_MTE1>(0);", body[:3]
    mmad = next(i for i, line in enumerate(body) if line.startswith("Mmad("))
    assert body[mmad + 1] == "SetFlag<HardEvent::M_MTE1>(0);"
    kernel = tilewright.compile(K.gemm(64, 64, 128, 64, 64, 128, kL0Size=64), out_idx=[-1],
                                target="ascend")
    torch.testing.assert_close(kernel(x, y).float(), x.float() @ y.float(), rtol=1e-2,
                               atol=1e-2)


def test_dialect_refuses_the_ids_tpipe_holds():
    with pytest.raises(KernelError, match=r"M_MTE1 ids 0-2 .*TPipe"):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, is_npu=True) as (cid, vid):
                with T.Scope("C"):
                    T.set_flag("m", "mte1", 2)


# -- events and ids (impl/basic_api/kernel_event.h, SetFlag-WaitFlag(ISASI).md) ---------------
@pytest.mark.parametrize("src,dst", [("m", "v"), ("v", "m"), ("mte1", "v"), ("v", "mte1")])
def test_dialect_refuses_events_a2_cores_lack(src, dst):
    with pytest.raises(KernelError, match=f"no hardware event {src.upper()}_{dst.upper()}"):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, is_npu=True) as (cid, vid):
                T.set_flag(src, dst, 0)


@pytest.mark.parametrize("event_id", [6, 7])
def test_dialect_refuses_the_reserved_ids(event_id):
    with pytest.raises(KernelError, match=f"event id {event_id} .*reserved"):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, is_npu=True) as (cid, vid):
                with T.Scope("V"):
                    T.set_flag("mte2", "v", event_id)


def test_emulator_reports_reserved_ids_and_missing_events(tmp_path):
    low = tilewright.lower(K.vec_add_pipelined(128, 128, 128, 128, 32), target="ascend")
    tensors = (torch.randn(128, 128), torch.randn(128, 128), torch.empty(128, 128))
    cases = {
        r"event id 6 is reserved": _edit(low, "SetFlag<HardEvent::MTE2_V>(0);",
                                         "SetFlag<HardEvent::MTE2_V>(0); "
                                         "SetFlag<HardEvent::MTE2_V>(6); "
                                         "WaitFlag<HardEvent::MTE2_V>(6);"),
        r"AIV has no event M_V": _edit(low, "SetFlag<HardEvent::MTE2_V>(0);",
                                       "SetFlag<HardEvent::MTE2_V>(0); "
                                       "SetFlag<HardEvent::M_V>(0); WaitFlag<HardEvent::M_V>(0);"),
    }
    for n, (expected, text) in enumerate(cases.items()):
        with pytest.raises(EmulatorError, match=expected):
            _run(low, text, tensors, tmp_path, f"e{n}")


# -- one pipe's own order (PipeBarrier(ISASI).md) ----------------------------------------------
def test_l1_zero_fill_and_copy_are_ordered_on_mte2(tmp_path):
    """InitConstValue and the GM -> L1 copy of a partial tile are both MTE2 writes; without a
    PipeBarrier<PIPE_MTE2> the emulator reports them."""
    low = tilewright.lower(_gemm(40, 24, 72, False, False, "float16"), target="ascend")
    x, y = torch.randn(40, 72).half(), torch.randn(72, 24).half()
    tensors = (x, y, torch.empty(40, 24).half())
    text = low.source.text
    assert text.count("PipeBarrier<PIPE_MTE2>();") >= 1
    _run(low, text, tensors, tmp_path, "ok")
    torch.testing.assert_close(tensors[2].float(), x.float() @ y.float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(EmulatorError, match=r"no PipeBarrier<PIPE_MTE2> between them"):
        _run(low, text.replace("PipeBarrier<PIPE_MTE2>();", ""), tensors, tmp_path, "bad")


def test_dependent_vector_instructions_need_a_vector_barrier(tmp_path):
    low = tilewright.lower(K.vec_add_auto(128, 256, 128, 256, 32), target="ascend")
    tensors = (torch.randn(128, 256), torch.randn(128, 256), torch.empty(128, 256))
    text = _edit(low, "PipeBarrier<PIPE_V>();", "")
    with pytest.raises(EmulatorError, match=r"no PipeBarrier<PIPE_V> between them"):
        _run(low, text, tensors, tmp_path)


def test_a_flag_round_trip_orders_one_pipe_without_a_barrier():
    """A SetFlag waits for its pipe's earlier work, so MTE2 -> V -> MTE2 orders the loads of
    one iteration before those of the next and V -> MTE3 -> V the Muls before the next Add:
    the only barrier left is the one between Add and the Muls that reads its result."""
    text = tilewright.lower(K.vec_add_auto(128, 256, 128, 256, 32), target="ascend").source.text
    assert text.count("PipeBarrier<PIPE_V>();") == 1, text
    assert "PipeBarrier<PIPE_MTE2>" not in text, text


# -- DataCopyPad pad lanes, Cast rounding, DumpTensor, Mmad (the API documentation) ----------
def _one_row_copy(pad: str):
    """12 floats GM -> UB by DataCopyPad (the row's 48 bytes padded to 64), UB -> GM whole."""
    return f"""#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void pad_kernel(GM_ADDR a_addr, GM_ADDR b_addr) {{
    TPipe pipe;
    TBuf<TPosition::VECCALC> ub_mem;
    pipe.InitBuffer(ub_mem, 196608);
    GlobalTensor<float> A; A.SetGlobalBuffer((__gm__ float*)a_addr);
    GlobalTensor<float> B; B.SetGlobalBuffer((__gm__ float*)b_addr);
    if ASCEND_IS_AIV {{
        if (GetSubBlockIdx() == 0) {{
            LocalTensor<float> x = ub_mem.GetWithOffset<float>(16, 0);
            DataCopyPad(x, A, DataCopyExtParams(1, 48, 0, 0, 0), {pad});
            SetFlag<HardEvent::MTE2_MTE3>(0);
            WaitFlag<HardEvent::MTE2_MTE3>(0);
            DataCopy(B, x, 16);
        }}
    }}
}}
"""


@pytest.mark.parametrize("pad,lanes", [
    ("DataCopyPadExtParams<float>(false, 0, 0, 0)", "first"),
    ("DataCopyPadExtParams<float>(true, 0, 4, 0)", "zero"),
])
def test_datacopypad_pad_lanes(tmp_path, pad, lanes):
    payload = {"kernel": "pad_kernel", "blocks": 1, "params": [["A", "float32", [12]],
                                                              ["B", "float32", [16]]]}
    a, b = torch.arange(1.0, 13.0), torch.full((16,), -1.0)
    compile_and_run_source(_one_row_copy(pad), payload, (a, b), tmp_path)
    torch.testing.assert_close(b[:12], a)
    expect = a[0] if lanes == "first" else 0.0
    assert torch.all(b[12:] == expect), b


def test_cast_follows_its_rounding_mode():
    import numpy as np

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), F: T.Tensor((64,), "float16"),
             C: T.Tensor((64,), "float16"), Z: T.Tensor((64,), "float16"),
             N: T.Tensor((64,), "int32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a = T.alloc_ub((64,), "float32")
            f = T.alloc_ub((64,), "float16")
            c = T.alloc_ub((64,), "float16")
            z = T.alloc_ub((64,), "float16")
            n = T.alloc_ub((64,), "int32")
            with T.Scope("V"):
                if vid == 0:
                    T.copy(A[0], a)
                    T.barrier_all()
                    T.tile.cast(f, a, "CAST_FLOOR")
                    T.tile.cast(c, a, "CAST_CEIL")
                    T.tile.cast(z, a, "CAST_TRUNC")
                    T.tile.cast(n, a)  # a TIR cast: truncation
                    T.barrier_all()
                    T.copy(f, F[0])
                    T.copy(c, C[0])
                    T.copy(z, Z[0])
                    T.copy(n, N[0])

    a = torch.randn(64) * 100 + 1e-3
    outs = tilewright.compile(main, out_idx=[1, 2, 3, 4], target="ascend")(a)
    x = a.double().numpy()
    down = np.where(x.astype(np.float16).astype(np.float64) > x,
                    np.nextafter(x.astype(np.float16), np.float16(-np.inf)),
                    x.astype(np.float16))
    up = np.where(down.astype(np.float64) < x, np.nextafter(down, np.float16(np.inf)), down)
    torch.testing.assert_close(outs[0], torch.from_numpy(down))
    torch.testing.assert_close(outs[1], torch.from_numpy(up))
    torch.testing.assert_close(outs[2], torch.from_numpy(np.where(x > 0, down, up)))
    torch.testing.assert_close(outs[3], a.trunc().int())


def test_dump_tensor_of_ub_orders_itself(capfd):
    """DumpTensor waits for every pipe before and after its MTE3 copy (asc_aicore_dump_impl.h):
    a tile written on V dumps its new values without a flag."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a = T.alloc_ub((64,), "float32")
            with T.Scope("V"):
                if vid == 0:
                    T.copy(A[0], a)
                    T.barrier_all()
                    T.tile.muls(a, a, 2.0)
                    T.dump_tensor(a, 5, 4)
                    T.tile.adds(a, a, 1.0)
                    T.barrier_all()
                    T.copy(a, C[0])

    a = torch.arange(64, dtype=torch.float32)
    out = tilewright.compile(main, out_idx=[-1], target="ascend")(a)
    torch.testing.assert_close(out, a * 2 + 1)
    assert "[0.000000, 2.000000, 4.000000, 6.000000]" in capfd.readouterr().out


def test_mmad_operands_start_aligned():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
             C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a = T.alloc_L1((16, 16), "float16")
            b = T.alloc_L1((16, 16), "float16")
            c = T.alloc_L0C((16, 16), "float32")
            T.annotate_address({c: 512})
            with T.Scope("C"):
                T.copy(A[0, 0], a)
                T.copy(B[0, 0], b)
                T.barrier_all()
                T.gemm_v0(a, b, c, init=True)
                T.barrier_all()
                T.copy(c, C[0, 0])

    with pytest.raises(KernelError, match=r"L0C offset 512, which is not 1024-byte aligned"):
        tilewright.lower(main, target="ascend")


def test_nd2nz_source_stride_limit():
    with pytest.raises(KernelError, match=r"70000 elements apart.*at most 65535"):
        tilewright.lower(K.gemm(16, 16, 70000, 16, 16, 128), target="ascend")
