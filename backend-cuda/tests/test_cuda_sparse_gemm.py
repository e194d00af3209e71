"""T.gemm_sp (examples/gemm_sp.py) on CUDA: float16/bfloat16 values and metadata in shared
memory into a register accumulator run on ``wgmma.mma_async.sp m64nNk32`` on sm_90a (64 rows
per warpgroup, C in the wgmma accumulator layout) and on ``mma.sp::ordered_metadata
m16n8k32`` otherwise (sm_80+); the machine code shows the sparse tensor-core instruction
(``HGMMA.SP.64x128x32.F32``, ``HMMA.SP.16832.F32``) and no dense HMMA or HGMMA; the host
emulation checks every metadata width and B's two orientations against torch on both
instructions (the emulated wgmma.sp reads values and B through its decoded descriptors and
gathers each warp's metadata from its lanes as the PTX ISA lays it out), and the thread gemm
other dtypes take; a tile the instruction cannot cut is refused naming it. With the pass config
``cuda.tma_unswizzled`` the bench's TMA-fed configurations (kernels.GEMM_SP_TMA_ROWS: the
metadata tile one unswizzled box, a producer warpgroup or one thread issuing, one wgmma.sp
group in flight on held registers from 3 stages; persistent blocks walking several tiles,
clusters sharing B) match torch in emulation too. (cuda_cases'
gemm_sp runs the example in emulation; the catalogue's gemm_sp row runs in
test_cuda_conformance_emulated.)"""

import re
import subprocess
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright import sparse
from tilewright.errors import UnsupportedOpError
from tilewright.utils.sparse import compress, randn_semi_sparse
from tilewright_cuda import arch, executor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import gemm_sp  # noqa: E402 - after the sys.path setup

TESTS = Path(__file__).resolve().parent


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_sparse_gemm_runs_on_the_sparse_tensor_core_instruction(tmp_path, arch_name):
    func = gemm_sp.gemm_sp_kernel.fn(256, 256, 256, block_M=128, block_N=128, block_K=64)
    source = tilewright.lower(func, f"cuda -arch={arch_name}").source.text
    assert "tw_gemm_mma_sp_rf<128, 128, 64, false, 128, 2, 2" in source
    cubin, log = executor.nvcc_compile(source, arch.get(arch_name), tmp_path)
    code = sass.dump(cubin)
    # 4 warps of 64x64: 4 x 8 tiles of 16x8 per k32 step, 2 steps a 64-deep k-tile; nvcc may
    # unroll the loop over the 4 k-tiles whole (it does for sm_80)
    assert len(re.findall(r"\sHMMA\.SP\.16832\.F32\s", code)) in (64, 4 * 64), code
    assert not re.search(r"\sHMMA\.(?!SP)", code)  # no dense HMMA
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("trans_b", [False, True])
def test_sparse_gemm_runs_on_sparse_wgmma_on_sm_90a(tmp_path, trans_b):
    # 128 x 128 tiles on two warpgroups: one wgmma.sp of 64 x 128 x 32 per warpgroup and k32
    # step, B [K, N] (MN-major, the transpose operand) or [N, K]
    func = _sparse.fn(256, 256, 256, "float16", "int16", trans_b, bm=128, bn=128, threads=256)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source.text
    assert f"tw_gemm_wgmma_sp<128, 64, 128, TW_WGMMA_F16, {str(not trans_b).lower()}, 128, " \
        "64, " in source
    assert "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.f16.f16" in source
    cubin, log = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    code = sass.dump(cubin)
    assert re.findall(r"\sHGMMA\.SP\.64x128x32\.F32\s", code), code
    assert not re.search(r"\sHMMA\.", code) and not re.search(r"\sHGMMA\.(?!SP)", code)
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log


