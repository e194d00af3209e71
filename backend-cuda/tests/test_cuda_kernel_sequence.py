"""Kernels of several ``with T.Kernel`` blocks run one after another (the ``kernel_sequence``
feature): one ``__global__`` function per block in one source, launched in order, the
``T.alloc_global`` workspaces allocated by the launcher; run in the host emulation against
torch."""

import json
import subprocess
import sys

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.jit import compile as tw_compile
from tilewright.runtime.cuda import CubinFunction, check_launch, kernels_of
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases
from tvm import tirx


def two_blocks(M, N, bm=4, bn=8):
    """The second block reads rows of the workspace the first wrote from other blocks."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        W = T.alloc_global((M, N), "float32")
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M and bx * bn + j < N:
                    W[by * bm + i, bx * bn + j] = A[by * bm + i, bx * bn + j] * 2.0
        with T.Kernel(T.ceildiv(N, 16), threads=64) as bx:
            for i, j in T.Parallel(M, 16):
                if bx * 16 + j < N:
                    B[i, bx * 16 + j] = W[M - 1 - i, bx * 16 + j] + 1.0

    return main


def split_kv_decode(batch, kv_heads, groups, seq, dim, splits, block_n=32):
    """Grouped-query decoding: each of ``splits`` blocks per (batch, kv head) attends to its
    slice of the keys (online softmax), writing its partial output and log-sum-exp (base 2)
    into workspaces; a second kernel combines the splits."""
    heads = kv_heads * groups
    chunk = seq // splits
    scale = (1.0 / dim) ** 0.5 * 1.44269504

    @T.prim_func
    def main(Q: T.Tensor((batch, heads, dim), "float16"),
             K: T.Tensor((batch, seq, kv_heads, dim), "float16"),
             V: T.Tensor((batch, seq, kv_heads, dim), "float16"),
             O: T.Tensor((batch, heads, dim), "float16")):
        lse = T.alloc_global((batch, heads, splits), "float32")
        part = T.alloc_global((batch, heads, splits, dim), "float32")
        with T.Kernel(splits, kv_heads, batch, threads=128) as (sp, g, b):
            q_s = T.alloc_shared((groups, dim), "float16")
            k_s = T.alloc_shared((block_n, dim), "float16")
            v_s = T.alloc_shared((block_n, dim), "float16")
            acc_s = T.alloc_fragment((groups, block_n), "float32")
            acc_s_cast = T.alloc_fragment((groups, block_n), "float16")
            acc_o = T.alloc_fragment((groups, dim), "float32")
            m = T.alloc_fragment((groups,), "float32")
            m_prev = T.alloc_fragment((groups,), "float32")
            rescale = T.alloc_fragment((groups,), "float32")
            row_sum = T.alloc_fragment((groups,), "float32")
            total = T.alloc_fragment((groups,), "float32")
            T.copy(Q[b, g * groups:(g + 1) * groups, :], q_s)
            T.fill(acc_o, 0)
            T.fill(total, 0)
            T.fill(m, -T.infinity("float32"))
            for k in T.Pipelined(chunk // block_n, num_stages=1):
                start = sp * chunk + k * block_n
                T.copy(K[b, start:start + block_n, g, :], k_s)
                T.clear(acc_s)
                T.gemm(q_s, k_s, acc_s, transpose_B=True)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(groups):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(groups, block_n):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(groups):
                    total[i] = total[i] * rescale[i] + row_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(groups, dim):
                    acc_o[i, j] *= rescale[i]
                T.copy(V[b, start:start + block_n, g, :], v_s)
                T.gemm(acc_s_cast, v_s, acc_o)
            for i, j in T.Parallel(groups, dim):
                part[b, g * groups + i, sp, j] = acc_o[i, j] / total[i]
            for i in T.Parallel(groups):
                lse[b, g * groups + i, sp] = T.log2(total[i]) + m[i] * scale
        with T.Kernel(heads, batch, threads=dim) as (h, b):
            top = T.alloc_fragment((dim,), "float32")
            weight = T.alloc_fragment((dim,), "float32")
            acc = T.alloc_fragment((dim,), "float32")
            for j in T.Parallel(dim):
                top[j] = -T.infinity("float32")
                for s in T.serial(splits):
                    top[j] = T.max(top[j], lse[b, h, s])
                weight[j] = 0.0
                acc[j] = 0.0
                for s in T.serial(splits):
                    weight[j] += T.exp2(lse[b, h, s] - top[j])
                    acc[j] += part[b, h, s, j] * T.exp2(lse[b, h, s] - top[j])
                O[b, h, j] = acc[j] / weight[j]

    return main


def test_two_blocks_share_a_workspace(tmp_path):
    M, N = 10, 37
    lowered = tilewright.lower(two_blocks(M, N), "cuda -arch=sm_90a")
    launch = check_launch(lowered.source.payload)
    entries = [k["entry"] for k in launch["kernels"]]
    assert entries == ["main_0_kernel", "main_1_kernel"]
    assert [k["block"][0] for k in launch["kernels"]] == [128, 64]
    assert launch["workspaces"] == [{"name": "W", "dtype": "float32",
                                     "bytes": str(M * N * 4)}]
    for entry in entries:
        assert f" {entry}(" in lowered.source.text
    assert lowered.source.text.count('extern "C" __global__') >= 2
    a = torch.randn(M, N)
    b = torch.full((M, N), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, a.flip(0) * 2 + 1)


def one_block(M, workspace):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        if workspace:
            W = T.alloc_global((M,), "float32")
        with T.Kernel(1, threads=32):
            for i in T.Parallel(M):
                if workspace:
                    W[i] = A[i] + 1.0
                    B[i] = W[i] * 3.0
                else:
                    B[i] = (A[i] + 1.0) * 3.0

    return main


@pytest.mark.parametrize("workspace", [False, True])
def test_one_block_with_and_without_a_workspace(workspace, tmp_path):
    lowered = tilewright.lower(one_block(40, workspace), "cuda -arch=sm_80")
    launch = lowered.source.payload
    assert ("kernels" in launch) == workspace  # one kernel: the description of main
    assert [k["entry"] for k in kernels_of(launch)] == ["main_0_kernel" if workspace
                                                        else "main_kernel"]
    a, b = torch.randn(40), torch.full((40,), float("nan"))
    hostemu.run(lowered.source.text, launch, tmp_path, a, b)
    torch.testing.assert_close(b, (a + 1) * 3)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_split_kv_decode_then_combine_matches_torch(arch, tmp_path):
    batch, kv_heads, groups, seq, dim, splits = 1, 2, 16, 128, 32, 2
    func = split_kv_decode(batch, kv_heads, groups, seq, dim, splits)
    lowered = tilewright.lower(func, f"cuda -arch={arch}")
    launch = lowered.source.payload
    assert [k["grid"] for k in launch["kernels"]] == [[str(splits), str(kv_heads), "1"],
                                                      [str(kv_heads * groups), "1", "1"]]
    assert [w["name"] for w in launch["workspaces"]] == ["lse", "part"]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, kv_heads * groups, dim, generator=gen).half()
    k = torch.randn(batch, seq, kv_heads, dim, generator=gen).half()
    v = torch.randn(batch, seq, kv_heads, dim, generator=gen).half()
    out = torch.full_like(q, float("nan"))
    hostemu.run(lowered.source.text, launch, tmp_path, q, k, v, out)
    keys = k.double().repeat_interleave(groups, dim=2).transpose(1, 2)  # B, H, S, D
    values = v.double().repeat_interleave(groups, dim=2).transpose(1, 2)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double().unsqueeze(2), keys, values).squeeze(2)
    torch.testing.assert_close(out.double(), want, rtol=2e-3, atol=2e-3)


def test_launch_descriptions_of_sequences_are_checked():
    lowered = tilewright.lower(two_blocks(8, 8), "cuda -arch=sm_80")
    launch = json.loads(json.dumps(lowered.source.payload))
    kernels_of(check_launch(launch))
    bad = json.loads(json.dumps(launch))
    bad["kernels"][1]["params"][-1]["workspace"] = 3
    with pytest.raises(ValueError, match="workspace index"):
        check_launch(bad)
    bad = json.loads(json.dumps(launch))
    bad["workspaces"][0]["bytes"] = "__import__('os')"
    with pytest.raises(ValueError, match="workspace W"):
        check_launch(bad)
    CubinFunction(b"", launch)  # builds its grids and sizes without a GPU


def test_a_statement_between_blocks_is_refused():
    # the language stores nothing outside 'with T.Kernel'; IR built otherwise may
    func = two_blocks(8, 8)
    alloc, first, second = func.body.seq
    host = tirx.Evaluate(tirx.call_extern("int32", "host_work"))
    func = func.with_body(tirx.SeqStmt([alloc, first, host, second]))
    with pytest.raises(tilewright.errors.KernelError, match="move this statement"):
        tilewright.lower(func, "cuda -arch=sm_80")


SEQUENCE_CASES = [c for c in cases(["kernel_sequence"]) if c.variant != "dynamic"]


@pytest.mark.emulator
@pytest.mark.parametrize("case", SEQUENCE_CASES, ids=[c.id for c in SEQUENCE_CASES])
def test_conformance_case_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    (expected,) = case.reference(inputs)
    out = torch.full(expected.shape, float("nan"), dtype=getattr(torch, case.dtype))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *inputs, out)
    assert_close(out, expected, dtype=case.dtype, name=case.id)


@pytest.mark.nvrtc
def test_nvrtc_builds_one_cubin_and_the_bundle_loads_without_tvm(tmp_path):
    kernel = tw_compile(two_blocks(10, 37), out_idx=[1], target="cuda -arch=sm_90a",
                        execution_backend="nvrtc")
    entries = [k["entry"] for k in kernel.executable.kernels]
    assert entries == ["main_0_kernel", "main_1_kernel"]
    assert all(e.encode() in kernel.executable.cubin for e in entries)
    path = kernel.export(tmp_path / "bundle")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["entry"] == "main_0_kernel,main_1_kernel"
    code = ("import sys, tilewright.runtime as rt; k = rt.load(sys.argv[1]); "
            "assert 'tvm' not in sys.modules, 'tvm imported'; "
            "print([x['entry'] for x in k.function.kernels])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str(entries)


def gemm_then_relu(M, N, K, bm=128, bn=128, bk=64):
    """A TMA-pipelined wgmma GEMM into a workspace (sm_90a: its own descriptors, producer
    warpgroup and shared memory), then an elementwise block of other threads reading it."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        W = T.alloc_global((M, N), "float16")
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, W[by * bm, bx * bn])
        with T.Kernel(T.ceildiv(N, 64), M, threads=64) as (bx, row):
            for j in T.Parallel(64):
                C[row, bx * 64 + j] = T.max(W[row, bx * 64 + j], T.float16(0)) * T.float16(2)

    return main


