"""Random numbers (``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``) against cuRAND's own
code: ``data/curand_reference.cu`` includes the vendor's ``curand_kernel.h`` (the
``nvidia-curand`` wheel of the test extra), built with nvcc for the host. The conformance
suite's reference generator (``tilewright_sdk.conformance.catalogue.rng.Philox``) and the
kernels of the cpu and interp backends must draw its numbers: integers and uniform floats
bit for bit, normal floats within a few units in the last place (the backends' ``log``,
``sin`` and ``cos``); TileLang's random-number example and tests, imports changed; the
refusals at the user's line."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright_sdk.conformance.catalogue.rng import Philox

KINDS = ("u32", "f32", "f64", "n32", "n64")
# (seed, subsequence, offset): a 64-bit seed, a subsequence past 2**32, an offset inside a
# block of four, and a counter of 2**32 - 1 blocks that carries into its second word
STARTS = [(42, 0, 0), (2**40 + 7, 3, 5), (0xFFFFFFFF, 2**33 + 1, 2**34 + 3),
          (7, 1, 4 * (2**32 - 1) + 2)]
COUNT = 13


def _curand_include() -> Path | None:
    try:
        import nvidia
    except ImportError:
        return None
    found = [p for root in nvidia.__path__ for p in Path(root).glob("cu*/include")
             if (p / "curand_kernel.h").exists()]
    return found[0] if found else None


@pytest.fixture(scope="module")
def curand(tmp_path_factory):
    """``curand(seed, seq, off, count, kind)``: the vendor's numbers, as float64 (or int)."""
    include, nvcc = _curand_include(), shutil.which("nvcc")
    if include is None or nvcc is None:
        pytest.skip("cuRAND's reference needs nvcc and curand_kernel.h (pip install "
                    "nvidia-curand, in tilewright's test extra)")
    exe = tmp_path_factory.mktemp("curand") / "curand_reference"
    subprocess.run([nvcc, f"-I{include}", "-o", str(exe),
                    str(Path(__file__).parent / "data" / "curand_reference.cu")],
                   check=True, capture_output=True)

    def draw(seed, seq, off, count, kind):
        out = subprocess.run([str(exe), str(seed), str(seq), str(off), str(count), kind],
                             check=True, capture_output=True, text=True).stdout.split()
        return np.array([int(v) for v in out], np.int64) if kind == "u32" else \
            np.array([float.fromhex(v) for v in out])

    return draw


def _same(kind, got, want):
    """Integers and uniform floats bit for bit; normal floats to a few units in the last
    place of their width."""
    got = np.asarray(got, np.float64 if kind != "u32" else np.int64)
    if kind in ("u32", "f32", "f64"):
        return np.array_equal(got, want)
    ulp = np.finfo(np.float32 if kind == "n32" else np.float64).eps
    return np.allclose(got, want, rtol=4 * ulp, atol=4 * ulp)


def _reference_draws(gen, kind, count):
    draw = {"u32": gen.rand, "f32": gen.uniform, "f64": gen.uniform_double,
            "n32": gen.normal, "n64": gen.normal_double}[kind]
    return np.array([draw()[0] for _ in range(count)])


@pytest.mark.parametrize("kind", KINDS)
def test_the_suites_reference_draws_cuRANDs_numbers(curand, kind):
    for seed, seq, off in STARTS:
        got = _reference_draws(Philox(seed, seq, off), kind, COUNT)
        assert _same(kind, got, curand(seed, seq, off, COUNT, kind)), (seed, seq, off)


