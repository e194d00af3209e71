"""wgmma with A in registers (``transforms.layout.keep_a_in_registers``, ``tw_gemm_wgmma_rs``): a
16-bit fragment written only by a copy of a wgmma accumulator and read only as a wgmma A
operand (FlashAttention's P) stays in the accumulator's registers, converted pairwise, and
the gemm takes wgmma's register-A form: no shared store of P, no fence or barrier for it.
So does one written by ``T.Parallel`` nests at their own elements (``nest_chain``): each
thread computes the elements its registers hold; a nest that reads another element, or nests
that do not cover the fragment, keep it in shared memory.
The host emulation gathers each thread's A rows from its quad's registers (the PTX m64k16 A
fragment layout), so a layout bug gives wrong numbers; the SASS shows HGMMA with a register
A operand."""

import re
import sys
from pathlib import Path

import cuda_source
import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright.transform import prim_func_pass
from tilewright_cuda import arch, executor, intrinsics
from tilewright_cuda.analysis.accesses import Access
from tilewright_cuda.transforms import layout as layout_pass
from tvm import tirx

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

TARGET = "cuda -arch=sm_90a"


def chain(M=128, N=64, D=64, threads=256, dtype="float16", extra_use=False, late_v=False):
    """O = round(Q K^T) V per 128-row block: the FlashAttention gemm chain without softmax.
    ``extra_use`` also writes P to global memory; ``late_v`` loads V after the first gemm."""

    @T.prim_func
    def main(Q: T.Tensor((M, D), dtype), K: T.Tensor((N, D), dtype),
             V: T.Tensor((N, D), dtype), O: T.Tensor((M, D), "float32"),
             P_out: T.Tensor((M, N), dtype)):
        with T.Kernel(M // 128, threads=threads) as bx:
            Q_s = T.alloc_shared((128, D), dtype)
            K_s = T.alloc_shared((N, D), dtype)
            V_s = T.alloc_shared((N, D), dtype)
            S = T.alloc_fragment((128, N), "float32")
            P = T.alloc_fragment((128, N), dtype)
            acc = T.alloc_fragment((128, D), "float32")
            T.copy(Q[bx * 128, 0], Q_s)
            T.copy(K[0, 0], K_s)
            if not late_v:
                T.copy(V[0, 0], V_s)
            T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
            T.copy(S, P)
            if extra_use:
                T.copy(P, P_out[bx * 128, 0])
            if late_v:
                T.copy(V[0, 0], V_s)
            T.gemm(P, V_s, acc, clear_accum=True)
            T.copy(acc, O[bx * 128, 0])

    return main


def _shared_p(monkeypatch):
    """Today's path for comparison: P stays a fragment in shared memory."""
    monkeypatch.setattr(layout_pass, "keep_a_in_registers",
                        lambda options: prim_func_pass("KeepAShared", lambda f: f))


def _attention(configs=None):
    # two stages: with P in shared memory too (the comparison below) three would not fit
    func = kernels.attention.fn(1, 2, 256, 128, "float16", **{**kernels.ATTENTION,
                                                              "num_stages": 2})
    return tilewright.lower(func, TARGET, configs).source.text


def _barriers(loop: str) -> int:
    return loop.count("__syncthreads()") + loop.count("tw_named_barrier_sync")


@pytest.mark.parametrize("configs, before, after, fences", [
    ({}, 2, 0, 0),  # warp-specialised TMA pipeline: the compute warpgroups never wait
    ({"cuda.disable_warp_specialized": True}, 2, 1, 0),  # TMA stages: the refill's barrier
    ({"cuda.disable_tma_lower": True}, 3, 2, 1),  # cp.async: the refill's and Q @ K^T's
])
def test_attention_keeps_p_in_registers(configs, before, after, fences, monkeypatch):
    text = _attention(configs)
    kernel, loop = cuda_source.kernel(text), cuda_source.loop_body(text)
    assert "tw_gemm_wgmma_rs<128, 128, 128, TW_WGMMA_F16, true, 128, 128>((&(acc_s_cast_ptr[0]))" \
        in loop
    assert loop.count("tw_gemm_wgmma<128, 128, 128, TW_WGMMA_F16, false,") == 1  # Q @ K^T: shared A
    # P: 64 halves per thread, 32 pairwise converts, no shared store of it
    assert "half acc_s_cast_ptr[" in kernel and loop.count("tw_wgmma_pack(") == 32
    assert "store_pair" not in loop
    _shared_p(monkeypatch)
    shared = cuda_source.loop_body(_attention(configs))
    assert "tw_gemm_wgmma_rs" not in shared and shared.count("tw::store_pair") == 32
    # the barriers (block or named) per step that ordered P's shared store and reads go; the
    # P @ V gemm has no fence.proxy.async (cp.async: Q @ K^T's fences V too)
    assert (_barriers(shared), _barriers(loop)) == (before, after)
    assert loop.count("tw_fence_proxy_async") == fences


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_chain_takes_register_a(dtype):
    text = tilewright.lower(chain(dtype=dtype), TARGET).source.text
    kernel = cuda_source.kernel(text)
    flag = "TW_WGMMA_BF16" if dtype == "bfloat16" else "TW_WGMMA_F16"
    assert f"tw_gemm_wgmma_rs<64, 64, 64, {flag}, true, 64, 128>" in kernel
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32" in text and \
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;" in text  # the register-A instruction
    # V was fenced with Q and K before the first gemm: the second needs no fence of its own
    assert kernel.count("tw_fence_proxy_async();") == 1


@pytest.mark.parametrize("kwargs", [{"extra_use": True}, {"threads": 128}])
def test_other_uses_keep_p_in_shared_memory(kwargs):
    # P also copied to global memory; 128 threads: 128 rows are not 64 per warpgroup
    kernel = cuda_source.kernel(tilewright.lower(chain(**kwargs), TARGET).source.text)
    assert "tw_gemm_wgmma_rs" not in kernel and "tw_wgmma_pack" not in kernel


def test_other_arches_keep_p_in_shared_memory():
    kernel = cuda_source.kernel(tilewright.lower(chain(), "cuda -arch=sm_80").source.text)
    assert "tw_gemm_wgmma" not in kernel and "tw_gemm_mma" in kernel


def test_a_write_of_b_after_the_last_fence_keeps_the_fence():
    kernel = cuda_source.kernel(tilewright.lower(chain(late_v=True), TARGET).source.text)
    rs = kernel.index("tw_gemm_wgmma_rs<")
    assert kernel.count("tw_fence_proxy_async();") == 2
    assert kernel.rindex("__syncthreads();", 0, rs) > kernel.rindex("tw_cp_async_wait<0>", 0, rs)


def test_shared_access_classification_of_register_a_gemm():
    """analysis.accesses.Access: the register-A call reads B only (A and C are registers)."""
    p = tirx.decl_buffer((128, 64), "float16", "P", scope="local.mma_acc")
    b = tirx.decl_buffer((64, 64), "float16", "B", scope="shared.dyn")
    c = tirx.decl_buffer((128, 64), "float32", "C", scope="local.mma_acc")
    zero = tirx.const(0, "int32")
    stmt = tirx.Evaluate(tirx.call_extern(
        "void", "tw_gemm_wgmma_rs<64, 64, 64, TW_WGMMA_F16, true, 64, 128>",
        tirx.address_of(tirx.BufferLoad(p, [zero, zero])),
        intrinsics.shared_addr(tirx.BufferLoad(b, [zero, zero])),
        tirx.address_of(tirx.BufferLoad(c, [zero, zero])), zero))
    access = Access(stmt, {})
    assert [buf.name for buf, _ in access.reads] == ["B"]
    assert not access.writes and not access.issued


@pytest.mark.emulator
@pytest.mark.parametrize("dtype,kwargs", [("float16", {}), ("bfloat16", {}),
                                          ("float16", {"late_v": True}),
                                          ("float16", {"extra_use": True})])
def test_gemm_chain_matches_torch_in_emulation(dtype, kwargs, tmp_path):
    M, N, D = 256, 64, 64
    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    q, k, v = (torch.randn(r, D).to(tdtype) for r in (M, N, N))
    o = torch.full((M, D), float("nan"))
    p_out = torch.zeros(M, N).to(tdtype)
    lowered = tilewright.lower(chain(M, N, D, dtype=dtype, **kwargs), TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, k, v, o, p_out)
    # P rounded to 16 bits: an element next to a rounding boundary may round the other way
    # (one ulp of |P| ~ 8, times V), a layout error is off by O(1) almost everywhere
    p = (q.float() @ k.float().t()).to(tdtype).float()
    torch.testing.assert_close(o, p @ v.float(), rtol=1e-2, atol=3e-2)


def _resources(log: str) -> tuple[int, int]:
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", log).group(1))
    return registers, spills


@pytest.mark.nvrtc
@pytest.mark.sass
def test_attention_sass_has_register_a_hgmma(monkeypatch, tmp_path):
    builds = {}
    for name in ("shared P", "P in registers"):
        if name == "P in registers":
            monkeypatch.undo()
        else:
            _shared_p(monkeypatch)
        text = _attention()
        cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), tmp_path)
        code = sass.dump(cubin)
        counts = {op: len(re.findall(rf"\s{op}[\s.]", code)) for op in ("BAR", "STS", "HGMMA")}
        builds[name] = (code, *_resources(log), counts)
        print(f"attention 128x128, 256 threads, {name}: {builds[name][1]} registers, "
              f"{builds[name][2]} bytes spilled, SASS {counts}")
    shared, registers = builds["shared P"][0], builds["P in registers"][0]
    # Q @ K^T reads A through a descriptor; P @ V reads A from registers (R.., not gdesc)
    hgmma = r"HGMMA\.64x128x16\.F32 R\d+, "
    assert re.search(hgmma + r"gdesc\[", registers)
    assert len(re.findall(hgmma + r"R\d+, gdesc\[UR\d+\]\.tnspB", registers)) == 8
    assert not re.search(hgmma + r"R\d+, gdesc", shared)
    for name in builds:
        assert builds[name][2] == 0, name  # no spills
    assert builds["P in registers"][3]["STS"] < builds["shared P"][3]["STS"]
    assert builds["P in registers"][3]["BAR"] < builds["shared P"][3]["BAR"]


