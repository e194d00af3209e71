"""``with T.sblock(name):`` (TVM script's block, which TileLang kernels use as a lexical
scope) with ``T.reads`` / ``T.writes`` hints: its body runs where it stands, and
``T.annotate_safe_value`` inside it applies to the copies and loads of that block and the
blocks nested in it, the innermost value winning (TileLang's
``test_tilelang_copy_oob_safe_value_lexical_scope``). The rest of TVM script's block language
is refused at the user's line. CPU backend and interpreter; CUDA in the host emulation
(backend-cuda/tests/test_cuda_safe_values.py)."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

TARGETS = ["cpu", "interp"]
M = N = 60
BM = BN = 64


def lexical_scope():
    """TileLang's kernel: a 60x60 tensor copied as 64x64 tiles, the inner block's copy padded
    with -99, the outer's with -1; here the inner tile is written out too (Inner)."""
    @T.prim_func
    def main(A: T.Tensor((M, N), "int32"), Out: T.Tensor((BM, BN), "int32"),
             Inner: T.Tensor((BM, BN), "int32")):
        with T.Kernel(1, threads=128):
            inner = T.alloc_shared((BM, BN), "int32")
            outer = T.alloc_shared((BM, BN), "int32")
            with T.sblock("outer"):
                T.reads()
                T.writes()
                T.annotate_safe_value({A: -1})
                with T.sblock("inner"):
                    T.reads()
                    T.writes()
                    T.annotate_safe_value({A: -99})
                    T.copy(A[0:BM, 0:BN], inner)
                T.copy(A[0:BM, 0:BN], outer)
                for i, j in T.Parallel(BM, BN):
                    Out[i, j] = outer[i, j]
                    Inner[i, j] = inner[i, j]

    return main


def check_lexical_scope(a, out, inner):
    """TileLang's assertions on Out, and the inner block's padding on Inner."""
    assert torch.equal(out[:M, :N], a) and torch.equal(inner[:M, :N], a)
    assert out[60, :8].tolist() == [-1] * 8
    assert out[:8, 60].tolist() == [-1] * 8
    assert out[60, 60].item() == -1
    assert (out[M:, :] == -1).all() and (out[:, N:] == -1).all()
    assert (inner[M:, :] == -99).all() and (inner[:, N:] == -99).all()


@pytest.mark.parametrize("target", TARGETS)
def test_the_innermost_blocks_safe_value_pads_its_copies(target):
    a = torch.arange(M * N, dtype=torch.int32).reshape(M, N)
    out, inner = tilewright.compile(lexical_scope(), out_idx=[1, 2], target=target)(a)
    assert out.shape == (BM, BN)
    check_lexical_scope(a, out, inner)


def element_loads():
    """Blocks around element loads: the kernel's value 1 outside any block, a block's 7
    inside it, in a T.Parallel and a T.serial loop; a block naming another tensor keeps the
    outer value of A."""
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32), W: T.Tensor((8,), T.float32),
             B: T.Tensor((4, 16), T.float32)):
        with T.Kernel(1, threads=32):
            T.annotate_safe_value({A: 1})
            for i in T.Parallel(16):
                B[0, i] = A[i]
            for i in T.Parallel(16):
                with T.sblock("p"):
                    T.annotate_safe_value({A: 7})
                    B[1, i] = A[i]
            for i in T.serial(16):
                with T.sblock():
                    T.annotate_safe_value({A: 9})
                    B[2, i] = A[i]
            with T.sblock("w"):
                T.reads(W[0:8])
                T.annotate_safe_value({W: 5})
                for i in T.Parallel(16):
                    B[3, i] = A[i] + W[i]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_blocks_safe_value_applies_to_its_element_loads(target):
    a, w = torch.arange(8.0), torch.full((8,), 100.0)
    b = tilewright.compile(element_loads(), out_idx=[2], target=target)(a, w)
    tail = torch.ones(8)
    assert torch.equal(b[0], torch.cat([a, tail]))
    assert torch.equal(b[1], torch.cat([a, tail * 7]))
    assert torch.equal(b[2], torch.cat([a, tail * 9]))
    assert torch.equal(b[3], torch.cat([a + w, tail * (1 + 5)]))


