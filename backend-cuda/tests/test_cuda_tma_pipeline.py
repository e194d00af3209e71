"""Portable copies into shared tiles become TMA loads in ``T.Pipelined`` loops on sm_90+
(rules/tma.py, transforms/pipeline/tma.py): every stage completes on its own mbarriers. On
sm_90a a producer warpgroup added to the block issues the loads and the kernel's threads never
wait for each other in the loop (warp specialisation); otherwise one thread of the block issues
them and the loop keeps one barrier per iteration. The host emulation runs the TMA boxes with
their swizzle and out-of-bounds zero fill, the mbarrier phases and the roles' named barriers."""

import re
import sys
from pathlib import Path

import pytest
import sass
import tilewright
import torch
from test_cuda_pipeline import _emulate, gemm
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

CPASYNC = {"cuda.disable_tma_lower": True}
IN_ORDER = {"cuda.disable_warp_specialized": True}


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _loop(text: str) -> str:
    kernel = _kernel(text)
    return kernel[kernel.index("for (int k = 0;"):]


def hopper_gemm(M=1024, N=1024, K=1024, stages=3, **kw):
    return gemm(M, N, K, bm=128, bn=128, bk=64, stages=stages, threads=256, **kw)


def test_pipelined_copies_become_tma_loads_with_one_barrier_per_iteration():
    lowered = tilewright.lower(hopper_gemm(K=448), "cuda -arch=sm_90a", IN_ORDER)
    text, launch = lowered.source.text, lowered.source.payload
    kernel, loop = _kernel(text), _loop(text)
    assert "tw_cp_async" not in kernel
    # A: one 64 x 128 box; B [64, 128]: two column blocks of 64 (128-byte swizzle)
    maps = [p for p in launch["params"] if p["kind"] == "tensormap"]
    assert [(m["tensor"], m["box"], m["swizzle"]) for m in maps] == [
        ("A", [64, 128], 128), ("B", [64, 64], 128)]
    assert loop.count("tw_tma_load_2d(") == 3 and loop.count("tw_mbar_arrive(") == 1
    # stage k % 3 waits for its phase, (k / 3) & 1: parity flips every third k-tile (7
    # k-tiles); both on counters the loop carries (pipeline/counters.py), no division
    assert re.search(r"tw_mbar_wait\(\(&\(\(\(uint64_t\*\)tw_smem_ptr\)\[\((k\d*)_stage_ptr\[0\] "
                     r"\+ \d+\)\]\)\), \(\1_round_ptr\[0\] & 1\)\);", loop)
    assert not re.search(r"[%/] 3\b", loop)
    # the only barrier: iteration k-1's reads done before its version is refilled; the wgmma
    # needs no fence or barrier of its own (TMA writes through the async proxy)
    body = loop.split("tw_wgmma_wait<0>();", 1)[0]
    assert body.count("__syncthreads();") == 1 and "tw_fence_proxy_async" not in body
    assert body.index("__syncthreads();") < body.index("tw_tma_load_2d(") < \
        body.index("tw_mbar_wait(") < body.index("tw_gemm_wgmma<")
    # three versions of each tile, then three 8-byte mbarriers (the pool ends 128-aligned)
    assert launch["dynamic_smem_bytes"] == 3 * (16384 + 16384) + 128


def test_sm_90a_adds_a_producer_warpgroup():
    lowered = tilewright.lower(hopper_gemm(K=448), "cuda -arch=sm_90a")
    text, launch = lowered.source.text, lowered.source.payload
    kernel = _kernel(text)
    assert launch["block"] == [384, 1, 1] and "__launch_bounds__(384, 1)" in kernel
    producer, consumer = kernel.split("if (((int)threadIdx.x) < 256) {", 1)
    producer = producer[producer.index("if (256 <= ((int)threadIdx.x)) {"):]
    # one thread of the producer warpgroup issues every stage once its version is released
    assert "tw_setmaxnreg_dec<40>();" in producer and "if (((int)threadIdx.x) == 256) {" in \
        producer and producer.count("tw_tma_load_2d(") == 3
    assert re.search(r"tw_mbar_wait\(\(&\(\(\(uint64_t\*\)tw_smem_ptr\)\[\(k_load_stage_ptr\[0\] "
                     r"\+ \d+\)\]\)\), \(\(k_load_round_ptr\[0\] \+ 1\) & 1\)\);", producer)
    # the 256 compute threads: a larger register budget, a named barrier before the loop
    # (operands written before it), none in it; each releases the version its wgmma retired
    assert "tw_setmaxnreg_inc<232>();" in consumer and "__syncthreads" not in consumer
    loop = consumer[consumer.index("for (int k = 0;"):]
    assert "tw_named_barrier_sync" not in loop and "tw_fence_proxy_async" not in loop
    assert loop.index("tw_mbar_wait(") < loop.index("tw_gemm_wgmma<") < \
        loop.index("tw_wgmma_wait<1>();") < loop.index("tw_mbar_arrive(")
    # the release barriers count the compute warps: lane 0 arrives once its warp synced
    assert "(uint)8);" in kernel and "__syncwarp();" in loop


