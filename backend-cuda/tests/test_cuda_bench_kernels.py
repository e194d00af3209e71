"""The GPU benchmark's kernels (bench/kernels.py) with their bundled tile configurations, run
in host emulation at small problem sizes (the bundles themselves and the harness's check of
them: test_cuda_bench_bundles.py)."""

import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import torch
from tilewright.utils.sparse import compress, randn_semi_sparse

BENCH = Path(__file__).resolve().parents[1] / "bench"
ROOT = BENCH.parents[1]
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "examples"))

import gemm_fp8_scaled as fp8  # noqa: E402 - after the sys.path setup
import gemm_w4a16 as w4  # noqa: E402
import kernels  # noqa: E402

TARGET = "cuda -arch=sm_90a"


def _emulate(func, tmp_path, *args, configs=None):
    lowered = tilewright.lower(func, TARGET, configs)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    return lowered.source.text


@pytest.mark.emulator
@pytest.mark.parametrize("multicast", [False, True], ids=["", "mc"])
@pytest.mark.parametrize(("dtype", "stages"), [("float16", 3), ("bfloat16", 3),
                                               ("float16", 4), ("bfloat16", 4)])
def test_bundled_gemm_config_matches_torch(dtype, stages, multicast, tmp_path):
    # 2 x 2 blocks of the bundled 128x256x64 tile, 10 k-tiles wrapping the 3 stages (or the
    # _s4 rows' 4, whose shared C tile shares bytes with the pipeline's buffers), loads issued
    # in order (the bundle's pass configs), C through the swizzled shared tile; with
    # ``multicast`` (the _mc rows) the two row blocks of a column in a cluster, each loading
    # half of B's boxes into both
    M, N, K = 256, 512, 640
    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    a, b = torch.randn(M, K).to(tdtype), torch.randn(K, N).to(tdtype)
    c = torch.full((M, N), float("nan")).to(tdtype)
    config = {**kernels.GEMM, "num_stages": stages}
    configs = {**kernels.GEMM_PASS_CONFIGS, **({"cuda.tma_multicast": True} if multicast
                                               else {})}
    text = _emulate(kernels.gemm.fn(M, N, K, dtype, **config), tmp_path, a, b, c,
                    configs=configs)
    assert "tw_gemm_wgmma<256, 64, 256," in text  # the bundle's HGMMA.64x256x16 path
    kernel = text[text.index('extern "C" __global__'):]
    assert ("tw_tma_load_multicast_2d(" in kernel) == multicast
    assert "tw_setmaxnreg_" not in kernel and "tw_copy16(" in kernel
    ref = a.float() @ b.float()
    tol = {"float16": 1e-2, "bfloat16": 2e-2}[dtype]
    torch.testing.assert_close(c.float(), ref, rtol=tol, atol=tol * K ** 0.5)


@pytest.mark.emulator
@pytest.mark.parametrize(("config", "path"), [
    ("GEMM_SP_K64",
     "tw_gemm_wgmma_sp_kept<128, 64, 128, TW_WGMMA_F16, true, 128, 64, 64, 128, 8>"),
    ("GEMM_SP_MMA", "tw_gemm_mma_sp_rf<128, 128, 64, false, 128, 2, 2"),
])
def test_bundled_sparse_gemm_config_matches_torch(tmp_path, config, path):
    # 2 x 2 blocks of the bundled 128x128x64 tile on the sparse wgmma (two warpgroups, one
    # group in flight on the held metadata registers) and on mma.sp (the _mmasp row), 9
    # k-tiles through the 3 stages: each refilled twice
    M, N, K = 256, 256, 576
    gen = torch.Generator().manual_seed(0)
    a = randn_semi_sparse(M, K, torch.float16, generator=gen)
    b = torch.randn(K, N, generator=gen).half()
    c = torch.full((M, N), float("nan"))
    func = kernels.gemm_sp_kernel.fn(M, N, K, "float16", "int16", **getattr(kernels, config))
    text = _emulate(func, tmp_path, *compress(a), b, c)
    assert path in text
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