def draws(seed, seq, off, count=COUNT):
    """One block of one thread: five generators set up alike, each drawing ``count`` numbers
    of one kind in a T.Parallel loop (run in order)."""

    @T.prim_func
    def main(U: T.Tensor((count,), "int64"), F: T.Tensor((count,), "float32"),
             D: T.Tensor((count,), "float64"), N: T.Tensor((count,), "float32"),
             N64: T.Tensor((count,), "float64")):
        with T.Kernel(1, threads=1):
            T.rng_init(seed, seq, off)
            for i in T.Parallel(count):
                U[i] = T.cast(T.rng_rand(), "int64")
            T.rng_init(seed, seq, off)
            for i in T.Parallel(count):
                F[i] = T.rng_rand_float()
            T.rng_init(seed, seq, off)
            for i in T.Parallel(count):
                D[i] = T.rng_rand_float(bit=64)
            T.rng_init(seed, seq, off)
            for i in T.Parallel(count):
                N[i] = T.rng_rand_float(dist="normal")
            T.rng_init(seed, seq, off)
            for i in T.Parallel(count):
                N64[i] = T.rng_rand_float(64, "normal")

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_kernels_draw_cuRANDs_numbers(curand, target):
    for seed, seq, off in STARTS:
        kernel = tilewright.compile(draws(seed, seq, off), target=target)
        outs = [torch.zeros(COUNT, dtype=d) for d in
                (torch.int64, torch.float32, torch.float64, torch.float32, torch.float64)]
        kernel(*outs)
        for kind, out in zip(KINDS, outs):
            assert _same(kind, out.numpy(), curand(seed, seq, off, COUNT, kind)), \
                (target, kind, seed, seq, off)


def test_run_time_seed_subsequence_and_offset():
    # the seed, subsequence and offset as run-time int32 values (negative values convert to
    # 64 bits as C's unsigned long long does)
    @T.prim_func
    def main(P: T.Tensor((3,), "int32"), U: T.Tensor((6,), "int64")):
        with T.Kernel(1, threads=1):
            T.rng_init(P[0], P[1], P[2])
            for i in T.Parallel(6):
                U[i] = T.cast(T.rng_rand(), "int64")

    kernel = tilewright.compile(main, target="cpu")
    for params in ([3, 5, 7], [-2, 1, 9], [123456, -1, 2**31 - 1]):
        u = torch.zeros(6, dtype=torch.int64)
        kernel(torch.tensor(params, dtype=torch.int32), u)
        wide = [p % 2**64 for p in params]
        want = _reference_draws(Philox(*wide), "u32", 6)
        assert u.tolist() == want.tolist(), params


# -- TileLang's example and tests (examples/rand, testing/python/language), imports changed ---
@tilewright.jit
def tilelang_rand_1d(M=1024, seed=42):
    num_per_thread = 128
    threads = 1
    blk_M = num_per_thread * threads

    A = T.empty((M,), "uint32")

    with T.Kernel(T.ceildiv(M, threads * num_per_thread), threads=threads) as bx:
        tx = T.get_thread_binding()
        T.rng_init(seed, 0, bx * blk_M + tx * num_per_thread)
        for i, j in T.Parallel(threads, num_per_thread):
            offsets = (bx * threads + i) * num_per_thread
            idx = offsets + j
            if idx < M:
                A[idx] = T.rng_rand()

    return A


