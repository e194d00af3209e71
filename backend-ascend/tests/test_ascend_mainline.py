"""The mainline dialect (``tilewright_ascend.language.mainline``) on the ``ascend-950`` target:
the seed's versioned vector add and GEMMs through L1 and L0 (``examples/mainline_kernels.py``)
run on the emulator against torch;
buffer-version annotations, manual flags, the 950's memories; the errors for mixing the two
trees, compiling a tree for the other's target and the adapter tree's pass configs."""

import re

import pytest
import tilewright
import tilewright_ascend.language as A
import tilewright_ascend.language.mainline as T
import torch
from mainline_kernels import (
    gemm,
    gemm_relu,
    gemm_relu_loop,
    rmsnorm,
    rmsnorm_reference,
    simt_softmax,
    simt_through_gm,
    simt_transpose,
    simt_transpose_2d,
    softmax,
    vector_add,
)
from tilewright.errors import ConfigError, KernelError
from tilewright_ascend.executor import EmulatorError, compile_and_run_source, last_run_stats
from tilewright_ascend.facts.arch import ARCHS

TARGET = "ascend-950"


def _tiles(text: str) -> dict:
    return {m[1]: int(m[2]) for m in re.finditer(r"LocalTensor<\w+> (\w+) = \w+\.GetWithOffset"
                                                  r"<\w+>\((\d+),", text)}


@pytest.mark.parametrize("body", ["simt", "simd"])
def test_vector_functions_run_on_the_950_emulator(body):
    N = 8 * 1024
    kernel = tilewright.compile(vector_add(N, body=body), out_idx=[2], target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(vector_add(N, body=body), target=TARGET).source.text
    # SIMT: 1024 threads, one element each, of the iteration's version of each tile; SIMD: a
    # vector function of the register API, one Reg::Add per 2048-bit register (64 float32
    # lanes), started with asc_vf_call
    if body == "simt":
        assert "TW_UB_ARG(float, a, 1, ((step % 2) * 1024), 1024)" in text
        assert "asc_vf_call<main_simt>(dim3{1024, 1, 1}, " in text
        assert "TW_UB_STORE(c, ((TW_FLOORMOD(step, 2) * 1024) + tid), " in text
    else:
        assert "__simd_vf__ inline void main_vf(__ubuf__ float* a, __ubuf__ float* b, " \
            "__ubuf__ float* c, int32_t step)" in text
        assert "Reg::Add(vreg2, vreg0, vreg1, mask_b32);" in text
        assert "asc_vf_call<main_vf>((__ubuf__ float*)a.GetPhyAddr(), " in text


def test_simd_softmax_and_rmsnorm_run_on_the_950_emulator():
    x = torch.randn(8, 256)
    torch.testing.assert_close(tilewright.compile(softmax(8, 256), out_idx=[1],
                                                  target=TARGET)(x), torch.softmax(x, -1))
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(softmax(8, 256), target=TARGET).source.text
    # vcmax/vcadd across the lanes, vexp, the broadcast of lane 0: register instructions
    for call in ("Reg::Reduce<ReduceType::MAX>(", "Reg::Reduce<ReduceType::SUM>(", "Reg::Exp(",
                 "Reg::Duplicate(", "Reg::Div("):
        assert call in text, call
    assert "WholeReduce" not in text and "GetValue" not in text
    x, w = torch.randn(4, 256).half(), torch.randn(256).half()
    torch.testing.assert_close(tilewright.compile(rmsnorm(4, 256), out_idx=[2],
                                                  target=TARGET)(x, w),
                               rmsnorm_reference(x, w), rtol=1e-3, atol=1e-3)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(rmsnorm(4, 256), target=TARGET).source.text
    # unpacked loads widened, packed stores narrowed, through the CastTraits of the file
    for call in ("Reg::LoadAlign<half, Reg::LoadDist::DIST_UNPACK_B16>(",
                 "Reg::Cast<float, half, tw_widen_even>(",
                 "Reg::Cast<half, float, tw_narrow_even>(",
                 "Reg::StoreAlign<half, Reg::StoreDist::DIST_PACK_B32>(", "Reg::Sqrt(",
                 "constexpr Reg::CastTrait tw_narrow_even = {Reg::RegLayout::ZERO, "
                 "Reg::SatMode::NO_SAT, Reg::MaskMergeMode::ZEROING, RoundMode::CAST_RINT};"):
        assert call in text, call
    assert "GetValue" not in text and "SetValue" not in text


def test_simd_lane_semantics():
    """vcadd/vcmax leave the result in lane 0 and zero the rest; vcvt widens the even or odd
    lanes of a float16 register (Reg::Cast, RegLayout::ZERO and ONE); a load of a tile the
    function stored follows a Reg::LocalMemBar and reads what was stored."""
    @T.prim_func
    def main(X: T.Tensor((128,), "float16"), R: T.Tensor((192,), "float32"),
             E: T.Tensor((64,), "float32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((128,), "float16")
            r = T.alloc_shared((192,), "float32")
            e = T.alloc_shared((64,), "float32")
            o = T.alloc_shared((64,), "float32")
            T.copy(X[0:128], x)
            with T.SimdVF():
                m16, m32 = T.simd.pset(16), T.simd.pset(32)
                even = T.simd.vcvt(T.simd.vld(x[0]), "float32", m16)
                odd = T.simd.vcvt(T.simd.vld(x[0]), "float32", m16, part="odd")
                T.simd.vsts(e[0], even, m32)
                T.simd.vsts(o[0], odd, m32)
                T.simd.vsts(r[0], T.simd.vcadd(even, m32), m32)
                T.simd.vsts(r[64], T.simd.vcmax(odd, m32), m32)
                T.simd.vsts(r[128], T.simd.vadds(T.simd.vld(e[0]), 1.0, m32), m32)
            T.copy(r, R[0:192])
            T.copy(e, E[0:64])
            T.copy(o, O[0:64])

    x = torch.randn(128).half()
    r, e, o = tilewright.compile(main, out_idx=[1, 2, 3], target=TARGET)(x)
    assert last_run_stats()["races"] == 0
    torch.testing.assert_close(e, x[0::2].float())
    torch.testing.assert_close(o, x[1::2].float())
    torch.testing.assert_close(r[0], x[0::2].float().sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r[64], x[1::2].float().max())
    torch.testing.assert_close(r[128:], x[0::2].float() + 1)
    assert not r[1:64].any() and not r[65:128].any()
    text = tilewright.lower(main, target=TARGET).source.text
    assert "Reg::LocalMemBar<Reg::MemType::VEC_STORE, Reg::MemType::VEC_LOAD>();\n" \
        "    Reg::LoadAlign(vreg" in text


def _simd(build):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), H: T.Tensor((128,), "float16")):
        with T.Kernel(1):
            a = T.alloc_shared((128,), "float32")
            h = T.alloc_shared((128,), "float16")
            T.copy(A[0:128], a)
            T.copy(H[0:128], h)
            build(a, h)
            T.copy(a, A[0:128])

    return main


def test_simd_rules():
    def outside(a, h):
        T.simd.pset(32)

    with pytest.raises(KernelError, match=r"T.simd.pset is a register instruction: use it "
                                          r"inside 'with T.SimdVF\(\):'"):
        _simd(outside)

    def wrong_mask(a, h):
        with T.SimdVF(latency=20):
            T.simd.vsts(h[0], T.simd.vld(h[0]), T.simd.pset(32))

    with pytest.raises(KernelError, match=r"the mask is for 32-bit lanes but the register holds "
                                          r"float16 .*T.simd.pset\(16\)"):
        _simd(wrong_mask)

    def past_end(a, h):
        with T.SimdVF():
            T.simd.vld(a[96])

    with pytest.raises(KernelError, match="64 lanes from element 96 run past the last "
                                          "dimension of 'a' \\(128\\); .*pad the tile's last "
                                          "dimension to a multiple of 64 and mask the tail with "
                                          "T.simd.pset\\(bits, count"):
        _simd(past_end)

    def convert(a, h):
        with T.SimdVF():
            T.simd.vcvt(T.simd.vld(a[0]), "int32", T.simd.pset(32))

    with pytest.raises(KernelError, match="converts float16 or bfloat16 to float32 and back, "
                                          "not float32 to int32"):
        _simd(convert)

    def unpack(a, h):
        with T.SimdVF():
            T.simd.vld(a[0], dist="unpack")

    with pytest.raises(KernelError, match=r"dist='unpack'\): Reg::LoadAlign \(include/"
                                          r"basic_api/reg_compute/kernel_reg_compute_datacopy_"
                                          r"intf.h\) takes bfloat16, float16, int16, uint16 "
                                          r"registers, not float32"):
        _simd(unpack)

    def pack(a, h):
        with T.SimdVF():
            T.simd.vsts(h[0], T.simd.vld(h[0]), T.simd.pset(16), dist="pack")

    with pytest.raises(KernelError, match=r"selects 32-bit slots: give it T.simd.pset\(32\)"):
        _simd(pack)

    def integer_exp(a, h):
        with T.SimdVF():
            T.simd.vexp(T.simd.vld(a[0]), T.simd.pset(32))

    # the error is at the user's line, not in the dialect's module
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.simd.vexp: Reg::Exp "
                                          r"\(.*\) takes float16, float32 registers, not int32"):
        _simd(lambda a, h: integer_exp(T.alloc_shared((64,), "int32"), h))

    def two_functions(a, h):
        with T.SimdVF():
            r = T.simd.vld(a[0])
        with T.SimdVF():
            T.simd.vsts(a[0], r, T.simd.pset(32))

    with pytest.raises(KernelError, match="the register comes from another T.SimdVF"):
        _simd(two_functions)

    def copy_inside(a, h):
        with T.SimdVF():
            T.copy(h, h)

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: inside T.SimdVF "
                                          r"only T.simd instructions and serial loops"):
        tilewright.lower(_simd(copy_inside), target=TARGET)
    with pytest.raises(AttributeError, match="T.simd.vgather is not supported"):
        T.simd.vgather  # noqa: B018