def plain_blocks():
    """Blocks without annotations around the kernel, in it and in a loop, with TVM script's
    forms of T.reads / T.writes (regions, elements, whole buffers, lists)."""
    @T.prim_func
    def main(A: T.Tensor((16,), T.float32), B: T.Tensor((16,), T.float32)):
        with T.sblock("root"):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((16,), T.float32)
                with T.sblock("load", no_realize=True):
                    T.reads(A[0:16])
                    T.writes([s[0:8], s[8:16]], s[0])
                    T.copy(A, s)
                for i in T.serial(16):
                    with T.sblock():
                        T.reads(s[i], T.region(s[i], "r", 1))
                        T.writes(B)
                        B[i] = s[i] * 2

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_block_without_annotations_is_a_plain_scope(target):
    func = plain_blocks()
    assert "tw.safe_values" not in func.script()
    a = torch.randn(16)
    b = tilewright.compile(func, out_idx=[1], target=target)(a)
    assert torch.equal(b, a * 2)


@pytest.mark.parametrize("target", TARGETS)
def test_an_unguarded_kernel_drops_the_blocks_scopes(target):
    """tw.disable_safe_memory: the blocks' scopes are removed all the same (no backend knows
    them); the accesses that stay inside read as before."""
    a = torch.arange(M * N, dtype=torch.int32).reshape(M, N)
    lowered = tilewright.lower(lexical_scope(), target,
                               pass_configs={"tw.disable_safe_memory": True})
    assert "-99" not in lowered.source.text
    assert "tw.safe_values" not in lowered.module.script()
    kernel = tilewright.compile(lexical_scope(), out_idx=[1, 2], target=target,
                                pass_configs={"tw.disable_safe_memory": True})
    out, inner = kernel(a)
    assert torch.equal(out[:M, :N], a) and torch.equal(inner[:M, :N], a)


def kernel_with(body):
    @T.prim_func
    def main(A: T.Tensor((16,), T.float32), B: T.Tensor((16,), T.float32)):
        with T.Kernel(1, threads=32):
            body(A, B)

    return main


def _in_block(statement):
    def body(A, B):
        with T.sblock("b"):
            statement(A, B)

    return body


@pytest.mark.parametrize("body,message", [
    (lambda A, B: T.reads(A), "T.reads names the regions a T.sblock accesses: write it "
                              r"directly inside 'with T.sblock\(...\)'"),
    (_in_block(lambda A, B: T.writes(3)), "T.writes expects a buffer, a buffer slice or a "
                                          "buffer element, got int"),
    (_in_block(lambda A, B: T.reads([A, "B"])), "T.reads expects a buffer.*got str"),
    (_in_block(lambda A, B: T.axis.spatial(16, 0)), r"T.axis.spatial \(a block's iteration "
                                                    "variable\\) is not supported"),
    (_in_block(lambda A, B: T.axis.remap("SR", [0, 1])), "T.axis.remap .*use the loop's "
                                                         "variable itself"),
    (_in_block(lambda A, B: T.sblock_attr({"k": 1})), "T.sblock_attr is not supported: a "
                                                      "block here keeps no attributes"),
    (_in_block(lambda A, B: T.block_attr({"k": 1})), "T.block_attr is not supported"),
    (_in_block(lambda A, B: T.where(A[0] > 0)), r"T.where \(a block's predicate\) is not "
                                                "supported: guard the statements with an 'if'"),
    (_in_block(lambda A, B: T.init()), r"T.init \(a reduction block's initialisation\)"),
    (lambda A, B: T.sblock(3), "T.sblock takes the block's name as a string, got 3"),
    (lambda A, B: T.sblock("b", exec_scope="warp"), "T.sblock: exec_scope='warp' has no "
                                                    "meaning here"),
])
def test_what_a_block_here_does_not_have_is_refused_at_the_line(body, message):
    with pytest.raises(KernelError, match=message) as info:
        kernel_with(body)
    assert info.value.location.filename == __file__