@tilewright.jit(out_idx=[-1])
def _sparse(M, N, K, dtype, meta, trans_b, bm=64, bn=64, bk=64, threads=128, stages=2):
    ef = sparse.e_factor(dtype, meta)
    b_shape, bs_shape = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor((M, K // 2), dtype), E: T.Tensor((M, K // ef), meta),
             B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk // 2), dtype)
            E_s = T.alloc_shared((bm, bk // ef), meta)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk // 2], A_s)
                T.copy(E[by * bm, k * bk // ef], E_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_f, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.emulator
@pytest.mark.parametrize(("dtype", "meta", "trans_b", "arch_name", "path"), [
    ("float16", "int8", False, "sm_80", "tw_gemm_mma_sp_rf"),
    ("bfloat16", "int16", True, "sm_80", "tw_gemm_mma_sp_rf"),
    ("float16", "int32", True, "sm_80", "tw_gemm_mma_sp_rf"),
    ("float32", "int16", False, "sm_80", "gemm_acc"),  # no float32 mma.sp: the thread gemm
    ("float16", "int16", False, "sm_90a", "tw_gemm_wgmma_sp"),  # B [K, N]: MN-major B
    ("bfloat16", "int8", True, "sm_90a", "tw_gemm_wgmma_sp"),
    ("float16", "int32", True, "sm_90a", "tw_gemm_wgmma_sp"),
])
def test_sparse_gemm_matches_torch_in_emulation(tmp_path, dtype, meta, trans_b, arch_name,
                                                path):
    m, n, k = 128, 64, 192  # 2 x 1 blocks, 3 k-tiles through the pipeline
    lowered = tilewright.lower(_sparse.fn(m, n, k, dtype, meta, trans_b),
                               f"cuda -arch={arch_name}")
    assert path in lowered.source.text
    gen = torch.Generator().manual_seed(4)
    t = getattr(torch, dtype)
    a = randn_semi_sparse(m, k, t, generator=gen)
    b = torch.randn(k, n, generator=gen).to(t)
    values, e = compress(a, getattr(torch, meta))
    c = torch.full((m, n), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, values, e,
                b.T.contiguous() if trans_b else b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


# one emulated run in a process of its own (a wgmma.sp whose metadata register was overwritten
# aborts the process): argv the source, its launch payload, the work folder
RUN = """
import json, sys, torch
sys.path.insert(0, {tests!r})
import hostemu
from pathlib import Path
from tilewright.utils.sparse import compress, randn_semi_sparse
gen = torch.Generator().manual_seed(5)
a = randn_semi_sparse(128, 512, torch.float16, generator=gen)
b = torch.randn(512, 64, generator=gen).half()
values, e = compress(a, torch.int16)
c = torch.full((128, 64), float("nan"))
hostemu.run(Path(sys.argv[1]).read_text(), json.loads(Path(sys.argv[2]).read_text()),
            Path(sys.argv[3]), values, e, b, c)
torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)
print("MATCHES")
"""


def _emulate_in_subprocess(text: str, launch: dict, tmp_path) -> subprocess.CompletedProcess:
    return hostemu.run_script(RUN, text, launch, tmp_path)


@pytest.mark.emulator
def test_pipelined_sparse_wgmma_keeps_one_group_in_flight_on_held_registers(tmp_path):
    # 3 stages and 8 k-tiles: the pipeline wraps around its stages; the loop's wgmma.sp group
    # stays in flight into the next iteration (wait_group 1) with its metadata in one of two
    # register sets the loop holds (even and odd k-tiles), kept live after every wait; the
    # emulation checks at each retirement that the register a wgmma.sp read still holds
    # what it read. One set for every k-tile is the H200's race (28% wrong elements at
    # 8192^3: ptxas reused the register under the HGMMA.SP in flight): the emulation aborts.
    lowered = tilewright.lower(_sparse.fn(128, 64, 512, "float16", "int16", False, stages=3),
                               "cuda -arch=sm_90a")
    text, launch = lowered.source.text, lowered.source.payload
    kernel = _kernel(text)
    assert "tw_gemm_wgmma_sp_kept<" in kernel and "tw_wgmma_wait<1>" in kernel
    assert kernel.count("tw_wgmma_keep<2>((&(sp_meta_even_ptr[0])), (&(sp_meta_odd_ptr[0])))") \
        == 2  # after the loop's wait_group 1 and after the drain's wait_group 0
    good = _emulate_in_subprocess(text, launch, tmp_path)
    assert good.returncode == 0 and "MATCHES" in good.stdout, good.stdout + good.stderr
    parity = "(&(sp_meta_odd_ptr[0])), (k & 1))"  # the k-tile's parity (the loop is k's)
    assert kernel.count(parity) == 1
    broken = text.replace(parity, "(&(sp_meta_odd_ptr[0])), 0)")  # every k-tile even
    bad = _emulate_in_subprocess(broken, launch, tmp_path)
    if "overwritten before its wait_group" not in bad.stdout:
        bad = _emulate_in_subprocess(broken, launch, tmp_path)  # g++ killed under load
    assert bad.returncode != 0
    assert "the metadata register read by a wgmma.sp in flight was overwritten before its " \
           "wait_group" in bad.stdout, bad.stdout + bad.stderr


@pytest.mark.emulator
def test_two_stage_sparse_wgmma_retires_its_group_in_the_k_tile(tmp_path):
    # two stages refill the version the last k-tile read: its group retires first
    # (wait_group 0), on the metadata registers of the helper's own
    m, n, k = 128, 64, 320  # 5 k-tiles through the 2 stages
    lowered = tilewright.lower(_sparse.fn(m, n, k, "float16", "int16", False),
                               "cuda -arch=sm_90a")
    kernel = _kernel(lowered.source.text)
    assert "tw_gemm_wgmma_sp<" in kernel and "tw_gemm_wgmma_sp_kept" not in kernel
    assert "tw_wgmma_wait<1>" not in kernel and "tw_wgmma_wait<0>" in kernel
    gen = torch.Generator().manual_seed(6)
    a = randn_semi_sparse(m, k, torch.float16, generator=gen)
    b = torch.randn(k, n, generator=gen).to(torch.float16)
    values, e = compress(a, torch.int16)
    c = torch.full((m, n), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, values, e, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


# a SASS instruction with its guard predicate: (address, predicate, opcode, operands)
_GUARDED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
# opcodes whose first operand is not a register they write
_NO_DEST = ("ST", "BRA", "BAR", "HGMMA", "WARPGROUP", "LDGSTS", "LDGDEPBAR", "DEPBAR", "MEMBAR",
            "NOP", "ISETP", "UISETP", "PLOP3", "FENCE", "SYNCS", "EXIT", "RET", "CALL")


def _written(opcode: str, operands: str) -> set:
    """The general registers an instruction writes (its first operand; two for 64-bit
    results)."""
    match = re.match(r"\s*R(\d+)\b", operands)
    if opcode.startswith(_NO_DEST) or match is None:
        return set()
    r = int(match[1])
    return {r, r + 1} if ".64" in opcode or "WIDE" in opcode else {r}


def _metadata_of(operands: str) -> int:
    """The metadata register of an HGMMA.SP (``R24, gdesc[UR8].tnspB, R24, R88, 0x0``)."""
    return int(operands.split(",")[3].strip().removeprefix("R"))


def _hot_loop(code: list) -> tuple[int, int]:
    """The first and last address of the loop with the most HGMMA.SP (the shortest of those)."""
    best, key = (0, -1), (0, 0)
    for at, _guard, op, operands in code:
        target = re.search(r"0x([0-9a-f]+)", operands) if op.startswith("BRA") else None
        if target is None or int(target[1], 16) > at:
            continue
        start = int(target[1], 16)
        count = sum(o.startswith("HGMMA.SP") for a, _g, o, _r in code if start <= a <= at)
        if (count, start - at) > key:
            best, key = (start, at), (count, start - at)
    return best


def metadata_races(text: str) -> list[str]:
    """Where the SASS of a pipelined sparse-wgmma kernel could change a metadata register
    under an HGMMA.SP in flight. Where each k-tile's group retires in it, nothing may write
    a metadata register between its HGMMA.SP and the wait; where the loop leaves a group in
    flight, its HGMMA.SP must
    stand in two branches (the parities: the host emulation checks that they alternate),
    which read disjoint metadata registers, each written (unguarded) only in its own branch and
    before the HGMMA.SP that reads it with no branch or wgmma wait in between, and nothing
    after the loop writes one before the drain (``WARPGROUP.DEPBAR.LE gsb0, 0x0``)."""
    code = [(int(m[1], 16), m[2] or "", m[3], m[4]) for m in _GUARDED.finditer(text)]
    first, last = _hot_loop(code)
    body = [c for c in code if first <= c[0] <= last]
    problems, segments, current = [], [], set()
    for _at, _guard, op, operands in body:
        if op.startswith("HGMMA.SP"):
            current.add(_metadata_of(operands))
        if op.startswith("BRA"):
            segments.append(current)
            current = set()
    segments.append(current)
    meta = set().union(*segments)
    in_flight = any(op.startswith("WARPGROUP.DEPBAR") and operands.strip().endswith("0x1")
                    for _at, _guard, op, operands in body)
    if not in_flight:  # each k-tile's group retires in it: nothing writes a register before
        for k, (_at, _guard, op, operands) in enumerate(body):
            reg = _metadata_of(operands) if op.startswith("HGMMA.SP") else None
            for at, _g, later, later_operands in body[k + 1:] if reg is not None else ():
                if later.startswith("WARPGROUP.DEPBAR"):
                    break
                if reg in _written(later, later_operands):
                    problems.append(f"{at:#x}: R{reg} written under its HGMMA.SP")
        return problems if meta else ["no HGMMA.SP in the hot loop"]
    if in_flight and sum(bool(s) for s in segments) != 2:
        # the group of the k-tile before is in flight where this k-tile writes its metadata:
        # only the other parity's registers are free then
        problems.append("a group stays in flight, but the HGMMA.SP are not in two branches")
    for i, a in enumerate(segments):
        for b in segments[i + 1:]:
            if a & b:
                problems.append(f"two branches read metadata registers {sorted(a & b)}")
    for k, (at, guard, op, operands) in enumerate(body):
        for r in _written(op, operands) & meta:
            if guard:
                problems.append(f"{at:#x}: a guarded write of R{r}")
            rest = body[k + 1:]
            reader = next((j for j, c in enumerate(rest) if c[2].startswith("HGMMA.SP") and
                           _metadata_of(c[3]) == r), None)
            if reader is None or any(c[2].startswith(("BRA", "WARPGROUP.DEPBAR"))
                                     for c in rest[:reader]):
                problems.append(f"{at:#x}: R{r} written where no HGMMA.SP of its branch reads "
                                "it next")
    for at, _guard, op, operands in (c for c in code if c[0] > last):
        if op.startswith("WARPGROUP.DEPBAR") and operands.strip().endswith("0x0"):
            break
        problems += [f"{at:#x}: R{r} written after the loop, before the drain"
                     for r in _written(op, operands) & meta]
    return problems if meta else ["no HGMMA.SP in the hot loop"]


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize(("bk", "stages"), [(64, 3), (128, 3), (64, 4), (128, 2)])
def test_sparse_wgmma_in_flight_keeps_its_metadata_registers_in_sass(tmp_path, bk, stages):
    # the bundled 128 x 128 tiles at 8192-deep K (a loop nvcc keeps rolled): with a group in
    # flight ptxas keeps each parity's metadata registers apart and writes them only right
    # before their HGMMA.SP; with 2 stages the group retires before they are reused
    func = _sparse.fn(256, 256, 8192, "float16", "int16", False, bm=128, bn=128, bk=bk,
                      threads=256, stages=stages)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source.text
    assert ("tw_gemm_wgmma_sp_kept<" in _kernel(source)) == (stages >= 3)
    cubin, log = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    code = sass.dump(cubin)
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in code) == (stages >= 3)
    assert metadata_races(code) == [], code
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log
    assert not re.search(r"\s(LDL|STL)", code)  # the register sets stay registers


def test_a_tile_mma_sp_cannot_cut_is_refused_naming_the_instruction():
    func = gemm_sp.gemm_sp_kernel.fn(128, 128, 128, block_M=64, block_N=64, block_K=16)
    with pytest.raises(UnsupportedOpError) as info:
        tilewright.lower(func, "cuda -arch=sm_80")
    text = str(info.value)
    assert "T.gemm_sp of float16 into float32 accumulators on backend 'cuda' (sm_80) uses the " \
           "tensor-core instruction mma.sp::ordered_metadata m16n8k32 .f16" in text
    assert "M x N x K = 64 x 64 x 16 is not a multiple of the instruction shape 16 x 8 x 32" \
        in text
    assert "T.gemm_sp(A_s, E_s, B_s, C_l)" in text and "gemm_sp.py" in text


# -- fed by TMA (pass config cuda.tma_unswizzled: the metadata tile one unswizzled box) --------
sys.path.insert(0, str(TESTS.parent / "bench"))

import kernels  # noqa: E402 - after the sys.path setup

# one emulated run of the example kernel in a process of its own, M x N x K given: argv the
# source, its launch payload, the work folder
RUN_SIZED = """
import json, sys, torch
sys.path.insert(0, {tests!r})
import hostemu
from pathlib import Path
from tilewright.utils.sparse import compress, randn_semi_sparse
gen = torch.Generator().manual_seed(7)
m, n, k = SIZES
a = randn_semi_sparse(m, k, torch.float16, generator=gen)
b = torch.randn(k, n, generator=gen).half()
values, e = compress(a, torch.int16)
c = torch.full((m, n), float("nan"), dtype=C_DTYPE)
hostemu.run(Path(sys.argv[1]).read_text(), json.loads(Path(sys.argv[2]).read_text()),
            Path(sys.argv[3]), values, e, b, c)
torch.testing.assert_close(c.float(), a.float() @ b.float(), TOLERANCE)
print("MATCHES")
"""


def _emulate_sized(text, launch, tmp_path, m, n, k, out_dtype):
    """RUN_SIZED for M x N x K, C in ``out_dtype`` (float32 when None; float16 C rounds)."""
    script = RUN_SIZED.replace("SIZES", f"{m}, {n}, {k}").replace(
        "C_DTYPE", f"torch.{out_dtype or 'float32'}").replace(
        "TOLERANCE", "rtol=2e-3, atol=2e-2" if out_dtype else "rtol=1e-5, atol=1e-4")
    return hostemu.run_script(script, text, launch, tmp_path)


def _tma_lowered(config, configs, m, n, k):
    func = gemm_sp.gemm_sp_kernel.fn(m, n, k, "float16", "int16", **config)
    return tilewright.lower(func, "cuda -arch=sm_90a", pass_configs=configs)


@pytest.mark.emulator
@pytest.mark.parametrize("suffix", list(kernels.GEMM_SP_TMA_ROWS))
def test_tma_fed_sparse_bench_rows_match_torch_in_emulation(tmp_path, suffix):
    # every kernels.GEMM_SP_TMA_ROWS configuration (the bench's gemm_sp_float16_8192_<suffix>
    # rows) on 2 x 2 blocks (the boxes' coordinates follow blockIdx), 2 S + 1 k-tiles: the
    # pipeline wraps its S stages twice; a persistent one (workers) on 3 x 2 tiles, the last
    # row of tiles half outside C, walked by 4 blocks (two tiles each for two of them), so
    # versions and phases carry on from tile to tile (2 S + 1 is not a multiple of S).
    # Kept values, metadata and B are TMA loads (no cp.async left), the metadata one
    # unswizzled box of 128-bit rows; at 3 stages or more the wgmma.sp group stays in flight
    # on the held metadata registers, which the emulation checks at every retirement
    config, configs = kernels.GEMM_SP_TMA_ROWS[suffix]
    m, n = 2 * config["block_M"], 2 * config["block_N"]
    if "workers" in config:
        config, m = {**config, "workers": 4}, m + config["block_M"] // 2
    k = (2 * config["num_stages"] + 1) * config["block_K"]
    lowered = _tma_lowered(config, configs, m, n, k)
    text, kernel = lowered.source.text, _kernel(lowered.source.text)
    assert "tw_cp_async16" not in kernel and "tw_tma_load_2d" in kernel
    assert kernel.count("tw_gemm_wgmma_sp_kept<") == (config["num_stages"] >= 3)
    assert ("tw_wgmma_wait<1>" in kernel) == (config["num_stages"] >= 3)
    specialised = "cuda.disable_warp_specialized" not in configs
    assert f"__launch_bounds__({config['threads'] + 128 * specialised}, 1)" in kernel
    run = _emulate_sized(text, lowered.source.payload, tmp_path, m, n, k,
                         config.get("out_dtype"))
    assert run.returncode == 0 and "MATCHES" in run.stdout, run.stdout + run.stderr


@pytest.mark.emulator
@pytest.mark.parametrize("suffix, workers", [("_k128_tma", None), ("_m256_pio", 2)])
def test_sparse_wgmma_in_flight_on_one_register_set_aborts_the_emulation(tmp_path, suffix,
                                                                         workers):
    # every k-tile's metadata in the even set: the next k-tile overwrites the registers of the
    # wgmma.sp still in flight, which the emulation reports (the H200's race of 2026-12-04),
    # so the emulated matches of the TMA rows rest on the held sets -- in the producer
    # warpgroup form of _k128_tma and the persistent in-order form of _m256_pio
    config, configs = kernels.GEMM_SP_TMA_ROWS[suffix]
    if workers is not None:
        config = {**config, "workers": workers}
    m, n, k = config["block_M"], (2 if workers else 1) * config["block_N"], \
        5 * config["block_K"]
    lowered = _tma_lowered(config, configs, m, n, k)
    text = lowered.source.text
    parity = "(&(sp_meta_odd_ptr[0])), (ko & 1))"
    assert _kernel(text).count(parity) == 1
    broken = text.replace(parity, "(&(sp_meta_odd_ptr[0])), 0)")
    bad = _emulate_sized(broken, lowered.source.payload, tmp_path, m, n, k, None)
    if "overwritten before its wait_group" not in bad.stdout:
        bad = _emulate_sized(broken, lowered.source.payload, tmp_path, m, n, k, None)
    assert bad.returncode != 0
    assert "the metadata register read by a wgmma.sp in flight was overwritten before its " \
           "wait_group" in bad.stdout, bad.stdout + bad.stderr


def test_persistent_tma_fed_sparse_rows_carry_their_loads_from_tile_to_tile():
    # _m256_pio (in order): TmaPlan.in_order_tiles takes the loop with its held metadata
    # registers -- barriers set up once, the block's first load before the tile loop, each
    # tile's register sets zeroed before its k-loop, the next tile's first load after the
    # k-loop and before the drain, whose retirement the sets are held up to; _m256_pws: the
    # producer warpgroup walks the tiles itself
    config, configs = kernels.GEMM_SP_TMA_ROWS["_m256_pio"]
    kernel = _kernel(_tma_lowered({**config, "workers": 4}, configs, 640, 256, 896).source.text)
    top, tiles = kernel.split("for (int wave = 0; wave < 8; ++wave)")
    assert top.count("tw_mbar_init(") == 3 and "tw_mbar_init(" not in tiles
    assert "int by_first = " in top and top.count("tw_tma_load_2d(") == 4
    k_loop, rest = tiles.split("tw_wgmma_wait<1>();", 1)
    assert k_loop.index("sp_meta_even_ptr[0] = (uint)0;") < k_loop.index("for (int ko = 0;")
    following, epilogue = rest.split("tw_wgmma_wait<0>();", 1)
    assert "int by_next = " in following and following.count("tw_tma_load_2d(") == 4
    assert epilogue.lstrip().startswith("tw_wgmma_keep<4>((&(sp_meta_even_ptr[0])), "
                                        "(&(sp_meta_odd_ptr[0])));")
    assert "tw_tma_load_2d(" not in epilogue
    config, configs = kernels.GEMM_SP_TMA_ROWS["_m256_pws"]
    kernel = _kernel(_tma_lowered({**config, "workers": 4}, configs, 640, 256, 896).source.text)
    assert "for (int wave_load = 0; wave_load < 8; ++wave_load)" in kernel
    assert "__launch_bounds__(640, 1)" in kernel and kernel.count("tw_mbar_init(") == 6


@pytest.mark.emulator
@pytest.mark.parametrize("suffix", ["_m256_pws", "_m256_pio"])
def test_persistent_sparse_rows_with_fewer_k_tiles_than_stages_match_torch(tmp_path, suffix):
    # 2 k-tiles a tile, 3 stages: the next tile's first loads (and, in order, the refills)
    # under their i < n guards, the versions' count moving on by 2 a tile
    config, configs = kernels.GEMM_SP_TMA_ROWS[suffix]
    config = {**config, "workers": 4}
    m, n, k = 640, 2 * config["block_N"], 2 * config["block_K"]
    lowered = _tma_lowered(config, configs, m, n, k)
    run = _emulate_sized(lowered.source.text, lowered.source.payload, tmp_path, m, n, k, None)
    assert run.returncode == 0 and "MATCHES" in run.stdout, run.stdout + run.stderr


def test_metadata_tiles_stay_on_cp_async_without_the_pass_config_or_16_byte_rows():
    # the default (no pass config) keeps the loop on cp.async, byte for byte the kernel of
    # before; with it, 64-deep k-tiles' metadata rows of 8 bytes cannot be a TMA box, so the
    # loop stays on cp.async too (TMA needs every producer)
    def kernel(config, configs):
        return _kernel(_tma_lowered(config, configs, 256, 256, 1024).source.text)

    assert "tw_tma_load_2d" not in kernel(kernels.GEMM_SP, {})
    assert "tw_tma_load_2d" not in kernel(kernels.GEMM_SP_K64, kernels.GEMM_SP_TMA)
    assert "tw_tma_load_2d" in kernel(kernels.GEMM_SP, kernels.GEMM_SP_TMA)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("suffix", ["_tma", "_k128_tma", "_k128_tma_inorder", "_m256_tma_f16",
                                    "_m256_pws", "_m256_pio", "_m256_tma_mc"])
def test_tma_fed_sparse_rows_keep_their_metadata_registers_in_sass(tmp_path, suffix):
    # the bench rows' kernels at 8192^3: the hot loop has no LDGSTS (every operand a TMA
    # load, UTMALDG) and no metadata register written under an HGMMA.SP in flight
    config, configs = kernels.GEMM_SP_TMA_ROWS[suffix]
    func = gemm_sp.gemm_sp_kernel.fn(8192, 8192, 8192, "float16", "int16", **config)
    source = tilewright.lower(func, "cuda -arch=sm_90a", pass_configs=configs).source.text
    cubin, log = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    code = sass.dump(cubin)
    assert "UTMALDG.2D" in code and "LDGSTS" not in code
    assert ("UTMALDG.2D.MULTICAST" in code) == ("cuda.tma_multicast" in configs)
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in code) == (config["num_stages"] >= 3)
    assert metadata_races(code) == [], code
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log