def test_simt_rules():
    def threads(a, h):
        with T.SimtVF(threads=4096):
            pass

    with pytest.raises(KernelError, match="2048 threads at most in all, got 4096"):
        _simd(threads)

    def outside(a, h):
        T.get_thread_binding()

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.get_thread_binding\(\) "
                                          "is the thread index of a SIMT vector function"):
        _simd(outside)

    def second_dimension(a, h):
        with T.SimtVF(threads=64):
            T.get_thread_binding(1)

    with pytest.raises(KernelError,
                       match=r"the block of T.SimtVF\(threads=\(64,\)\) has 1 dimension"):
        _simd(second_dimension)


def _simt(case):
    """A kernel whose T.SimtVF(threads=64) holds the statements of ``case`` on 64 x 64 UB
    tiles, lowered to its source."""

    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((64, 64), "float32")
            y = T.alloc_shared((64, 64), "float32")
            T.copy(X, x)
            with T.SimtVF(threads=64):
                t = T.get_thread_binding()
                if case == "one element":  # every thread, one element
                    y[0, 0] = x[t, 0]
                elif case == "own row":
                    for j in T.serial(63):
                        y[t, j] = y[t, j + 1] + x[t, j]
                elif case == "column":
                    for j in T.serial(64):
                        x[t, j] = x[j, t]
                elif case == "global":
                    for j in T.serial(64):
                        y[t, j] = X[t, j]
                elif case == "tile op":
                    T.fill(y, 0)
                elif case == "same elements":
                    for i, j in T.Parallel(64, 64):
                        y[i, j] = x[i, j] * 2
                    for i, j in T.Parallel(64, 64):
                        y[i, j] = y[i, j] + x[i, j]
                else:  # shifted
                    for i, j in T.Parallel(64, 64):
                        y[i, j] = x[i, j] * 2
                    for i, j in T.Parallel(64, 63):
                        x[i, j] = y[i, j + 1]
            T.copy(y, Y)

    return tilewright.lower(main, target=TARGET).source.text


def test_simt_races_the_compiler_cannot_order_are_errors_at_the_users_line():
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.SimtVF: threads race "
                                          r"on 'y': its store does not tell the threads apart"):
        _simt("one element")
    _simt("own row")  # one thread's own row: ordered within the thread
    with pytest.raises(KernelError, match="one statement writes it and touches it at another "
                                          "index"):
        _simt("column")
    assert "TW_UB_STORE(y, ((tid * 64) + j), TW_CAST(float, TW_GM_LOAD(X, (j + (tid * 64)))));" \
        in _simt("global")  # a GM tensor: asc_ldcg through its __gm__ pointer
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.SimtVF holds "
                                          r"T.Parallel nests and element statements; T.fill"):
        _simt("tile op")


def test_simt_barriers_go_where_threads_share_elements():
    assert "asc_syncthreads();" not in _simt("same elements")  # each element: one thread
    text = _simt("shifted")
    assert text.count("asc_syncthreads();") == 1
    # 4096 iterations over 64 threads: 64 steps of one element each
    assert "for (int32_t step = 0; step < 64; ++step) {" in text


