"""TileLang's explicit loads and stores on the CPU and the interpreter, against torch:
``T.__ldg`` (a plain read off CUDA) and the 32-bit words of ``T.ldg32`` / ``T.stg32`` /
``T.lds32`` / ``T.sts32``, predicated too; misuse refused at the user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, KernelTypeError

TARGETS = ["cpu", "interp"]


def ldg(N, dtype, block=32):
    """TileLang's __ldg test (y = __ldg(x) + 1) and the buffer-and-index form."""

    @T.prim_func
    def main(x: T.Tensor((N,), dtype), y: T.Tensor((N,), dtype), z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as pid:
            for i in T.Parallel(block):
                y[pid * block + i] = T.__ldg(x[pid * block + i]) + 1
                z[pid * block + i] = T.__ldg(x, N - 1 - (pid * block + i))

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_ldg_reads_the_element(target, dtype):
    x = (torch.randn(100) * 10).to(getattr(torch, dtype))
    y, z = tilewright.compile(ldg(100, dtype), out_idx=[1, 2], target=target)(x)
    assert torch.equal(y, x + 1) and torch.equal(z, x.flip(0))


def words(N, dtype):
    """TileLang's word tests, eager style: each word of X as an int32, copied through a
    shared tile, and stored where a predicate holds (even blocks)."""

    @tilewright.jit
    def kernel(X, O, Y, Z):
        n = 4 // torch.tensor([], dtype=getattr(torch, dtype)).element_size()
        count = T.const("count")
        X: T.Tensor[[count * n], dtype]
        O: T.Tensor[[count], T.int32]
        Y: T.Tensor[[count * n], dtype]
        Z: T.Tensor[[count * n], dtype]
        with T.Kernel(count, threads=32) as pid:
            S = T.alloc_shared((count * n,), dtype)
            O[pid] = T.reinterpret(T.ldg32(X[pid * n:pid * n + n]), T.int32)
            T.sts32(S[pid * n:pid * n + n], T.ldg32(X[pid * n]))
            T.sync_threads()
            T.stg32(Y[pid * n], T.lds32(S[pid * n:pid * n + n]))
            T.stg32(Z[pid * n:pid * n + n], T.ldg32(X[pid * n], pred=pid < count // 2),
                    pred=pid % 2 == 0)

    return kernel


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint8", "int16"])
def test_words_round_trip(target, dtype, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_TARGET", target)
    n = 4 // torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    x = (torch.randn(16 * n) * 50).to(getattr(torch, dtype))
    o, y = torch.zeros(16, dtype=torch.int32), torch.zeros_like(x)
    z = torch.full_like(x, 7)
    words(16, dtype)(x, o, y, z)
    assert torch.equal(o, x.view(torch.int32)) and torch.equal(y, x)
    # even words store (the first half the loaded word, then 0); odd words keep their 7s
    word = torch.arange(16).repeat_interleave(n)
    want = torch.where(word % 2 == 1, torch.full_like(x, 7),
                       torch.where(word < 8, x, torch.zeros_like(x)))
    assert torch.equal(z, want)


def _refused(body, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((64,), dtype), W: T.Tensor((16,), "uint32")):
        with T.Kernel(1, threads=32) as _bx:
            S = T.alloc_shared((64,), dtype)
            body(A, S, W)

    return main


@pytest.mark.parametrize("body, dtype, error, message", [
    (lambda A, S, W: T.__ldg(S[0]), "float32", KernelError, "'S' is in shared.dyn memory"),
    (lambda A, S, W: T.__ldg(A), "float32", KernelTypeError, r"needs the index"),
    (lambda A, S, W: T.__ldg(3), "float32", KernelTypeError, r"got int"),
    (lambda A, S, W: T.ldg32(S[0]), "float32", KernelError, "accesses global memory"),
    (lambda A, S, W: T.lds32(A[0]), "float32", KernelError, "accesses shared memory"),
    (lambda A, S, W: T.ldg32(A[0:4]), "float16", KernelError,
     r"a 32-bit word is 2 float16 element\(s\) along the last dimension; the region of 'A' "
     r"has shape \(4,\)"),
    (lambda A, S, W: T.ldg32(A[0]), "float64", KernelError, "holds float64"),
    (lambda A, S, W: T.stg32(A[0], A[1]), "float16", KernelTypeError,
     "stores a 32-bit word"),
])
def test_misuse_refused_at_the_line(body, dtype, error, message):
    with pytest.raises(error, match=message) as err:
        _refused(body, dtype)
    assert "test_ldst.py" in str(err.value)


def named_word(n=32):
    @T.prim_func
    def main(X: T.Tensor((2 * n,), "bfloat16"), Y: T.Tensor((n,), "uint32")):
        with T.Kernel(1, threads=32):
            for i in T.serial(n):
                w = T.ldg32(X[2 * i:2 * i + 2])  # a named value, kept across the store
                X[2 * i] = T.bfloat16(0)
                Y[i] = w

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_named_word_of_bfloat16_elements_keeps_its_bits(target):
    """The CPU held a named value computed from bfloat16 loads in float32: a uint32 word of
    two bfloat16 elements lost its low bits (found while adding the 64-bit forms)."""
    x = torch.randn(64).bfloat16()
    words = x.view(torch.int32).clone()
    y = tilewright.compile(named_word(), out_idx=[1], target=target)(x)
    assert torch.equal(y.view(torch.int32), words)