@pytest.mark.emulator
@pytest.mark.parametrize("target, dtype, configs", [
    ("sm_90a", "float16", {}), ("sm_90a", "bfloat16", {}), ("sm_90a", "float16", IN_ORDER),
    ("sm_90", "float16", {})])
def test_tma_pipeline_matches_torch_with_partial_tiles(target, dtype, configs, tmp_path):
    # 200 x 312 x 200: partial blocks in M, N and K, read as zeros by the TMA boxes; sm_90
    # feeds mma.sync (ldmatrix) from the same tiles, issued in order (no setmaxnreg)
    func = hopper_gemm(200, 312, 200, dtype=dtype)
    text = _emulate(func, target, tmp_path, 200, 312, 200, dtype, configs=configs)
    assert "tw_tma_load_2d(" in text and "tw_cp_async16(" not in _kernel(text)
    assert ("tw_gemm_wgmma<" if target == "sm_90a" else "tw_gemm_mma_rf<") in text
    assert ("tw_setmaxnreg" in _kernel(text)) == (target == "sm_90a" and not configs)


@pytest.mark.emulator
@pytest.mark.parametrize("configs", [{}, IN_ORDER])
def test_tma_pipeline_parity_wraps_around_the_stages(configs, tmp_path):
    # 9 k-tiles through 2 stages (no wgmma overlap) and 4 stages (one group in flight)
    for stages in (2, 4):
        text = _emulate(hopper_gemm(128, 128, 576, stages=stages), "sm_90a", tmp_path,
                        128, 128, 576, configs=configs)
        assert "tw_mbar_wait(" in text


@pytest.mark.parametrize("why, func, target, configs", [
    ("pass config", hopper_gemm(), "sm_90a", CPASYNC),
    ("TileLang's name of it", hopper_gemm(), "sm_90a", {"tl.disable_tma_lower": True}),
    ("no TMA before sm_90", hopper_gemm(), "sm_80", {}),
    ("rows of 600 bytes are not 16-byte multiples", hopper_gemm(N=300), "sm_90a", {}),
    ("one stage: nothing to overlap", hopper_gemm(stages=1), "sm_90a", {}),
])
def test_copies_stay_on_cp_async(why, func, target, configs):
    text = _kernel(tilewright.lower(func, f"cuda -arch={target}", configs).source.text)
    assert "tw_tma_load" not in text and "tw_mbar" not in text, why


def test_a_copy_marked_disable_tma_keeps_its_loop_on_cp_async():
    import tilewright_cuda.language as T

    @T.prim_func
    def main(A: T.Tensor((512, 512), "float16"), B: T.Tensor((512, 512), "float16"),
             C: T.Tensor((512, 512), "float32")):
        with T.Kernel(4, 4, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(8, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s, disable_tma=True)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])

    text = _kernel(tilewright.lower(main, "cuda -arch=sm_90a").source.text)
    assert "tw_tma_load" not in text and "tw_cp_async16(" in text