def _run_source(low, text, tensors, work):
    work.mkdir()
    compile_and_run_source(text, low.source.payload, tensors, work)


def test_simt_transpose_with_thread_binding_runs_and_needs_its_barrier(tmp_path):
    """Thread t writes row t of s, then reads column t of it: the automatic barrier orders
    the two; without it the emulator reports the threads' race."""
    low = tilewright.lower(simt_transpose(64), target=TARGET)
    text = low.source.text
    assert text.count("asc_syncthreads();") == 1 and "int32_t tid = threadIdx.x;" in text
    assert "asc_vf_call<main_simt>(dim3{64, 1, 1}, " in text
    x = torch.randn(64, 64)
    y = torch.empty(64, 64)
    _run_source(low, text, (x, y), tmp_path / "ok")
    torch.testing.assert_close(y, (2.0 * x).T)
    with pytest.raises(EmulatorError, match=r"race \(write-after-read\) on UB buffer 's': thread "
                                            r"1 of the SIMT vector function .* no "
                                            r"asc_syncthreads\(\) between them"):
        _run_source(low, text.replace("asc_syncthreads();", ""), (x, y), tmp_path / "bad")


def test_simt_softmax_one_row_per_thread_has_no_barrier():
    x = torch.randn(32, 256)
    kernel = tilewright.compile(simt_softmax(32, 256), out_idx=[1], target=TARGET)
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(simt_softmax(32, 256), target=TARGET).source.text
    assert "asc_syncthreads();" not in text and "Simt::Exp(TW_CAST(float, " in text


def test_simt_barrier_reached_by_some_threads_only_is_reported(tmp_path):
    low = tilewright.lower(simt_transpose(64), target=TARGET)
    text = low.source.text.replace("    asc_syncthreads();", "    if (tid < 32) asc_syncthreads();")
    with pytest.raises(EmulatorError, match=r"asc_syncthreads\(\) reached by 32 of the 64 "
                                            "threads"):
        _run_source(low, text, (torch.randn(64, 64), torch.empty(64, 64)), tmp_path / "k")


def test_dual_copy_rules():
    def copy(src_shape, dst_shape, mixed=True, src_scope="l0c", dtype="float32", sids=2):
        @T.prim_func
        def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
            with (T.MixedKernel(1, sids=sids) if mixed else T.Kernel(1)):
                c = getattr(T, f"alloc_{src_scope}")(src_shape, "float32")
                u = T.alloc_shared(dst_shape, dtype)
                T.dual_copy(c, u)

    with pytest.raises(KernelError, match=r"T.dual_copy must be used inside a mixed kernel"):
        copy((64, 32), (32, 32), mixed=False)  # M-split, but not in T.MixedKernel
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.dual_copy: extent 33 "
                                          r"of \[33, 32\] is odd"):
        copy((33, 32), (16, 32))
    with pytest.raises(KernelError, match=r"exactly one trailing dimension .* got \[64, 32\] "
                                          r"-> \[64, 32\]"):
        copy((64, 32), (64, 32))
    with pytest.raises(KernelError, match=r"T.dual_copy moves L0C -> UB, GM -> UB, UB -> GM, "
                                          r"UB -> L1; got L1 -> UB"):
        copy((64, 32), (32, 32), src_scope="l1")
    with pytest.raises(KernelError, match=r"from L0C converts nothing .* float32 -> float16"):
        copy((64, 32), (32, 32), dtype="float16")
    with pytest.raises(KernelError, match=r"this T.MixedKernel has sids=1"):
        copy((64, 32), (32, 32), sids=1)
    with pytest.raises(KernelError, match=r"sids= is the number of vector sub-cores, 1 or 2"):
        copy((64, 32), (32, 32), sids=3)


def test_mixed_kernel_needs_cube_work():
    @T.prim_func
    def vector_only(X: T.Tensor((64, 64), "float32")):
        with T.MixedKernel(1, sids=2) as (bx, sid):
            u = T.alloc_shared((32, 64), "float32")
            T.dual_copy(X[0:64, 0:64], u)
            T.dual_copy(u, X[0:64, 0:64])

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: a T.MixedKernel holds "
                                          r"cube work .* has none"):
        tilewright.lower(vector_only, target=TARGET)


@pytest.mark.parametrize("split, n, bn", [("m", 128, 64), ("n", 128, 64), ("n", 96, 48)])
def test_gemm_relu_with_dual_copy_runs_on_the_950_emulator(split, n, bn):
    """The seed's GEMM + ReLU: L0C -> UB and UB -> GM dual copies, the ReLU in T.SimtVF. L0C ->
    UB is the cube's dual-destination Fixpipe into both sub-cores' UB (dualDstCtl 1: M split,
    2: N split), but for an N split whose N (48) is not a multiple of 32: a GM workspace."""
    kernel = tilewright.compile(gemm_relu(128, n, 256, 64, bn, 64, split=split), out_idx=[2],
                                target=TARGET)
    x, y = torch.randn(128, 256).half(), torch.randn(256, n).half()
    torch.testing.assert_close(kernel(x, y), torch.relu(x.float() @ y.float()), rtol=1e-2,
                               atol=5e-2)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(gemm_relu(128, n, 256, 64, bn, 64, split=split),
                            target=TARGET).source.text
    assert "int32_t vid = GetSubBlockIdx();" in text and "if ((vid == 0))" not in text
    # the ReLU: 128 SIMT threads over the sub-core's 64 * bn / 2 elements
    assert ("asc_vf_call<main_simt>(dim3{128, 1, 1}, TW_UB_ARG(float, C_ub, 3, 0, "
            f"{32 * bn}));") in text
    assert f"for (int32_t step = 0; step < {bn // 4}; ++step) {{" in text
    if bn % 32:  # each sub-core copies its half of the workspace tile
        assert "ws_C_l0c_C_ub" in text and "dualDstCtl" not in text
        return
    assert "ws_" not in text
    assert (f"FixpipeParamsArch3510<CO2Layout::ROW_MAJOR> fp; fp.nSize = {bn}; fp.mSize = 64; "
            f"fp.srcStride = 64; fp.dstStride = {bn if split == 'm' else bn // 2}; "
            f"fp.dualDstCtl = {1 if split == 'm' else 2};") in text
    assert "Fixpipe<float, float, CFG_ROW_MAJOR>(C_ub, C_l0c, fp);" in text
    # each vector sub-core writes its half of C
    assert ("(vid * 4096)" if split == "m" else "(vid * 32)") in text


