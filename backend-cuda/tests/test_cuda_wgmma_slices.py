"""wgmma on parts of swizzled shared tiles (sm_90a): a K half ``A_s[:, 64:]``, an N half of an
MN-major B, one stage ``B_s[1, :, :]`` of a ``[stages, rows, columns]`` tile. Layout inference
swizzles such tiles when every part a gemm reads starts on a swizzle atom
(``gemm_fit.atom_misfit``), and the descriptors start at the part's first element. The host
emulation decodes the generated descriptors (start address, LBO/SBO, swizzle mode) and reads
shared memory through them, so a descriptor that starts at the tile instead of the part reads
the wrong elements; :func:`test_descriptor_starts_at_the_swizzled_address_of_the_part` checks
the start address against the contract's formula, computed here independently."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor

TARGET = "cuda -arch=sm_90a"


def k_halves(dialect=False, trans_b=True):
    """C = A @ op(B) as two gemms over the two K halves of 64 x 128 tiles."""
    b_shape = (64, 128) if trans_b else (128, 64)

    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor(b_shape, "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 128), "float16")
            B_s = T.alloc_shared(b_shape, "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(C_l)
            if dialect:
                T.wgmma_gemm(A_s[:, :64], B_s[:, :64] if trans_b else B_s[:64, :], C_l,
                             transpose_B=trans_b)
                T.wgmma_gemm(A_s[:, 64:], B_s[:, 64:] if trans_b else B_s[64:, :], C_l,
                             transpose_B=trans_b)
                T.wait_wgmma(0)
            else:
                T.gemm(A_s[:, :64], B_s[:, :64] if trans_b else B_s[:64, :], C_l,
                       transpose_B=trans_b)
                T.gemm(A_s[:, 64:], B_s[:, 64:] if trans_b else B_s[64:, :], C_l,
                       transpose_B=trans_b)
            T.copy(C_l, C)

    return main


def staged(trans_b=False):
    """A [2, 64, 128] staged tile filled per stage and read at stage 1: C = A @ B1 with B1
    [64, 64] taken as the N half ``[1, :, 64:]`` (MN-major B), or with trans_b K-major B from a
    [2, 64 (N), 128 (K)] tile: the K half ``[0, :, :64]`` against A's first, ``[1, :, 64:]``
    against its second."""

    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor((2, 64, 128), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 128), "float16")
            B_s = T.alloc_shared((2, 64, 128), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            for s in T.serial(2):
                T.copy(B[s, :, :], B_s[s, :, :])
            T.clear(C_l)
            if trans_b:
                T.gemm(A_s[:, :64], B_s[0, :, :64], C_l, transpose_B=True)
                T.gemm(A_s[:, 64:], B_s[1, :, 64:], C_l, transpose_B=True)
            else:
                T.gemm(A_s[:, 64:], B_s[1, :, 64:], C_l)
            T.copy(C_l, C)

    return main


def misaligned():
    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 128), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(C_l)
            T.wgmma_gemm(A_s[:, 32:96], B_s[:, 32:96], C_l, transpose_B=True)
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


def _inputs(b_shape):
    torch.manual_seed(0)
    a, b = torch.randn(64, 128).half(), torch.randn(*b_shape).half()
    return a, b, torch.full((64, 64), float("nan"))


# name -> (kernel, B's shape, the reference from a and b)
CASES = {
    "k_halves_gemm": (k_halves(), (64, 128), lambda a, b: a.float() @ b.float().t()),
    "k_halves_wgmma_gemm": (k_halves(dialect=True), (64, 128),
                            lambda a, b: a.float() @ b.float().t()),
    "k_halves_mn_major_b": (k_halves(trans_b=False), (128, 64),
                            lambda a, b: a.float() @ b.float()),
    "stage1_n_half": (staged(), (2, 64, 128),
                      lambda a, b: a[:, 64:].float() @ b[1, :, 64:].float()),
    "stages_k_halves_transposed_b": (staged(trans_b=True), (2, 64, 128),
                                     lambda a, b: a[:, :64].float() @ b[0, :, :64].float().t() +
                                     a[:, 64:].float() @ b[1, :, 64:].float().t()),
}


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


@pytest.mark.parametrize("name", CASES)
def test_parts_of_swizzled_tiles_take_wgmma(name):
    text = tilewright.lower(CASES[name][0], TARGET).source.text
    kernel = _kernel(text)
    assert len(re.findall(r"tw_gemm_wgmma<", kernel)) >= 1 and "tw_gemm_mma" not in kernel


@pytest.mark.emulator
@pytest.mark.parametrize("name", CASES)
def test_parts_of_swizzled_tiles_match_torch_in_emulation(name, tmp_path):
    func, b_shape, ref = CASES[name]
    a, b, c = _inputs(b_shape)
    lowered = tilewright.lower(func, TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, ref(a, b), rtol=1e-4, atol=1e-3)


@pytest.mark.emulator
@pytest.mark.parametrize("name", ["k_halves_gemm", "stage1_n_half"])
def test_parts_of_swizzled_tiles_on_mma_sync_match_torch(name, tmp_path):
    # sm_80: the same swizzled parts read by ldmatrix from their first element
    func, b_shape, ref = CASES[name]
    a, b, c = _inputs(b_shape)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    assert "tw::swizzled<" in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, ref(a, b), rtol=1e-4, atol=1e-3)


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("name", ["k_halves_wgmma_gemm", "stages_k_halves_transposed_b",
                                  "stage1_n_half"])
def test_parts_of_swizzled_tiles_build_to_hgmma(name):
    text = tilewright.lower(CASES[name][0], TARGET).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    assert "HGMMA.64x64x16.F32" in sass.dump(cubin)
    assert "0 bytes spill stores" in log


def _swizzled_offset(r, c, rows, width=128, size=2):
    """The swizzle contract of layout.py, written out here: byte offset of (r, c)."""
    o = (c * size // width) * rows * width + r * width + (c * size % width)
    return o ^ (((o >> 7) & 7) << 4)


def test_descriptor_starts_at_the_swizzled_address_of_the_part():
    # the gemms read [:, :64] of A_s and [0, :, :64] of B_s, then [:, 64:] and [1, :, 64:]:
    # the second's operands start at element (0, 64) of A_s (the second column block of 64
    # rows x 128 bytes) and one stage of 64 x 128 elements plus that of B_s
    text = _kernel(tilewright.lower(CASES["stages_k_halves_transposed_b"][0],
                                    TARGET).source.text)
    calls = re.findall(r"tw_gemm_wgmma<[^>]*>\((.*)\);", text)
    (a0, b0), (a1, b1) = [[int(x) for x in re.findall(r"tw_smem_ptr\)\[(\d+)\]", c)]
                          for c in calls]
    size = 2  # bytes of float16
    part = _swizzled_offset(0, 64, 64)
    assert part == 64 * 128
    assert ((a1 - a0) * size, (b1 - b0) * size) == (part, 64 * 128 * size + part), calls


def test_part_off_the_swizzle_atom_is_refused_at_the_users_line():
    with pytest.raises(KernelError) as info:
        tilewright.lower(misaligned(), TARGET)
    message = str(info.value)
    assert "not a multiple of the 64-column (128-byte) block of its swizzle" in message
    assert "test_cuda_wgmma_slices.py" in message


def clear_on_first_k(unrolled=False):
    """C starts at 7 and is cleared by the first k step's wgmma alone (``clear_accum=k ==
    0``, the scale-d predicate): C = A @ B^T over K = 256. ``unrolled``: TileLang's FlashMLA
    form, the K slices ``[:, j * 64:(j + 1) * 64]`` of whole tiles in a ``T.unroll`` loop."""

    @T.prim_func
    def main(A: T.Tensor((64, 256), "float16"), B: T.Tensor((64, 256), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            C_l = T.alloc_fragment((64, 64), "float32")
            T.fill(C_l, 7.0)
            if unrolled:
                A_s = T.alloc_shared((64, 256), "float16")
                B_s = T.alloc_shared((64, 256), "float16")
                T.copy(A, A_s)
                T.copy(B, B_s)
                for j in T.unroll(4):
                    T.wgmma_gemm(A_s[:, j * 64:(j + 1) * 64], B_s[:, j * 64:(j + 1) * 64], C_l,
                                 transpose_B=True, clear_accum=(j == 0))
                T.wait_wgmma(0)
            else:
                A_s = T.alloc_shared((64, 64), "float16")
                B_s = T.alloc_shared((64, 64), "float16")
                for k in T.serial(4):
                    T.copy(A[0, k * 64], A_s)
                    T.copy(B[0, k * 64], B_s)
                    T.wgmma_gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=(k == 0))
                    T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("unrolled", [False, True])
def test_run_time_clear_accum_is_the_scale_d_predicate(unrolled):
    text = _kernel(tilewright.lower(clear_on_first_k(unrolled), TARGET).source.text)
    scale_d = [c.rsplit(", ", 1)[1] for c in re.findall(r"tw_gemm_wgmma<[^>]*>\((.*)\);", text)]
    # unrolled here, the predicate of each copy is a constant: 0 for j = 0 alone
    assert scale_d == (["0", "1", "1", "1"] if unrolled else ["((k == 0) ? 0 : 1)"]), scale_d


@pytest.mark.emulator
@pytest.mark.parametrize("unrolled", [False, True])
def test_run_time_clear_accum_matches_torch_in_emulation(unrolled, tmp_path):
    torch.manual_seed(0)
    a, b = torch.randn(64, 256).half(), torch.randn(64, 256).half()
    c = torch.full((64, 64), float("nan"))
    lowered = tilewright.lower(clear_on_first_k(unrolled), TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().t(), rtol=1e-4, atol=1e-3)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_run_time_clear_accum_builds_to_hgmma():
    text = tilewright.lower(clear_on_first_k(), TARGET).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    assert "HGMMA.64x64x16.F32" in sass.dump(cubin)
    assert "0 bytes spill stores" in log