@pytest.mark.emulator
@pytest.mark.parametrize("row", sorted(["", *kernels.GEMM_SP_ROWS]))
def test_bundled_sparse_gemm_rows_match_torch_with_their_pipeline_wrapped(tmp_path, row):
    # each gemm_sp_float16_8192<row> configuration (the default's, "", too): 2 x 1 blocks, 2 x
    # stages + 1 k-tiles, so every stage is refilled twice under the wgmma.sp groups and the
    # metadata registers change hands (the metadata race of the 8192^3 row hid at 3 k-tiles);
    # float16 C is the float32 sums rounded once (an ulp apart where the two sums round to either
    # side)
    config = {"": kernels.GEMM_SP, **kernels.GEMM_SP_ROWS}[row]
    bn, bk = config["block_N"], config["block_K"]
    M, N, K = 128, 2 * bn, (2 * config["num_stages"] + 1) * bk
    gen = torch.Generator().manual_seed(1)
    a = randn_semi_sparse(M, K, torch.float16, generator=gen)
    b = torch.randn(K, N, generator=gen).half()
    out = getattr(torch, config.get("out_dtype", "float32"))
    c = torch.full((M, N), float("nan")).to(out)
    func = kernels.gemm_sp_kernel.fn(M, N, K, "float16", "int16", **config)
    text = _emulate(func, tmp_path, *compress(a), b, c)
    kernel = text[text.index('extern "C" __global__'):]
    # 3 stages or more: one group in flight, the metadata in the registers the loop holds
    held = config["num_stages"] >= 3
    assert f"tw_gemm_wgmma_sp{'_kept' if held else ''}<{bn}, {bk}, {bn}, TW_WGMMA_F16, true, " \
        f"128, {bk}, {bk}, 128, {bk // 8}>" in kernel
    assert ("tw_wgmma_wait<1>" in kernel) == held
    ref = a.float() @ b.float()
    if out == torch.float32:
        torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-4)
    else:
        torch.testing.assert_close(c.float(), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.emulator
def test_bundled_int8_gemm_config_runs_wgmma_and_matches_torch(tmp_path):
    # one block of the bundled 128x256x128 tile (two warpgroups of IGMMA 64x256x32), 2
    # k-tiles through the 3 stages; int32 results exactly torch._int_mm's
    m, n, k = 128, 256, 256
    gen = torch.Generator().manual_seed(2)
    a, b = (torch.randint(-128, 128, s, generator=gen, dtype=torch.int8)
            for s in ((m, k), (n, k)))
    c = torch.full((m, n), -7, dtype=torch.int32)
    text = _emulate(kernels.gemm_low_precision.fn(m, n, k, "int8", **kernels.INT8_GEMM),
                    tmp_path, a, b, c)
    assert "tw_gemm_wgmma<256, 128, 256, TW_WGMMA_S8, false, 128, 128, 256, 128>" in text
    assert torch.equal(c, torch._int_mm(a, b.T.contiguous()))


@pytest.mark.emulator
def test_bundled_attention_config_matches_torch(tmp_path):
    b, h, s, d = 1, 2, 256, 128  # 2 x 2 blocks of 128 queries, 2 steps of 128 keys
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    text = _emulate(kernels.attention.fn(b, h, s, d, "float16", **kernels.ATTENTION),
                    tmp_path, q, k, v, o)
    # both gemms take wgmma: Q @ K^T from shared tiles, P @ V with P in registers
    assert text.count("tw_gemm_wgmma<128, 128, 128,") == 1
    assert text.count("tw_gemm_wgmma_rs<128, 128, 128,") == 1
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.emulator
@pytest.mark.parametrize("configs", [{}, kernels.GEMM_PASS_CONFIGS], ids=["ws", "nows"])
def test_overlapped_attention_matches_torch_and_waits_after_the_softmax(tmp_path, configs):
    # 3 steps of 128 keys: K_0 before the loop, 3 iterations through the 2 stages (the last
    # one's next scores masked), 3 query blocks
    b, h, s, d = 1, 1, 384, 128
    torch.manual_seed(1)
    q, k, v = (torch.randn(b, s, h, d).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    text = _emulate(kernels.attention_overlap.fn(b, h, s, d, "float16"), tmp_path, q, k, v, o,
                    configs=configs)
    loop = text[text.index("for (int k = 0; k < 3; ++k) {"):]
    scores = loop.index("tw_gemm_wgmma<128, 128, 128,")  # the next scores, Q K_{k+1}^T
    pv = loop.index("tw_gemm_wgmma_rs<128, 128, 128,")
    assert scores < loop.index("tw_wgmma_wait<0>();", scores) < pv
    softmax = loop[pv:loop.index("tw_wgmma_wait<0>();", pv)]  # P V_k in flight meanwhile
    assert softmax.count("exp2f(") == 66
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.emulator
@pytest.mark.parametrize(("both", "configs"), [
    (False, {}), (False, kernels.GEMM_PASS_CONFIGS), (False, {"cuda.producer_registers": 24}),
    (True, {"cuda.producer_registers": 24}),
    (False, {"cuda.wgmma_pingpong": True, "cuda.producer_registers": 24})],
    ids=["ws", "nows", "r240", "both", "pingpong"])
def test_one_fragment_overlapped_attention_matches_torch(tmp_path, both, configs):
    # the build_bundles rows _overlap_one, _overlap_one_r240, the default ("", both) and
    # _overlap_one_pingpong (and in-order loads): 5 steps of 128 keys, K_0 before the loop and
    # V_4 after it, 4 iterations through the 2 stages (each refilled twice), 5 query blocks
    b, h, s, d = 1, 1, 640, 128
    torch.manual_seed(3)
    q, k, v = (torch.randn(b, s, h, d).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    func = kernels.attention_overlap_one.fn(b, h, s, d, "float16", both_in_flight=both)
    text = _emulate(func, tmp_path, q, k, v, o, configs=configs)
    loop = text[text.index("for (int k = 0; k < 4; ++k) {"):]
    scores = loop.index("tw_gemm_wgmma<128, 128, 128,")  # Q K_{k+1}^T into the one fragment
    pv = loop.index("tw_gemm_wgmma_rs<128, 128, 128,")  # P_k V_k, P in registers
    last = loop.index("tw_wgmma_wait<0>();", pv)
    if both:  # both groups in flight, the scores' retired alone before the softmax
        assert "tw_wgmma_wait<" not in loop[scores:pv]
        softmax = loop.index("tw_wgmma_wait<1>();", pv)
    else:
        assert scores < loop.index("tw_wgmma_wait<0>();", scores) < pv
        softmax = pv
    assert loop[softmax:last].count("exp2f(") == 66  # the softmax under P_k V_k
    assert "-INFINITY" not in loop[:last] and "scores_next" not in text  # nothing masked
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.emulator
@pytest.mark.parametrize("builder", ["attention", "attention_overlap"])
def test_pingpong_attention_takes_turns_and_matches_torch(tmp_path, builder):
    # cuda.wgmma_pingpong: the two compute warpgroups alternate at each step's first gemm;
    # 3 steps of 128 keys (both turn barriers go through several phases), 2 query blocks
    b, h, s, d = 1, 1, 384, 128
    torch.manual_seed(2)
    q, k, v = (torch.randn(b, s, h, d).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    func = getattr(kernels, builder).fn(b, h, s, d, "float16")
    text = _emulate(func, tmp_path, q, k, v, o, configs={"cuda.wgmma_pingpong": True})
    loop = text[text.index("for (int k = 0; k < 3; ++k) {"):]
    turn = loop.index("tw_named_barrier_sync(((((int)threadIdx.x) >> 7) + 9), 256);")
    assert loop.index("tw_gemm_wgmma<128, 128, 128,") > turn  # the scores' gemm, in turn
    assert loop.index("tw_named_barrier_arrive((10 - (((int)threadIdx.x) >> 7)), 256);") > turn
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


def test_pingpong_needs_a_warp_specialised_loop_of_two_warpgroups():
    func = kernels.attention.fn(1, 1, 256, 64, "float16", threads=128, block_M=64)
    with pytest.raises(tilewright.KernelError, match="two compute warpgroups"):
        tilewright.lower(func, TARGET, {"cuda.wgmma_pingpong": True})
    func = kernels.attention.fn(1, 1, 256, 64, "float16")
    with pytest.raises(tilewright.KernelError, match="needs a warp-specialised"):
        tilewright.lower(func, TARGET, {"cuda.wgmma_pingpong": True,
                                        **kernels.GEMM_PASS_CONFIGS})


@pytest.mark.emulator
@pytest.mark.parametrize(("dtype", "vector"), [("float32", "float4"), ("float16", "uint4"),
                                               ("bfloat16", "uint4")])
def test_bundled_add_config_is_vectorised_and_matches_torch(tmp_path, dtype, vector):
    # 16-bit elements: 8 to a 128-bit access (before, one 16-bit access an element)
    M, N = 16, 1024  # 2 x 2 blocks of 8 x 512
    torch.manual_seed(0)
    a, b = (torch.randn(M, N).to(getattr(torch, dtype)) for _ in range(2))
    c = torch.full((M, N), float("nan")).to(a.dtype)
    text = _emulate(kernels.add.fn(M, N, dtype, **kernels.ADD), tmp_path, a, b, c)
    assert f"*({vector}*)(C_ptr + " in text
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bundled_silu_config_is_staged_and_matches_torch(tmp_path, dtype):
    # float32 math on 16-bit elements: 8 elements a thread through registers by one uint4
    M, N = 16, 1024
    x = (torch.randn(M, N) * 4).to(getattr(torch, dtype))
    y = torch.full((M, N), float("nan")).to(x.dtype)
    text = _emulate(kernels.silu.fn(M, N, dtype, **kernels.ADD), tmp_path, x, y)
    assert "*(uint4*)(Y_ptr + " in text and "*(uint4*)(X_v00_ptr + 0) = *(uint4*)(X_ptr" in text
    torch.testing.assert_close(y, torch.nn.functional.silu(x.float()).to(x.dtype))


@pytest.mark.emulator
@pytest.mark.parametrize("layout", ["token", "block"])
def test_bundled_fp8_gemm_config_runs_wgmma_and_matches_torch(layout, tmp_path):
    # the bundle's tiles (128x256x128 for token scales, 128x128x128 for block scales; 3
    # stages, 256 threads: two warpgroups of QGMMA 64xNx32), 3 k-tiles; token scales in the
    # epilogue, block scales per k-tile
    m, n, k = 256, 256, 384
    gen = torch.Generator().manual_seed(1)
    a, sa = fp8.quantize(torch.randn(m, k, generator=gen), layout)
    w = torch.randn(n, k, generator=gen)
    b, sb = fp8.quantize_blocks(w) if layout == "block" else fp8.quantize(w, layout)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    text = _emulate(kernels.fp8_gemm_scaled.fn(m, n, k, layout, **kernels.fp8_config(layout)),
                    tmp_path, a, b, sa, sb, c)
    n_tile = kernels.FP8_TILES[layout]["block_N"]
    assert f"tw_gemm_wgmma<{n_tile}, 128, {n_tile}, TW_WGMMA_E4M3, false, 128, 128, " \
        f"{n_tile}, 128>" in text
    want = fp8.reference(a, b, sa, sb, layout)
    torch.testing.assert_close(c.double(), want, rtol=8e-3, atol=1e-3 * want.abs().mean())


@pytest.mark.emulator
def test_bundled_w4a16_config_matches_torch(tmp_path):
    # the bundle's tiles (16 x 128 x 128, 2 stages) and its 8 slices of K: 8 slices of 3
    # k-tiles each (the stages wrapped), their partial sums added by the second kernel; M = 3
    # rows of the 16-row tile
    m, n, k, group = 3, 128, 3072, 128
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    text = _emulate(kernels.w4a16_gemm.fn(m, n, k, group, **kernels.W4A16), tmp_path, a, q,
                    scales, zeros, c)
    assert "tw_dequant_u4x8_f16(" in text and "main_1_kernel" in text
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(c.double(), want, rtol=1e-2, atol=1e-2 * want.abs().mean())


def test_bench_kernels_reject_sizes_they_do_not_handle():
    with pytest.raises(ValueError, match="multiple of block_N"):
        kernels.attention.fn(1, 1, 100, 64)
    with pytest.raises(ValueError, match=r"multiple of the block \[8, 512\]"):
        kernels.add.fn(8, 100)

