"""The vectorised 4-bit dequantisation (analysis/dequant.py, include/tw_dequant.h): a
``T.Parallel`` nest ``W[i, j] = (float16(T.unpack(Q[i, j // 2], j % 2, 4)) - zero) * scale``
with one zero point and scale per run of eight elements becomes one ``tw_dequant_u4x8_f16``
call per run (a 32-bit word of codes in, 16 bytes of float16 out), bit-exact with the scalar
code: every byte value, random scales and zero points (fractional, negative, tiny and large),
against the scalar path and torch's float16 arithmetic (one rounding per operation). Other
forms (bfloat16, signed codes, a zero point that changes within a run) keep the scalar path.
Into a wgmma register A operand, codes in wgmma order take ``tw_dequant_u4x8_f16_a`` (eight
of a thread's registers a call), bit-exact as well; the byte order there runs a register at
a time."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda import arch, executor

CALL = "tw_dequant_u4x8_f16("


def dequant_tile(N, K, group, form="vector", dtype="float16", threads=128):
    """W = the dequantised Q, through shared tiles: Q [N, K / 2] copied in, dequantised into
    a shared float16 tile by one T.Parallel nest (``form``: ``vector``, the pattern;
    ``commuted``, ``scale * (code - zero)``, the same roundings in the scalar path;
    ``signed``, two's complement codes; ``staged``, the pattern with the scales and zero
    points copied to shared memory first), copied out."""

    @T.prim_func
    def main(Q: T.Tensor((N, K // 2), "uint8"), Scales: T.Tensor((N, K // group), dtype),
             Zeros: T.Tensor((N, K // group), dtype), W: T.Tensor((N, K), dtype)):
        with T.Kernel(1, threads=threads):
            Q_s = T.alloc_shared((N, K // 2), "uint8")
            W_s = T.alloc_shared((N, K), dtype)
            T.copy(Q, Q_s)
            S, Z = Scales, Zeros
            if form == "staged":
                S = T.alloc_shared((N, K // group), dtype)
                Z = T.alloc_shared((N, K // group), dtype)
                T.copy(Scales, S)
                T.copy(Zeros, Z)
            for i, j in T.Parallel(N, K):
                code = T.cast(T.unpack(Q_s[i, j // 2], j % 2, 4, signed=form == "signed"),
                              dtype)
                if form == "commuted":
                    W_s[i, j] = S[i, j // group] * (code - Z[i, j // group])
                else:
                    W_s[i, j] = (code - Z[i, j // group]) * S[i, j // group]
            T.copy(W_s, W)

    return main


def inputs(N, K, group, seed=0):
    """Every byte value (each 2 * N * K / 512 times, shuffled), and scales and zero points
    drawn from several magnitudes, both signs, fractional zero points among them."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.arange(N * K // 2, dtype=torch.int64) % 256
    q = q[torch.randperm(q.numel(), generator=gen)].to(torch.uint8).reshape(N, K // 2)
    shape = (N, K // group)
    magnitude = 2.0 ** torch.randint(-20, 12, shape, generator=gen).double()
    scales = (torch.randn(shape, generator=gen).double() * magnitude).half()
    zeros = torch.where(torch.rand(shape, generator=gen) < 0.5,
                        torch.randint(0, 16, shape, generator=gen).double(),
                        torch.randn(shape, generator=gen).double() * 20).half()
    return q, scales, zeros


def reference(q, scales, zeros):
    """torch's float16 arithmetic, one rounding per operation (as the scalar code rounds)."""
    codes = torch.stack([q & 15, q >> 4], dim=-1).flatten(1).half()
    group = codes.shape[1] // scales.shape[1]
    return (codes - zeros.repeat_interleave(group, 1)) * scales.repeat_interleave(group, 1)


def _bits(x):
    return x.view(torch.int16)


@pytest.mark.emulator
def test_dequantisation_is_bit_exact_with_the_scalar_path(tmp_path):
    N, K, group = 32, 64, 16  # 1024 bytes: every value four times; 4 groups a row
    q, scales, zeros = inputs(N, K, group)
    want = reference(q, scales, zeros)
    got = {}
    for form in ("vector", "commuted", "staged"):
        source = tilewright.lower(dequant_tile(N, K, group, form), "cuda -arch=sm_90a").source
        assert (CALL in source.text) == (form != "commuted")
        # 256 runs for 128 threads: a loop of two calls, unrolled in the IR when the zero
        # points and scales are read from shared memory (transforms/distribute.py); the
        # header pasted with the first call defines it
        assert source.text.count(CALL) == {"vector": 2, "commuted": 0, "staged": 3}[form]
        w = torch.full((N, K), float("nan"), dtype=torch.float16)
        hostemu.run(source.text, source.payload, tmp_path / form, q, scales, zeros, w)
        got[form] = w
    assert torch.equal(_bits(got["vector"]), _bits(got["commuted"]))
    assert torch.equal(_bits(got["staged"]), _bits(got["vector"]))
    assert torch.equal(_bits(got["vector"]), _bits(want))
    # not a trivial check: mostly finite non-zero values, float16 subnormals among them
    finite = want[want.isfinite() & (want != 0)]
    assert finite.numel() > N * K // 2 and (finite.abs() < 2.0 ** -14).any()


@pytest.mark.parametrize(("form", "dtype", "group"), [
    ("signed", "float16", 16),      # two's complement codes: the scalar path
    ("vector", "bfloat16", 16),     # bfloat16 weights: the scalar path
    ("vector", "float16", 4),       # the zero point and scale change within a run of eight
])
def test_other_dequantisations_keep_the_scalar_path(form, dtype, group):
    source = tilewright.lower(dequant_tile(32, 64, group, form, dtype), "cuda -arch=sm_90a")
    assert CALL not in source.source.text


@pytest.mark.emulator
def test_a_ragged_run_count_is_guarded(tmp_path):
    # 24 rows x 8 runs = 192 runs for 128 threads: the second pass covers 64 of them
    N, K, group = 24, 64, 64
    q, scales, zeros = inputs(N, K, group, seed=1)
    source = tilewright.lower(dequant_tile(N, K, group), "cuda -arch=sm_80").source
    assert CALL in source.text
    w = torch.full((N, K), float("nan"), dtype=torch.float16)
    hostemu.run(source.text, source.payload, tmp_path, q, scales, zeros, w)
    assert torch.equal(_bits(w), _bits(reference(q, scales, zeros)))


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_dequantisation_sass_is_permutes_and_paired_half_arithmetic(tmp_path, arch_name):
    # 64 x 128 codes over 128 threads: 8 runs of 8 a thread. Per run one 32-bit shared load,
    # four PRMT (a byte to both halves), four LOP3 (mask and magic exponents in one), eight
    # HADD2 (the magic numbers off, the zero point off) and four HMUL2, one 16-byte store; no
    # integer-to-float conversion and no 2-byte store of the scalar path
    source = tilewright.lower(dequant_tile(64, 128, 128), f"cuda -arch={arch_name}").source
    cubin, log = executor.nvcc_compile(source.text, arch.get(arch_name), tmp_path)
    code = sass.dump(cubin)
    ops = re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?P\w+\s+)?([A-Z0-9_.]+)", code, re.M)
    count = {op: ops.count(op) for op in set(ops)}
    runs = 64 * 128 // 8 // 128
    assert count.get("I2F.F16", 0) == 0 and count.get("STS.U16", 0) == 0
    assert count["STS.128"] == runs and count["PRMT"] >= 4 * runs
    assert count["HMUL2"] == 4 * runs and count["HADD2"] == 8 * runs


REGISTER_CALL = "tw_dequant_u4x8_f16_a("


def register_tile(K, group, order="wgmma"):
    """O = W I for the dequantised W [128, K] in a fragment read only as a wgmma's register A
    operand (256 threads, 64 rows a warpgroup) and I the identity: W itself, exactly, in
    float32. The codes in ``wgmma`` order (examples/gemm_w4a16.py's ``wgmma_order``) or
    ``plain``; the scales and zero points staged in shared memory."""
    N = 128

    @T.prim_func
    def main(Q: T.Tensor((N, K // 2), "uint8"), Scales: T.Tensor((N, K // group), "float16"),
             Zeros: T.Tensor((N, K // group), "float16"), I: T.Tensor((K, K), "float16"),
             O: T.Tensor((N, K), "float32")):
        with T.Kernel(1, threads=256):
            Q_s = T.alloc_shared((N, K // 2), "uint8")
            S = T.alloc_shared((N, K // group), "float16")
            Z = T.alloc_shared((N, K // group), "float16")
            I_s = T.alloc_shared((K, K), "float16")
            W = T.alloc_fragment((N, K), "float16")
            acc = T.alloc_fragment((N, K), "float32")
            T.copy(Q, Q_s)
            T.copy(Scales, S)
            T.copy(Zeros, Z)
            T.copy(I, I_s)
            for i, j in T.Parallel(N, K):
                if order == "wgmma":
                    byte = j // 32 * 16 + j % 8 // 2 * 4 + j % 2 * 2 + j % 32 // 16
                    nibble = j % 16 // 8
                else:
                    byte, nibble = j // 2, j % 2
                code = T.cast(T.unpack(Q_s[i, byte], nibble, 4), "float16")
                W[i, j] = (code - Z[i, j // group]) * S[i, j // group]
            T.gemm(W, I_s, acc, clear_accum=True)
            T.copy(acc, O)

    return main


def _wgmma_order(q):
    """examples/gemm_w4a16.py's ``wgmma_order``: column 8 s + 2 t + h of each k32 step is
    nibble s + 4 h of word t."""
    n, half = q.shape
    codes = torch.stack([q & 15, q >> 4], dim=-1).reshape(n, half // 16, 4, 4, 2)
    codes = codes.permute(0, 1, 3, 4, 2).reshape(n, 2 * half)
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


@pytest.mark.emulator
@pytest.mark.parametrize(("order", "group", "fast"), [
    ("wgmma", 32, True),   # eight codes a call into registers 4 b + h
    ("plain", 32, False),  # the byte order: a register at a time
    ("wgmma", 4, False),   # the zero point and scale change within a run of eight
])
def test_register_a_dequantisation_is_bit_exact(tmp_path, order, group, fast):
    # 128 x 64 codes: every byte value 16 times; fractional, negative, tiny and large scales
    # and zero points; the gemm by the identity gives each register's value back exactly
    # (scales below 2^6: no infinity, whose product with the identity's zeros is a NaN)
    K = 64
    q, scales, zeros = inputs(128, K, group, seed=2)
    scales = torch.where(scales.abs() < 64, scales, scales / 2048)
    source = tilewright.lower(register_tile(K, group, order), "cuda -arch=sm_90a").source
    assert "tw_gemm_wgmma_rs<64, 64," in source.text
    # a thread's 32 registers, eight a call, unrolled; the header defines it once
    assert (source.text.count(REGISTER_CALL) == 128 * K // 256 // 8 + 1) == fast
    assert fast or REGISTER_CALL not in source.text
    o = torch.full((128, K), float("nan"))
    codes = _wgmma_order(q) if order == "wgmma" else q
    hostemu.run(source.text, source.payload, tmp_path, codes, scales, zeros,
                torch.eye(K, dtype=torch.float16), o)
    want = reference(q, scales, zeros)
    assert want.isfinite().all() and (want.abs() < 2.0 ** -14).any()
    # float32 sums of one product: a negative zero comes back positive
    assert torch.equal(o, want.float())
    assert torch.equal(_bits(o.half())[want != 0], _bits(want)[want != 0])