@pytest.mark.parametrize("M, seed", [(1024, 42), (512, 123), (200, 0)])
def test_tilelang_rand_example(M, seed):
    # TileLang compares it with Triton's tl.randint4x(seed, offset): the four words of
    # Philox-4x32-10 at counter `offset` and key `seed`, element 4 * offset + k
    got = tilelang_rand_1d(M, seed).numpy().astype(np.int64)
    blocks = np.arange(-(-M // 4), dtype=np.uint64)
    gen = Philox(seed, 0, blocks * np.uint64(4))
    want = np.stack([gen.rand() for _ in range(4)], 1).reshape(-1)[:M]
    assert np.array_equal(got, want)


def tilelang_rand_blockwise(M=64, seed=42):
    threads = 32

    @T.prim_func
    def rand_kernel(A: T.Tensor((M,), "uint32")):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx)
            if tx == 0:
                A[bx] = T.rng_rand()

    return rand_kernel


def tilelang_rand_guarded_cumsum(M=64, seed=42):
    threads = 32

    @T.prim_func
    def rand_kernel(A: T.Tensor((M,), "uint32"), n: T.int32):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((threads,), "int32")
            if bx < n:
                T.rng_init(seed, 0, bx)
                s[tx] = 1
                T.cumsum(s, dim=0)
                if tx == 0:
                    A[bx] = T.rng_rand() + T.cast(s[threads - 1], "uint32") * 0

    return rand_kernel


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_tilelang_rand_init_in_split_guard(target):
    M, seed, n = 64, 42, 37
    guarded = tilewright.compile(tilelang_rand_guarded_cumsum(M, seed), target=target)
    baseline = tilewright.compile(tilelang_rand_blockwise(M, seed), target=target)
    sentinel = 0xDEADBEEF
    A = torch.full((M,), sentinel, dtype=torch.uint32)
    guarded(A, n)
    A_ref = torch.empty(M, dtype=torch.uint32)
    baseline(A_ref)
    assert torch.equal(A[:n], A_ref[:n])
    assert (A[n:] == sentinel).all()
    # block b's first number: offset b of subsequence 0
    assert np.array_equal(A_ref.numpy(), Philox(seed, 0, np.arange(M)).rand())


def test_each_thread_draws_from_its_own_generator():
    # default subsequence: the thread's index in the grid; the threads draw different counts
    # (a loop bound on the thread index), then one more number each
    threads = 32

    @T.prim_func
    def main(U: T.Tensor((2, threads), "int64")):
        with T.Kernel(2, threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(9)
            for _ in T.serial(tx % 5):
                T.rng_rand()
            U[bx, tx] = T.cast(T.rng_rand(), "int64")

    for target in ("cpu", "interp"):
        u = torch.zeros(2, threads, dtype=torch.int64)
        tilewright.compile(main, target=target)(u)
        ids = np.arange(2 * threads)
        want = [int(Philox(9, t, t % threads % 5).rand()[0]) for t in ids]
        assert u.reshape(-1).tolist() == want, target


# -- refusals ----------------------------------------------------------------------------------
def _line_of(func, offset):
    return func.__code__.co_firstlineno + offset


def _refused(body, message):
    with pytest.raises(KernelError, match=message) as info:
        tilewright.compile(body(), target="cpu")
    return info.value.location.line


def test_a_draw_before_rng_init_is_refused_at_its_line():
    def body():
        @T.prim_func
        def main(U: T.Tensor((4,), "uint32")):
            with T.Kernel(1, threads=1):
                for i in T.Parallel(4):
                    U[i] = T.rng_rand()

        return main

    assert _refused(body, r"call T.rng_init earlier") == _line_of(body, 5)


def test_draws_in_a_parallel_loop_of_several_threads_are_refused():
    def body():
        @T.prim_func
        def main(U: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32):
                T.rng_init(1)
                for i in T.Parallel(64):
                    U[i] = T.rng_rand_float()

        return main

    assert _refused(body, r"T.Parallel loop of a block of 32 threads.*threads=1") == \
        _line_of(body, 6)


@pytest.mark.parametrize("setup, message", [
    (lambda: T.rng_init(1, generator="curandStateXORWOW_t"), "is not provided"),
    (lambda: T.rng_init(1, generator="mt19937"), "unknown generator"),
    (lambda: T.rng_init(1.5, 0, 0), "seed is an integer"),
])
def test_bad_generators_are_refused(setup, message):
    with pytest.raises(KernelError, match=message):
        @T.prim_func
        def main(U: T.Tensor((4,), "uint32")):
            with T.Kernel(1, threads=1):
                setup()
                U[0] = T.rng_rand()


@pytest.mark.parametrize("kwargs, message", [({"bit": 16}, "32- or 64-bit"),
                                             ({"dist": "poisson"}, "'uniform' or 'normal'")])
def test_bad_float_draws_are_refused(kwargs, message):
    def body():
        @T.prim_func
        def main(U: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                T.rng_init(3)
                U[0] = T.rng_rand_float(**kwargs)

        return main

    assert _refused(body, message) == _line_of(body, 5)


def test_thread_and_block_extents():
    @T.prim_func
    def main(U: T.Tensor((3, 64), "int32")):
        with T.Kernel(3, threads=64) as bx:
            tx = T.get_thread_binding()
            U[bx, tx] = T.get_thread_extent() * 100 + T.get_block_extent()

    u = torch.zeros(3, 64, dtype=torch.int32)
    tilewright.compile(main, target="cpu")(u)
    assert (u == 6403).all()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