def _scaled_gemm(split, pipelined=False, versions=None):
    """C = (2 A) @ B + D: A's tiles are scaled by the vector cores and handed to L1 (GM -> UB,
    UB -> L1 dual copies inside the K loop), the result and D meet in UB (L0C -> UB, GM -> UB)
    and go out by UB -> GM. ``pipelined``: the K loop is T.Pipelined(num_stages=2);
    ``versions``: what T.annotate_buffer_versions gives the loop's tiles."""
    M, N, K, BM, BN, BK = 128, 128, 256, 64, 64, 64
    HM, HK = (BM // 2, BK) if split == "m" else (BM, BK // 2)

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             D: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.MixedKernel((M // BM) * (N // BN), sids=2) as (bx, sid):
            m = bx // (N // BN) * BM
            n = bx % (N // BN) * BN
            a_ub = T.alloc_shared((HM, HK), "float16")
            A_l1 = T.alloc_l1((BM, BK), "float16")
            B_l1 = T.alloc_l1((BK, BN), "float16")
            C_l0c = T.alloc_l0c((BM, BN), "float32")
            c_ub = T.alloc_shared((BM // 2, BN), "float32")
            d_ub = T.alloc_shared((BM // 2, BN), "float32")
            if versions is not None:
                T.annotate_buffer_versions({a_ub: versions, A_l1: versions, B_l1: versions})
            for k in T.Pipelined(K // BK, num_stages=2) if pipelined else T.serial(K // BK):
                T.dual_copy(A[m : m + BM, k * BK : k * BK + BK], a_ub)
                with T.SimtVF(threads=128):
                    for i, j in T.Parallel(HM, HK):
                        a_ub[i, j] = a_ub[i, j] * 2
                T.dual_copy(a_ub, A_l1)
                T.copy(B[k * BK, n], B_l1)
                T.gemm(A_l1, B_l1, C_l0c, clear_accum=(k == 0))
            T.dual_copy(C_l0c, c_ub)
            T.dual_copy(D[m : m + BM, n : n + BN], d_ub)
            for i, j in T.Parallel(BM // 2, BN):
                c_ub[i, j] = c_ub[i, j] + d_ub[i, j]
            T.dual_copy(c_ub, C[m : m + BM, n : n + BN])

    return main


@pytest.mark.parametrize("split", ["m", "n"])
def test_dual_copy_paths_run_on_the_950_emulator(split):
    kernel = tilewright.compile(_scaled_gemm(split), out_idx=[3], target=TARGET)
    x, y, d = torch.randn(128, 256).half(), torch.randn(256, 128).half(), torch.randn(128, 128)
    torch.testing.assert_close(kernel(x, y, d), (2 * x.float()) @ y.float() + d, rtol=1e-2,
                               atol=5e-2)
    assert last_run_stats()["races"] == 0


def test_pipelined_within_and_across_cores_at_once_is_an_error():
    """The seed's second T.Pipelined rule on Ascend: a loop that hands tiles between the cube
    and the vector cores does not also multi-buffer them within a core."""
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.Pipelined pipelines "
                                          r"within a core \(here: versions of 'A_l1', 'B_l1'\) or "
                                          r"across the cube and vector cores .* not both at "
                                          r"once; use the flat pattern"):
        tilewright.lower(_scaled_gemm("m", pipelined=True), target=TARGET)
    # the flat pattern: one version of each tile, the loop pipelined across the cores
    kernel = tilewright.compile(_scaled_gemm("m", pipelined=True, versions=1), out_idx=[3],
                                target=TARGET)
    x, y, d = torch.randn(128, 256).half(), torch.randn(256, 128).half(), torch.randn(128, 128)
    torch.testing.assert_close(kernel(x, y, d), (2 * x.float()) @ y.float() + d, rtol=1e-2,
                               atol=5e-2)
    assert last_run_stats()["races"] == 0


def test_nested_pipelined_is_an_error_at_the_line():
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.Pipelined cannot be "
                                          r"nested inside another T.Pipelined loop") as err:
        @T.prim_func
        def main(A: T.Tensor((4, 4, 64), "float32")):
            with T.Kernel(1):
                x = T.alloc_shared((64,), "float32")
                for i in T.Pipelined(4, num_stages=2):
                    for j in T.Pipelined(4, num_stages=2):
                        T.copy(A[i, j, 0:64], x)
                        T.copy(x, A[i, j, 0:64])

    assert "for j in T.Pipelined(4, num_stages=2):" in str(err.value)


def test_mixed_kernel_with_one_vector_core():
    """sids=1: the vector code runs on sub-core 0 only, with whole tiles."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.MixedKernel(1, sids=1) as (bx, sid):
            a = T.alloc_l1((64, 64), "float16")
            b = T.alloc_l1((64, 64), "float16")
            c = T.alloc_l0c((64, 64), "float32")
            u = T.alloc_shared((64, 64), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.copy(c, u)
            for i, j in T.Parallel(64, 64):
                u[i, j] = T.max(u[i, j], 0)
            T.copy(u, C)

    kernel = tilewright.compile(main, out_idx=[2], target=TARGET)
    x, y = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    torch.testing.assert_close(kernel(x, y), torch.relu(x.float() @ y.float()), rtol=1e-2,
                               atol=5e-2)
    assert last_run_stats()["races"] == 0
    assert "if ((vid == 0))" in tilewright.lower(main, target=TARGET).source.text


def test_versioned_vector_add_runs_on_the_950_emulator():
    N = 16 * 1024
    kernel = tilewright.compile(vector_add(N), out_idx=[2], target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)
    stats = last_run_stats()
    assert stats["races"] == 0
    assert stats["mte2_overlap"] >= 0.8, stats  # the next loads run under the current add
    text = tilewright.lower(vector_add(N), target=TARGET).source.text
    assert "(SoC 950PR, dav-3510)" in text and "pipe.InitBuffer(ub_mem, 253952);" in text
    assert _tiles(text) == {"a": 2048, "b": 2048, "c": 2048}  # 2 versions of 1024


@pytest.mark.parametrize(("spec", "stages", "elements"), [
    ((3, "iteration"), 2, 3072), ("auto", 3, 3072), (1, 2, 1024), ((4, "auto"), 1, 4096)])
def test_annotated_versions_override_the_stages(spec, stages, elements):
    text = tilewright.lower(vector_add(8 * 1024, stages=stages, versions=spec),
                            target=TARGET).source.text
    assert set(_tiles(text).values()) == {elements}


def test_three_versions_run_clean():
    N = 12 * 1024
    kernel = tilewright.compile(vector_add(N, stages=2, versions=(3, "iteration")), out_idx=[2],
                                target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)


def test_version_annotation_errors():
    with pytest.raises(KernelError, match=r"mainline_kernels.py:\d+: T.annotate_buffer_"
                                          r"versions: the mode of 'a' is one of auto, "
                                          r"iteration, counter, got 'ring'"):
        vector_add(8 * 1024, versions=(2, "ring"))
    with pytest.raises(KernelError, match="number of versions of 'a' must be a positive int"):
        vector_add(8 * 1024, versions=0)


def _guarded_add(N, tile, versions, split):
    """C = A + B on the steps ``step % 3 != 2`` only: one branch around the whole step, or
    (``split``) one branch per statement."""
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((tile,), "float32")
            b = T.alloc_shared((tile,), "float32")
            c = T.alloc_shared((tile,), "float32")
            T.annotate_buffer_versions({a: versions, b: versions, c: versions})
            for step in T.Pipelined(N // tile, num_stages=2):
                part = slice(step * tile, step * tile + tile)
                if split:
                    if step % 3 != 2:
                        T.copy(A[part], a)
                    if step % 3 != 2:
                        T.copy(B[part], b)
                    if step % 3 != 2:
                        for i in T.Parallel(tile):
                            c[i] = a[i] + b[i]
                    if step % 3 != 2:
                        T.copy(c, C[part])
                elif step % 3 != 2:
                    T.copy(A[part], a)
                    T.copy(B[part], b)
                    for i in T.Parallel(tile):
                        c[i] = a[i] + b[i]
                    T.copy(c, C[part])

    return main


@pytest.mark.parametrize("versions, split", [((2, "counter"), True), ((3, "counter"), True),
                                             ((2, "counter"), False), ((2, "iteration"), False),
                                             ((2, "auto"), True)])
def test_versions_of_guarded_uses_run_clean(versions, split):
    """'counter' mode (and 'auto' for guarded uses): the version of a buffer advances only in
    the iterations that use it; 'iteration': every iteration. Both run race-free under a guard
    (a guard around the whole step is one item that depends on itself: its flags keep one id,
    so its inner flags stay ordered across iterations)."""
    N, tile = 12 * 1024, 1024
    func = _guarded_add(N, tile, versions, split)
    kernel = tilewright.compile(func, target=TARGET)
    a, b, c = torch.randn(N), torch.randn(N), torch.zeros(N)
    kernel(a, b, c)
    used = (torch.arange(N) // tile) % 3 != 2
    torch.testing.assert_close(c, torch.where(used, a + b, torch.zeros(N)))
    stats = last_run_stats()
    assert stats["races"] == 0
    if split:
        assert stats["mte2_overlap"] >= 0.4
    text = tilewright.lower(func, target=TARGET).source.text
    # the counter's + wraps as TIR's does (through uint32_t: nothing bounds a_version)
    counted = ("a_version = TW_CAST(int32_t, (TW_CAST(uint32_t, a_version) + "
               "TW_CAST(uint32_t, TW_SELECT(((step % 3) < 2), 1, 0))));") in text
    assert counted == (versions[1] != "iteration")
    if counted:
        assert f"a[(TW_FLOORMOD(a_version, {versions[0]}) * 1024)]" in text


def test_accumulator_cannot_be_versioned():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_shared((64,), "float32")
            x = T.alloc_shared((64,), "float32")
            T.annotate_buffer_versions({acc: 2})
            for i in T.Parallel(64):
                acc[i] = 0.0
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k, 0:64], x)
                for i in T.Parallel(64):
                    acc[i] = acc[i] + x[i]
            T.copy(acc, C[bx * 64 : bx * 64 + 64])

    with pytest.raises(KernelError, match="gives 'acc' 2 versions, but it cannot be versioned "
                                          "in this T.Pipelined loop: it is used outside"):
        tilewright.lower(main, target=TARGET)


def test_hand_written_stage_dimension_warns():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), C: T.Tensor((4, 64), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((2, 64), "float32")
            T.annotate_buffer_versions({x: 2})
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k + bx, 0:64], x[k % 2, 0:64])
                T.copy(x[k % 2, 0:64], C[k, 0:64])

    with pytest.warns(UserWarning, match=r"test_ascend_mainline.py:\d+: buffer 'x' has a stage "
                                         r"dimension of its own .* multi-buffers it twice") as rec:
        tilewright.lower(main, target=TARGET)
    assert rec[0].filename == __file__  # at the line that allocates x
    assert "x = T.alloc_shared((2, 64)" in open(__file__).read().splitlines()[rec[0].lineno - 1]


@pytest.mark.parametrize("l0", [False, True], ids=["l1", "l0"])
def test_gemm_through_l1_and_l0(l0):
    kernel = tilewright.compile(gemm(128, 128, 256, 64, 64, 64, l0=l0), out_idx=[2],
                                target=TARGET)
    x, y = torch.randn(128, 256).half(), torch.randn(256, 128).half()
    torch.testing.assert_close(kernel(x, y), x.float() @ y.float(), rtol=1e-2, atol=5e-2)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(gemm(128, 128, 256, 64, 64, 64, l0=l0), target=TARGET).source.text
    assert ("Mmad(c, a0[" in text) == l0


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_l0_layouts_follow_the_gemm_transposes(ta, tb):
    """L0A/L0B tiles filled by T.copy from L1 are laid out as the consuming GEMM reads them."""
    func = gemm(128, 128, 256, 64, 64, 64, l0=True, transpose_A=ta, transpose_B=tb)
    kernel = tilewright.compile(func, out_idx=[2], target=TARGET)
    x, y = torch.randn(128, 256).half(), torch.randn(256, 128).half()
    out = kernel(x.T.contiguous() if ta else x, y.T.contiguous() if tb else y)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-2, atol=5e-2)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(func, target=TARGET).source.text
    # LoadData2D's ifTranspose: A's fractals when A is transposed, B's when B is not
    loads = re.findall(r"LoadData\((\w+)\[.*LoadData2DParams\{[^}]*, (true|false), 0\}", text)
    assert sorted(set(loads)) == sorted({("a0", str(ta).lower()), ("b0", str(not tb).lower())})


def test_l0_tile_read_with_two_layouts_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1):
            a = T.alloc_l1((64, 64), "float16")
            a0 = T.alloc_l0a((64, 64), "float16")
            b0 = T.alloc_l0b((64, 64), "float16")
            c = T.alloc_l0c((64, 64), "float32")
            T.copy(A, a)
            T.copy(a, a0)
            T.copy(a, b0)
            T.gemm(a0, b0, c, clear_accum=True)
            T.gemm(a0, b0, c, transpose_A=True)
            T.copy(c, C)

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: 'a0' is read by GEMMs "
                                          r"with transpose_A=False and =True"):
        tilewright.lower(main, target=TARGET)


def test_manual_flags_keep_their_own_synchronisation():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64 : bx * 64 + 64], x)
            T.ascend_set_flag("MTE2_MTE3", 0)
            T.ascend_wait_flag("MTE2_MTE3", 0)
            T.copy(x, C[bx * 64 : bx * 64 + 64])
            T.ascend_pipe_barrier("PIPE_ALL")

    text = tilewright.lower(main, target=TARGET).source.text
    assert text.count("SetFlag<") == 1 and "WaitFlag<HardEvent::MTE2_MTE3>(0);" in text
    assert "PipeBarrier<PIPE_ALL>();" in text
    a = torch.randn(64)
    torch.testing.assert_close(tilewright.compile(main, out_idx=[1], target=TARGET)(a), a)


def test_manual_flag_names_checked():
    def bad(event):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1):
                T.ascend_set_flag(event, 0)

    with pytest.raises(KernelError, match="unknown pipe 'VEC' in 'MTE2_VEC'"):
        bad("MTE2_VEC")
    with pytest.raises(KernelError, match="takes a HardEvent name 'SRC_DST'"):
        bad("MTE2")


def _ub_tile(T_, alloc, simt=False):
    @T_.prim_func
    def main(A: T_.Tensor((2 * 56 * 1024,), "float32"), C: T_.Tensor((2 * 56 * 1024,),
                                                                      "float32")):
        with T_.Kernel(2) as bx:
            x = alloc((56 * 1024,), "float32")  # 224 KiB: more than A2's UB, less than 950's
            T_.copy(A[bx * 56 * 1024 : (bx + 1) * 56 * 1024], x)
            if simt:
                with T_.SimtVF(threads=1024):
                    for i in T_.Parallel(56 * 1024):
                        x[i] = x[i] * 2
            T_.copy(x, C[bx * 56 * 1024 : (bx + 1) * 56 * 1024])

    return main


def test_950_memories_are_its_own():
    a = torch.randn(2 * 56 * 1024)
    kernel = tilewright.compile(_ub_tile(T, T.alloc_shared), out_idx=[1], target=TARGET)
    torch.testing.assert_close(kernel(a), a)
    import tilewright.language as P

    with pytest.raises(KernelError, match="needs 229376 bytes of UB at offset 0, but UB holds "
                                          "196608 bytes"):
        tilewright.lower(_ub_tile(P, P.alloc_shared), target="ascend")
    # SIMT functions leave a kernel 216 KiB of UB (GetRuntimeUBSize.md)
    with pytest.raises(KernelError, match="needs 229376 bytes of UB at offset 0, but UB holds "
                                          "221184 bytes"):
        tilewright.lower(_ub_tile(T, T.alloc_shared, simt=True), target=TARGET)


def test_950_facts_follow_the_vendor_headers(asc_devkit):
    text = (asc_devkit / "include" / "utils" / "base" / "sys_constants.h").read_text()
    block = text[text.index("(__NPU_ARCH__ == 3510)"):]
    block = block[:block.index("#el")]
    sizes = {m[1]: eval(m[2].split("+ __")[0]) for m in  # noqa: S307 - the header's products
             re.finditer(r"ASC_(\w+)_SIZE = ([^;]+);", block)}
    memories = {m.short: m.capacity for m in ARCHS[TARGET].memories.values()}
    assert {k: sizes[k] for k in ("UB", "L1", "L0A", "L0B", "L0C")} == memories
    constants = (asc_devkit / "impl" / "basic_api" / "utils" /
                 "kernel_utils_constants.h").read_text()
    arch = constants[constants.index("#elif (__NPU_ARCH__ == 3510)"):]
    width = int(re.search(r"VECTOR_REG_WIDTH = (\d+);", arch)[1])
    assert width * 8 == ARCHS[TARGET].vector_bits
    aiv = re.search(r"__NPU_ARCH__ == 3510\).*?\n\s*const uint16_t AIV_CORE_NUM = (\d+);",
                    constants, re.S)
    assert all(s.aiv == int(aiv[1]) for s in ARCHS[TARGET].socs.values())


# -- the two trees ---------------------------------------------------------------------------
def test_adapter_names_in_the_mainline_module_say_which_tree():
    with pytest.raises(AttributeError, match=r"T\.alloc_L1 belongs to the tilelang-ascend "
                                             r"adapter tree .*use T\.alloc_l1"):
        T.alloc_L1  # noqa: B018
    with pytest.raises(AttributeError, match=r"T\.alloc_l0c belongs to TileLang mainline.*"
                                             r"use T\.alloc_L0C"):
        A.alloc_l0c  # noqa: B018


def test_mixing_trees_in_one_kernel_names_both():
    def mainline_then_adapter():
        @T.prim_func
        def main(X: T.Tensor((64,), "float32")):
            with T.Kernel(1):
                T.alloc_shared((64,), "float32")
                A.alloc_L1((16, 16), "float16")

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.alloc_L1 is a name of "
                                          r"the tilelang-ascend adapter tree for A2/A3 "
                                          r"\(tilewright_ascend.language, target 'ascend'\), but "
                                          r"this kernel is written in TileLang mainline's .*"
                                          r"target 'ascend-950'.*instead of T.alloc_L1, "
                                          r"use T.alloc_l1"):
        mainline_then_adapter()

    def adapter_then_mainline():
        @A.prim_func
        def main(X: A.Tensor((64,), "float32")):
            with A.Kernel(1, is_npu=True) as (cid, vid):
                T.alloc_l1((16, 16), "float16")

    with pytest.raises(KernelError, match=r"T.alloc_l1 is a name of TileLang mainline's Ascend "
                                          r"dialect .* instead of T.alloc_l1, use T.alloc_L1"):
        adapter_then_mainline()


def test_a_tree_compiles_for_its_own_target_only():
    with pytest.raises(KernelError, match=r"written in TileLang mainline's Ascend dialect .*"
                                          r"target 'ascend' \(Ascend A2/A3, dav-2201\) compiles "
                                          r"kernels of the tilelang-ascend adapter tree .* "
                                          r"compile it for target 'ascend-950'"):
        tilewright.lower(vector_add(8 * 1024), target="ascend")

    @A.prim_func
    def adapter(X: A.Tensor((64,), "float32")):
        with A.Kernel(1, is_npu=True) as (cid, vid):
            x = A.alloc_ub((64,), "float32")
            with A.Scope("V"):
                A.copy(X[0:64], x)

    with pytest.raises(KernelError, match=r"written in the tilelang-ascend adapter tree .* "
                                          r"compile it for target 'ascend'"):
        tilewright.lower(adapter, target=TARGET)


def test_adapter_pass_configs_with_the_mainline_dialect_explain():
    with pytest.raises(ConfigError, match=r"pass configs 'ascend.auto_sync' "
                                          r"\(TL_ASCEND_AUTO_SYNC\), 'ascend.exception_dump' "
                                          r"\(TL_ASCEND_EXCEPTION_DUMP\) exist only in the "
                                          r"tilelang-ascend adapter tree .* always synchronises"):
        tilewright.lower(vector_add(8 * 1024), target=TARGET,
                         pass_configs={"tl.ascend_auto_sync": True,
                                       "tl.ascend_exception_dump": False})


def test_kernel_is_one_dimensional_with_compiler_cores():
    with pytest.raises(KernelError, match=r"is_npu=True\) as \(cid, vid\) is the adapter "
                                          r"tree's kernel"):
        @T.prim_func
        def main(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, is_npu=True):
                pass


def test_latency_hint_is_logged_once_at_the_users_line_and_not_emitted(caplog):
    def hinted(a, h):
        with T.SimdVF(latency=20):
            T.simd.vsts(a[0], T.simd.vld(a[0]), T.simd.pset(32))

    with caplog.at_level("WARNING", logger="tilewright_ascend"):
        main = _simd(hinted)
        T.SimtVF(threads=32, latency=8)
    lines = [r.getMessage() for r in caplog.records if "latency=" in r.getMessage()]
    assert len(lines) == 2, lines
    assert re.match(r".*test_ascend_mainline.py:\d+: T.SimdVF\(latency=20\) is a hint to "
                    r"TileLang's scheduling model; the arch-3510 API has no counterpart", lines[0])
    assert "T.SimtVF(latency=8)" in lines[1]
    text = tilewright.lower(main, target=TARGET).source.text
    assert "20" not in re.sub(r"\w*20\w*", "", text.split("__simd_vf__")[1].split("}")[0])
    with pytest.raises(KernelError, match=r"T.SimdVF: latency= is a positive number of cycles"):
        T.SimdVF(latency=0)


@pytest.mark.parametrize("n", [200, 72])
def test_simd_rows_with_a_tail_run_under_a_mask_of_a_count(n):
    """Rows of ``n`` floats (not a whole number of 64-lane registers): the last register of a
    row works under ``T.simd.pset(32, count=...)`` (``Reg::UpdateMask``); with every lane the
    padding of the UB row would enter the maximum and the sum."""
    x = torch.randn(8, n)
    torch.testing.assert_close(tilewright.compile(softmax(8, n), out_idx=[1],
                                                  target=TARGET)(x), torch.softmax(x, -1))
    assert last_run_stats()["races"] == 0
    x, w = torch.randn(4, n).half(), torch.randn(n).half()
    torch.testing.assert_close(tilewright.compile(rmsnorm(4, n), out_idx=[2],
                                                  target=TARGET)(x, w),
                               rmsnorm_reference(x, w), rtol=1e-3, atol=1e-3)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(rmsnorm(4, n), target=TARGET).source.text
    tail = n % 64
    assert f"pcount0 = (uint32_t)({2 * tail});\n    pmask0 = Reg::UpdateMask<uint16_t>(pcount0);" \
        in text
    assert f"= (uint32_t)({tail});" in text and "Reg::UpdateMask<uint32_t>(pcount" in text


def test_simd_mask_of_a_loop_dependent_count():
    """``T.simd.pset(32, count=200 - g * 64)`` in a loop: each register's first ``count``
    lanes (all of them, then the 8 of the last), the stored lanes only; a count of 0 or less is
    no lane."""

    @T.prim_func
    def main(X: T.Tensor((256,), "float32"), Y: T.Tensor((256,), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((256,), "float32")
            y = T.alloc_shared((256,), "float32")
            T.copy(X, x)
            T.copy(Y, y)
            with T.SimdVF():
                for g in T.serial(4):
                    m = T.simd.pset(32, count=200 - g * 64)
                    T.simd.vsts(y[g * 64], T.simd.vadds(T.simd.vld(x[g * 64]), 1.0, m), m)
                none = T.simd.pset(32, count=-5)
                T.simd.vsts(y[0], T.simd.vld(x[0]), none)
            T.copy(y, Y)

    x, y = torch.randn(256), torch.randn(256)
    expected = y.clone()
    expected[:200] = x[:200] + 1
    tilewright.compile(main, target=TARGET)(x, y)
    torch.testing.assert_close(y, expected)
    text = tilewright.lower(main, target=TARGET).source.text
    # the count's clamp to 0 simplified away where g < 4 proves it
    assert "pcount0 = (uint32_t)((200 - (g * 64)));\n" \
        "        pmask0 = Reg::UpdateMask<uint32_t>(pcount0);" in text
    assert "pcount3 = (uint32_t)(0);" in text


def test_simd_mask_of_a_count_rules():
    def real(a, h):
        with T.SimdVF():
            T.simd.pset(32, count=2.5)

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.simd.pset: count= "
                                          r"is a number of lanes"):
        _simd(real)


def test_simt_two_dimensional_block_runs_and_needs_its_barrier(tmp_path):
    """T.SimtVF(threads=(16, 8)): the launch's dim3, the linear index from threadIdx.x and .y,
    T.get_thread_binding(0) and (1) telling the threads apart in their two dimensions; the
    automatic barrier between writing and reading the transposed elements, without which the
    emulator reports the race; a T.Parallel nest spread over all 128 threads."""
    low = tilewright.lower(simt_transpose_2d(64), target=TARGET)
    text = low.source.text
    assert "asc_vf_call<main_simt>(dim3{16, 8, 1}, " in text
    assert "int32_t tid = threadIdx.x + threadIdx.y * 16;" in text
    assert text.count("asc_syncthreads();") == 2  # before the transposed read, the nest
    x = torch.randn(64, 64)
    y = torch.empty(64, 64)
    _run_source(low, text, (x, y), tmp_path / "ok")
    torch.testing.assert_close(y, (2.0 * x).T + 1)
    with pytest.raises(EmulatorError, match=r"race \(\w+-after-\w+\) on UB buffer 's': thread "
                                            r"\d+ of the SIMT vector function .* no "
                                            r"asc_syncthreads\(\) between them"):
        _run_source(low, text.replace("asc_syncthreads();", "", 1), (x, y), tmp_path / "bad")


def test_simt_three_dimensional_block():
    @T.prim_func
    def main(X: T.Tensor((4, 8, 16), "float32"), Y: T.Tensor((4, 8, 16), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((4, 8, 16), "float32")
            y = T.alloc_shared((4, 8, 16), "float32")
            T.copy(X, x)
            with T.SimtVF(threads=(16, 8, 4)):
                tx, ty, tz = (T.get_thread_binding(d) for d in range(3))
                y[tz, ty, tx] = x[tz, ty, tx] * 3.0 + tz
            T.copy(y, Y)

    x = torch.randn(4, 8, 16)
    torch.testing.assert_close(tilewright.compile(main, out_idx=[1], target=TARGET)(x),
                               x * 3 + torch.arange(4.0).view(4, 1, 1))
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(main, target=TARGET).source.text
    assert "int32_t tid = threadIdx.x + threadIdx.y * 16 + threadIdx.z * 128;" in text
    assert "dim3{16, 8, 4}" in text and "asc_syncthreads" not in text


def test_simt_block_rules():
    with pytest.raises(KernelError, match=r"threads= is a number of threads or a block of two or "
                                          r"three dimensions, 2048 threads at most in all, got "
                                          r"\(64, 64\)"):
        T.SimtVF(threads=(64, 64))
    with pytest.raises(KernelError, match=r"got \(4, 0\)"):
        T.SimtVF(threads=(4, 0))

    def third(a, h):
        with T.SimtVF(threads=(8, 4)):
            T.get_thread_binding(2)

    with pytest.raises(KernelError, match=r"T.get_thread_binding\(2\): the block of "
                                          r"T.SimtVF\(threads=\(8, 4\)\) has 2 dimension\(s\)"):
        _simd(third)

    def one_row(a, h):
        with T.SimtVF(threads=(8, 4)):
            a[T.get_thread_binding(1)] = 1.0  # the threads of one row share the element

    with pytest.raises(KernelError, match="threads race on 'a': its store does not tell the "
                                          "threads apart"):
        tilewright.lower(_simd(one_row), target=TARGET)


def test_simt_threads_load_and_store_gm(tmp_path):
    """SIMT threads store rows of Z to GM and load rows of X from it (asc_stcg/asc_ldcg of
    simt_api/device_functions.h, through __gm__ pointers and the window of elements a block's
    threads touch); the vector core's copy of Z back into UB waits for the threads' stores
    (V -> MTE2), without which the emulator reports the race on Z."""
    low = tilewright.lower(simt_through_gm(32, 64), target=TARGET)
    text = low.source.text
    assert "__simt_vf__ inline void main_simt(TW_GMBUF(float) Z, TW_UBUF(float) x" in text
    assert "#define TW_GM_LOAD(p, i) asc_ldcg((p) + (i))" in text
    assert "TW_GM_ARG(float, Z, 2, ((cid * 1024) + (vid * 512)), 512)" in text
    flag = "SetFlag<HardEvent::V_MTE2>(0);\n            WaitFlag<HardEvent::V_MTE2>(0);\n" \
        "            DataCopy(w, Z["
    assert flag in text
    x = torch.randn(32, 64)
    z, y = torch.empty(32, 64), torch.empty(32, 64)
    _run_source(low, text, (x, z, y), tmp_path / "ok")
    torch.testing.assert_close(z, 2 * x)
    torch.testing.assert_close(y, 3 * x)
    with pytest.raises(EmulatorError, match=r"race .* GM buffer 'Z'"):
        _run_source(low, text.replace(flag, "            DataCopy(w, Z["), (x, z, y),
                    tmp_path / "bad")


def test_simt_gm_rules():
    @T.prim_func
    def half_gm(X: T.Tensor((64,), "float16"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            y = T.alloc_shared((64,), "float32")
            with T.SimtVF(threads=64):
                t = T.get_thread_binding()
                y[t] = X[t]
            T.copy(y, Y)

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.SimtVF: the threads "
                                          r"load and store GM tensors of .*'X' is float16"):
        tilewright.lower(half_gm, target=TARGET)

    @T.prim_func
    def shared_row(X: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            with T.SimtVF(threads=64):
                X[0] = X[T.get_thread_binding()]  # every thread stores one GM element

    with pytest.raises(KernelError, match="threads race on 'X': its store does not tell the "
                                          "threads apart"):
        tilewright.lower(shared_row, target=TARGET)


@pytest.mark.parametrize("split", ["m", "n"])
def test_dual_fixpipe_in_a_loop(split, tmp_path):
    """T.dual_copy L0C -> UB in a T.Pipelined loop over N tiles (the flat pattern) is the
    dual-destination Fixpipe in every iteration, no GM workspace: the cube waits before each
    Fixpipe but the first until both sub-cores released their UB tile (CrossCoreSetFlag on V
    once the tile's last copy out is done); without that wait the emulator reports the
    Fixpipe writing a tile the vector cores still read."""
    a, b = torch.randn(128, 128).half(), torch.randn(128, 256).half()
    kernel = gemm_relu_loop(128, 256, 128, 64, 64, split=split)
    torch.testing.assert_close(tilewright.compile(kernel, out_idx=[2], target=TARGET)(a, b),
                               torch.relu(a.float() @ b.float()), rtol=1e-2, atol=5e-2)
    assert last_run_stats()["races"] == 0
    low = tilewright.lower(kernel, target=TARGET)
    text = low.source.text
    assert "ws_" not in text and f"fp.dualDstCtl = {1 if split == 'm' else 2};" in text
    wait = "            if ((1 <= j)) {\n                CrossCoreWaitFlag(1);\n            }\n"
    assert wait in text
    assert "SetFlag<HardEvent::MTE3_V>(1);\n            WaitFlag<HardEvent::MTE3_V>(1);\n" \
        "            if ((j_1 < 3)) {\n                CrossCoreSetFlag<2, PIPE_V>(1);" in text
    c = torch.empty(128, 256)
    with pytest.raises(EmulatorError, match=r"race \(write-after-\w+\) on UB buffer \w+: "
                                            r"Fixpipe on FIX@AIC .* is not ordered after "
                                            r"(asc_vf_call on V|DataCopy on MTE3)@AIV"):
        _run_source(low, text.replace(wait, ""), (a, b, c), tmp_path / "bad")