@pytest.mark.parametrize("configs, barriers", [({}, 0), (IN_ORDER, 1)])
def test_attention_waits_for_v_only_before_the_second_gemm(configs, barriers):
    func = kernels.attention.fn(1, 2, 512, 128, "float16", **kernels.ATTENTION)
    loop = _loop(tilewright.lower(func, "cuda -arch=sm_90a", configs).source.text)
    loop = loop[:loop.index("tw_wgmma_wait<0>();", loop.index("tw_gemm_wgmma_rs<"))]
    waits = [m.start() for m in re.finditer(r"tw_mbar_wait\(", loop)]
    gemms = [m.start() for m in re.finditer(r"tw_gemm_wgmma(_rs)?<", loop)]
    # K's barrier before the scores, V's after the softmax, right before P @ V
    assert len(waits) == 2 and waits[0] < gemms[0] < waits[1] < gemms[1]
    assert loop.count("__syncthreads();") + loop.count("tw_named_barrier_sync") == barriers


@pytest.mark.parametrize("why, func, target, configs", [
    ("pass config", hopper_gemm(), "sm_90a", IN_ORDER),
    ("TileLang's name of it", hopper_gemm(), "sm_90a", {"tl.disable_warp_specialized": True}),
    ("setmaxnreg needs sm_90a", hopper_gemm(), "sm_90", {}),
    ("no warpgroup left: 1024 threads", gemm(1024, 1024, 1024, bm=256, bn=128, bk=64,
                                             threads=1024), "sm_90a", {}),
])
def test_loads_issued_in_order_when_no_producer_warpgroup_is_added(why, func, target, configs):
    lowered = tilewright.lower(func, f"cuda -arch={target}", configs)
    kernel = _kernel(lowered.source.text)
    assert "tw_tma_load_2d(" in kernel and "tw_setmaxnreg" not in kernel, why
    assert lowered.source.payload["block"][0] in (256, 1024)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_tma_gemm_sass_loads_with_utmaldg_and_needs_fewer_registers():
    func = kernels.gemm.fn(8192, 8192, 8192, "float16", **kernels.GEMM)
    found = {}
    for name, configs in (("tma", {}), ("cp.async", CPASYNC)):
        text = tilewright.lower(func, "cuda -arch=sm_90a", configs).source.text
        cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
        code = sass.dump(cubin)
        assert "0 bytes spill stores" in log and "HGMMA.64x256x16.F32" in code
        found[name] = (int(re.search(r"Used (\d+) registers", log).group(1)), code)
    regs, code = found["tma"]
    assert "UTMALDG.2D" in code and "SYNCS.PHASECHK" in code and "LDGSTS" not in code
    assert "USETMAXREG.DEALLOC" in code and "USETMAXREG.TRY_ALLOC" in code
    assert "LDGSTS.E.BYPASS.128" in found["cp.async"][1]
    # in order, without the producer warpgroup: fewer registers than with cp.async (no
    # per-thread copy addresses to keep)
    text = tilewright.lower(func, "cuda -arch=sm_90a", IN_ORDER).source.text
    _, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    assert int(re.search(r"Used (\d+) registers", log).group(1)) < found["cp.async"][0]


@pytest.mark.emulator
def test_bench_gemm_config_with_tma_matches_torch(tmp_path):
    import hostemu

    M, N, K = 256, 512, 256
    torch.manual_seed(0)
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.full((M, N), float("nan")).half()
    lowered = tilewright.lower(kernels.gemm.fn(M, N, K, "float16", **kernels.GEMM),
                               "cuda -arch=sm_90a")
    assert "tw_tma_load_2d(" in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2 * 16)