def nest_chain(M=256, N=64, K=256, block_K=64, threads=256, dtype="float16", form="own"):
    """O = f(X) B^T per 128-row block, ``f(x) = 2 x - ko`` of each k-tile ``ko`` computed into
    the fragment P by a ``T.Parallel`` nest over a shared tile (W4A16's dequantisation in
    miniature) in a two-stage pipeline. ``form`` writes P another way that must keep it in
    shared memory: ``mirror`` (a nest after the loop reads another iteration's element of P
    into R: the last k-tile's f(X) mirrored along K), ``halves`` (two nests of 64 rows each:
    neither covers P)."""

    @T.prim_func
    def main(X: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
             O: T.Tensor((M, N), "float32"), R: T.Tensor((M, block_K), dtype)):
        with T.Kernel(M // 128, threads=threads) as bx:
            X_s = T.alloc_shared((128, block_K), dtype)
            B_s = T.alloc_shared((N, block_K), dtype)
            P = T.alloc_fragment((128, block_K), dtype)
            acc = T.alloc_fragment((128, N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(K // block_K, num_stages=2):
                T.copy(X[bx * 128, ko * block_K], X_s)
                T.copy(B[0, ko * block_K], B_s)
                if form == "halves":
                    for h in T.unroll(2):
                        for i, j in T.Parallel(64, block_K):
                            P[h * 64 + i, j] = X_s[h * 64 + i, j] * T.cast(2, dtype) - \
                                T.cast(ko, dtype)
                else:
                    for i, j in T.Parallel(128, block_K):
                        P[i, j] = X_s[i, j] * T.cast(2, dtype) - T.cast(ko, dtype)
                T.gemm(P, B_s, acc, transpose_B=True)
            T.copy(acc, O[bx * 128, 0])
            if form == "mirror":
                for i, j in T.Parallel(128, block_K):
                    R[bx * 128 + i, j] = P[i, block_K - 1 - j]

    return main


def _nest_reference(x, b, block_K):
    """O and R of :func:`nest_chain` (R: ``mirror``'s)."""
    tiles = [(x[:, ko * block_K:(ko + 1) * block_K] * 2 - ko).to(x.dtype)
             for ko in range(x.shape[1] // block_K)]
    return torch.cat(tiles, 1).float() @ b.float().t(), tiles[-1].flip(1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_nest_written_fragment_takes_register_a(dtype):
    # each thread computes the 32 halves its registers hold of P in the wgmma layout (row 16
    # warp + lane / 4 (+ 8), columns 2 (lane % 4) + 8 t (+ 1)): no shared store of P
    text = tilewright.lower(nest_chain(dtype=dtype), TARGET).source.text
    kernel = cuda_source.kernel(text)
    flag = "TW_WGMMA_BF16" if dtype == "bfloat16" else "TW_WGMMA_F16"
    assert f"tw_gemm_wgmma_rs<64, 64, 64, {flag}, false, 64, 128>((&(P_ptr[0]))" in kernel
    c_type = "nv_bfloat16" if dtype == "bfloat16" else "half"
    assert f"{c_type} P_ptr[64];" in kernel  # (1, 64): the fragment's row length
    loop = cuda_source.loop_body(text, "ko")
    assert loop.count("P_ptr[31] = ") == 1 and "P_ptr[32] = " not in loop
    assert "store_pair" not in loop
    # B's fence goes in front of the pipeline's barrier after the copies land
    # (sync.drop_redundant_fences): one barrier a k-tile, none between the nest and the gemm
    assert loop.count("__syncthreads()") == 1 and loop.count("tw_fence_proxy_async()") == 1
    assert loop.index("tw_cp_async_wait<0>();") < loop.index("tw_fence_proxy_async();") < \
        loop.index("__syncthreads();") < loop.index("P_ptr[0] = ")


@pytest.mark.parametrize("kwargs", [{"form": "mirror"}, {"form": "halves"}, {"threads": 128}])
def test_other_nests_keep_the_fragment_in_shared_memory(kwargs):
    # another iteration's element read, nests that do not cover P, 128 rows on one warpgroup
    kernel = cuda_source.kernel(tilewright.lower(nest_chain(**kwargs), TARGET).source.text)
    assert "tw_gemm_wgmma_rs" not in kernel and "P_ptr[64]" not in kernel


@pytest.mark.emulator
@pytest.mark.parametrize("dtype,form,threads", [
    ("float16", "own", 256), ("bfloat16", "own", 256),
    ("float16", "mirror", 256), ("float16", "halves", 256), ("float16", "own", 128)])
def test_nest_written_fragment_matches_torch_in_emulation(dtype, form, threads, tmp_path):
    # 4 k-tiles through two stages: the registers rewritten after each k-tile's wgmma retired
    M, N, K, block_K = 256, 64, 256, 64
    gen = torch.Generator().manual_seed(3)
    tdtype = getattr(torch, dtype)
    x, b = (torch.randn(r, K, generator=gen).to(tdtype) for r in (M, N))
    o, r = torch.full((M, N), float("nan")), torch.zeros(M, block_K).to(tdtype)
    lowered = tilewright.lower(nest_chain(M, N, K, block_K, threads, dtype, form), TARGET)
    assert ("tw_gemm_wgmma_rs<" in cuda_source.kernel(lowered.source.text)) == \
        (form == "own" and threads == 256)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, b, o, r)
    want, mirrored = _nest_reference(x, b, block_K)
    torch.testing.assert_close(o, want, rtol=1e-2, atol=3e-2)
    if form == "mirror":
        assert torch.equal(r, mirrored)