@pytest.mark.emulator
def test_each_block_keeps_its_own_tma_descriptors_and_threads(tmp_path):
    M = N = K = 128
    lowered = tilewright.lower(gemm_then_relu(M, N, K), "cuda -arch=sm_90a")
    first, second = lowered.source.payload["kernels"]
    assert [p["tensor"] for p in first["params"] if p["kind"] == "tensormap"] == ["A", "B"]
    assert not [p for p in second["params"] if p["kind"] == "tensormap"]
    assert first["dynamic_smem_bytes"] > 0 and second["dynamic_smem_bytes"] == 0
    assert first["block"][0] > second["block"][0] == 64
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    c = torch.full((M, N), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    want = ((a.double() @ b.double()).half().double().clamp(min=0) * 2)
    torch.testing.assert_close(c.double(), want, rtol=1e-2, atol=5e-2)


def scratch_sized_by(how: str):
    """A workspace that the first block fills and the second reads, of ``rows`` elements (a
    scalar argument: ``scalar``) or ``S``, a symbol no argument carries (``nowhere``) or
    found only inside a tensor's extent ``2 * S`` (``inside``)."""
    M, S = T.dynamic("M"), T.dynamic("S")
    a_rows = 2 * S if how == "inside" else M

    if how == "scalar":
        @T.prim_func
        def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32"), rows: T.int32):
            W = T.alloc_global((rows,), "float32")
            with T.Kernel(T.ceildiv(rows, 32), threads=32) as bx:
                for i in T.Parallel(32):
                    if bx * 32 + i < rows:
                        W[bx * 32 + i] = A[bx * 32 + i] * 2.0
            with T.Kernel(T.ceildiv(rows, 32), threads=32) as bx:
                for i in T.Parallel(32):
                    if bx * 32 + i < rows:
                        B[bx * 32 + i] = W[bx * 32 + i] + 1.0
        return main

    @T.prim_func
    def main(A: T.Tensor((a_rows,), "float32"), B: T.Tensor((a_rows,), "float32")):
        W = T.alloc_global((S,), "float32")  # sized by S
        with T.Kernel(8, threads=32) as bx:
            for i in T.Parallel(32):
                W[bx * 32 + i] = A[bx * 32 + i] * 2.0
        with T.Kernel(8, threads=32) as bx:
            for i in T.Parallel(32):
                B[bx * 32 + i] = W[bx * 32 + i] + 1.0
    return main


def test_a_workspace_sized_by_a_symbol_unknown_at_launch_is_refused():
    """The launcher allocates the workspace before the blocks run: a symbol that no tensor
    extent nor scalar argument carries (S alone) cannot size it. It was missing from the
    launch symbols: the description failed when loaded ('reads S, which is not a shape
    symbol')."""
    with pytest.raises(tilewright.errors.KernelError, match=r"the T.alloc_global workspace "
                       r"'W' of shape \(S,\) .* S is neither the whole extent of a tensor "
                       r"argument nor an integer scalar argument") as err:
        tilewright.lower(scratch_sized_by("nowhere"), "cuda -arch=sm_80")
    lines = open(__file__).read().splitlines()
    assert err.value.location.line == 1 + next(n for n, text in enumerate(lines)
                                               if text.endswith("# sized by S"))


@pytest.mark.emulator
def test_a_workspace_sized_by_a_symbol_solved_from_an_extent(tmp_path):
    # S found only inside A's extent 2 * S: replaced by A's extent // 2 (the workspace's size
    # and the kernels' reads alike), which the launcher reads
    lowered = tilewright.lower(scratch_sized_by("inside"), "cuda -arch=sm_80")
    launch = lowered.source.payload
    assert launch["workspaces"][0]["bytes"] == "((A_dim0 // 2) * 4)"
    a, b = torch.randn(256), torch.full((256,), float("nan"))
    hostemu.run(lowered.source.text, launch, tmp_path, a, b)  # S = 128
    torch.testing.assert_close(b[:128], a[:128] * 2 + 1)
    # the blocks' second half lies past W's S elements: not written, read as 0
    torch.testing.assert_close(b[128:], torch.ones(128))


@pytest.mark.emulator
def test_a_workspace_sized_by_a_scalar_argument(tmp_path):
    lowered = tilewright.lower(scratch_sized_by("scalar"), "cuda -arch=sm_80")
    launch = lowered.source.payload
    assert launch["symbols"]["rows"] == [2]
    assert launch["workspaces"] == [{"name": "W", "dtype": "float32", "bytes": "(rows * 4)"}]
    CubinFunction(b"", launch)
    a, b = torch.randn(50), torch.full((50,), float("nan"))
    hostemu.run(lowered.source.text, launch, tmp_path, a, b, 37)
    torch.testing.assert_close(b[:37], a[:37] * 2 + 1)
    assert b[37:].isnan().all()


def test_a_grid_over_a_symbol_unknown_at_launch_is_refused():
    """One block, no workspace: its grid reads S, found only inside the extent S * S (a
    linear extent, 2 * S, gives it: the launcher solves that)."""
    S = T.dynamic("S")

    @T.prim_func
    def main(A: T.Tensor((S * S,), "float32"), B: T.Tensor((S * S,), "float32")):
        with T.Kernel(T.ceildiv(S, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < S:
                    B[bx * 32 + i] = A[bx * 32 + i]

    with pytest.raises(tilewright.errors.KernelError, match=r"launches the kernel with the "
                       r"symbol S, which is neither the whole extent"):
        tilewright.lower(main, "cuda -arch=sm_80")