def two_tiles_per_block(M=256, N=256, K=256, dtype="float16"):
    """Each block computes two output tiles, one after the other: the pipelined loop runs
    once per tile, its iterations (versions, barrier phases) counted over both."""
    import tilewright_cuda.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(N // 128, M // 256, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), dtype)
            B_s = T.alloc_shared((64, 128), dtype)
            C_l = T.alloc_fragment((128, 128), "float32")
            for t in T.serial(2):
                T.clear(C_l)
                for k in T.Pipelined(K // 64, num_stages=3):
                    T.copy(A[by * 256 + t * 128, k * 64], A_s)
                    T.copy(B[k * 64, bx * 128], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[by * 256 + t * 128, bx * 128])

    return main


@pytest.mark.emulator
def test_a_pipelined_loop_inside_another_sets_its_barriers_up_once(tmp_path):
    # issued in order (a loop inside another gets a producer warpgroup by default, which
    # walks the outer loop itself: test_cuda_persistent_ws.py); the next round's first load
    # goes before this round's epilogue (test_cuda_persistent_in_order.py)
    text = _emulate(two_tiles_per_block(), "sm_90a", tmp_path, 256, 256, 256,
                    configs=IN_ORDER)
    kernel = _kernel(text)
    assert "tw_setmaxnreg" not in kernel
    rounds = kernel[kernel.index("for (int t = 0;"):]
    assert kernel.index("tw_mbar_init(") < kernel.index("for (int t = 0;")
    assert "tw_mbar_init(" not in rounds and "if (t < 1) {" in rounds
    # by default: barriers set up once, before the roles; the producer's own outer loop
    text = _emulate(two_tiles_per_block(), "sm_90a", tmp_path, 256, 256, 256)
    kernel = _kernel(text)
    assert kernel.index("tw_mbar_init(") < kernel.index("tw_setmaxnreg_dec<56>();") < \
        kernel.index("for (int t_load = 0;")


def scores_through_shared(L=256, d=64, dtype="float16"):
    """O = (Q K^T) V per 128-row block, the product staged in a shared tile the threads
    write in the loop: the second wgmma reads a tile written through the generic proxy."""
    import tilewright_cuda.language as T

    @T.prim_func
    def main(Q: T.Tensor((L, d), dtype), K: T.Tensor((L, d), dtype),
             V: T.Tensor((L, d), dtype), O: T.Tensor((L, d), "float32")):
        with T.Kernel(L // 128, threads=256) as bx:
            Q_s = T.alloc_shared((128, d), dtype)
            K_s = T.alloc_shared((64, d), dtype)
            V_s = T.alloc_shared((64, d), dtype)
            P_s = T.alloc_shared((128, 64), dtype)
            S = T.alloc_fragment((128, 64), "float32")
            acc = T.alloc_fragment((128, d), "float32")
            T.copy(Q[bx * 128, 0], Q_s)
            T.clear(acc)
            for k in T.Pipelined(L // 64, num_stages=2):
                T.copy(K[k * 64, 0], K_s)
                T.copy(V[k * 64, 0], V_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
                T.copy(S, P_s)
                T.gemm(P_s, V_s, acc)
            T.copy(acc, O[bx * 128, 0])

    return main


@pytest.mark.emulator
@pytest.mark.parametrize("configs", [{}, IN_ORDER])
def test_a_tile_the_threads_write_in_the_loop_is_fenced_before_its_wgmma(configs, tmp_path):
    import hostemu

    lowered = tilewright.lower(scores_through_shared(), "cuda -arch=sm_90a", configs)
    loop = _loop(lowered.source.text)
    second = loop[:loop.index("tw_gemm_wgmma<", loop.index("tw_gemm_wgmma<") + 1)]
    fence = second.rindex("tw_fence_proxy_async();")
    barrier = max(second.rfind("__syncthreads();"), second.rfind("tw_named_barrier_sync("))
    assert second.rindex("tw::store_pair(") < fence < barrier  # P's writes, fence, barrier
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(256, 64, generator=g).half() / 4 for _ in range(3))
    o = torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, k, v, o)
    p = (q.float() @ k.float().T).half().float()
    torch.testing.assert_close(o, p @ v.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.emulator
def test_warp_specialised_attention_three_stages_matches_torch(tmp_path):
    # 5 key steps through 3 versions of K and V: the phases wrap; the bench's diagnostic row
    import hostemu

    b, h, s, d = 1, 1, 640, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, generator=g).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    func = kernels.attention.fn(b, h, s, d, "float16", **{**kernels.ATTENTION, "num_stages": 3})
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert "tw_setmaxnreg_dec" in _kernel(lowered.source.text)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, k, v, o)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_the_producer_loop_stays_rolled(tmp_path):
    # one thread issues the loads and waits for each version between them: unrolling its loop
    # buys nothing, and ptxas would unroll it whole (64 k-tiles here, 3 TMA loads each)
    text = tilewright.lower(hopper_gemm(K=4096), "cuda -arch=sm_90a").source.text
    assert "#pragma unroll 1\n      for (int k_load = 0;" in text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), str(tmp_path))
    assert sass.dump(cubin).count("UTMALDG.2D") == 3
