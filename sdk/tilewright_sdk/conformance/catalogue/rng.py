"""Rows for random numbers (``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``), and
:class:`Philox`, the reference they are checked against: cuRAND's device generator
``curandStatePhilox4_32_10_t`` in NumPy, one generator per element of an array of seeds,
subsequences and offsets. ``tests/language/test_random.py`` checks it bit for bit against
the vendor's own code (``curand_kernel.h`` of the ``nvidia-curand`` wheel, built for the host
with nvcc)."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import numpy as np
import tilewright.language as T

from .model import Kernel, rand
from .tiles import BASE

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # curand_philox4x32_x.h
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = np.uint64(0xFFFFFFFF)
INV_2POW32 = np.float32(2.3283064e-10)  # curand_globals.h
INV_2POW32_2PI = np.float32(INV_2POW32 * np.float32(6.2831855))
INV_2POW53 = 1.1102230246251565e-16


def philox4x32_10(ctr, key):
    """curand_Philox4x32_10 of counters ``ctr`` (4 x n uint64 holding 32-bit words) and keys
    ``key`` (2 x n)."""
    c = [np.asarray(w, np.uint64) for w in ctr]
    k0, k1 = (np.asarray(w, np.uint64) for w in key)
    for r in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        kr0 = (k0 + np.uint64(r * W0)) & MASK
        kr1 = (k1 + np.uint64(r * W1)) & MASK
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ kr0, p1 & MASK, (p0 >> np.uint64(32)) ^ c[3] ^ kr1,
             p0 & MASK]
    return c


class Philox:
    """cuRAND's Philox-4x32-10 state of each element: ``curand_init(seed, seq, off)``; the
    draws of ``curand``, ``curand_uniform``, ``curand_uniform_double``, ``curand_normal`` and
    ``curand_normal_double`` (the Box-Muller pair with NumPy's log, sin and cos)."""

    def __init__(self, seed, seq, off):
        seed, seq, off = (np.asarray(v, np.uint64) for v in (seed, seq, off))
        seed, seq, off = (np.atleast_1d(v) for v in np.broadcast_arrays(seed, seq, off))
        block = off >> np.uint64(2)
        self.ctr = [block & MASK, block >> np.uint64(32), seq & MASK, seq >> np.uint64(32)]
        self.key = [seed & MASK, seed >> np.uint64(32)]
        self.pos = (off & np.uint64(3)).astype(np.int64)
        self.out = philox4x32_10(self.ctr, self.key)
        self.extra32, self.extra64 = None, None

    def _advance(self, where=True) -> None:
        """Philox_State_Incr and a new output block, for the states ``where`` says."""
        ctr, carry = [], np.ones_like(self.ctr[0])
        for word in self.ctr:
            total = word + carry
            ctr.append(total & MASK)
            carry = total >> np.uint64(32)
        out = philox4x32_10(ctr, self.key)
        self.ctr = [np.where(where, n, o) for n, o in zip(ctr, self.ctr)]
        self.out = [np.where(where, n, o) for n, o in zip(out, self.out)]

    def rand(self) -> np.ndarray:
        """``curand``: the word at each state's position, then the next."""
        value = np.take_along_axis(np.stack(self.out), self.pos[None], 0)[0]
        self.pos += 1
        spent = self.pos == 4
        self._advance(spent)
        self.pos[spent] = 0
        return value.astype(np.uint32)

    def _rand4(self) -> list:
        """``curand4``: four words from the position on; the counter moves one block."""
        old = np.stack(self.out)
        self._advance()
        both = np.concatenate([old, np.stack(self.out)])
        return [np.take_along_axis(both, (self.pos + k)[None], 0)[0] for k in range(4)]

    def uniform(self) -> np.ndarray:
        return self.rand().astype(np.float32) * INV_2POW32 + INV_2POW32 / np.float32(2)

    def uniform_double(self) -> np.ndarray:
        return self.rand().astype(np.float64) * 2.0 ** -32 + 2.0 ** -32

    def normal(self) -> np.ndarray:
        if self.extra32 is not None:
            value, self.extra32 = self.extra32, None
            return value
        x, y = self.rand(), self.rand()
        u = x.astype(np.float32) * INV_2POW32 + INV_2POW32 / np.float32(2)
        v = y.astype(np.float32) * INV_2POW32_2PI + INV_2POW32_2PI / np.float32(2)
        s = np.sqrt(np.float32(-2.0) * np.log(u))
        self.extra32 = np.cos(v) * s
        return np.sin(v) * s

    def normal_double(self) -> np.ndarray:
        if self.extra64 is not None:
            value, self.extra64 = self.extra64, None
            return value
        x0, x1, y0, y1 = self._rand4()
        u = (x0 ^ (x1 << np.uint64(21))).astype(np.float64) * INV_2POW53 + INV_2POW53 / 2
        v = (y0 ^ (y1 << np.uint64(21))).astype(np.float64) * (INV_2POW53 * 2) + INV_2POW53
        s = np.sqrt(-2.0 * np.log(u))
        self.extra64 = np.cos(v * np.pi) * s
        return np.sin(v * np.pi) * s


SEED = 2026


def _random(dtype, M, N):
    """Each block's one thread: a generator at subsequence bx and the offset S[bx] (a
    run-time value), N integers, N uniform floats and N normal floats drawn in T.Parallel
    loops (in order on a block of one thread)."""

    @T.prim_func
    def random(S: T.Tensor((M,), "int32"), U: T.Tensor((M, N), "int64"),
               F: T.Tensor((M, N), dtype), Z: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=1) as bx:
            T.rng_init(SEED, bx, S[bx])
            for j in T.Parallel(N):
                U[bx, j] = T.cast(T.rng_rand(), "int64")
            for j in T.Parallel(N):
                F[bx, j] = T.cast(T.rng_rand_float(), dtype)
            for j in T.Parallel(N):
                Z[bx, j] = T.cast(T.rng_rand_float(dist="normal"), dtype)

    return random


def _random_ref(s, N):
    gen = Philox(SEED, np.arange(s.shape[0]), s.numpy().astype(np.int64))
    u = np.stack([gen.rand() for _ in range(N)], 1).astype(np.int64)
    f = np.stack([gen.uniform() for _ in range(N)], 1).astype(np.float64)
    z = np.stack([gen.normal() for _ in range(N)], 1).astype(np.float64)
    return [s.long().new_tensor(u), s.double().new_tensor(f), s.double().new_tensor(z)]


def _random_threads(dtype, M, N, threads=32):
    """Each thread of a block of ``threads``: its own generator (the default subsequence, its
    index in the grid; the offset S[bx] % 4), N integers in a T.serial loop, then a normal
    float, replaced by the pair's second value in the even threads; the block's size from
    T.get_thread_extent and its count from T.get_block_extent."""

    @T.prim_func
    def random_threads(S: T.Tensor((M,), "int32"), U: T.Tensor((M, threads, N), "int64"),
                       Z: T.Tensor((M, threads), dtype)):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(SEED + T.get_block_extent() - M, off=S[bx] % 4)
            for j in T.serial(N):
                U[bx, tx, j] = T.cast(T.rng_rand(), "int64") + \
                    (T.get_thread_extent() - threads)
            Z[bx, tx] = T.cast(T.rng_rand_float(dist="normal"), dtype)
            if tx % 2 == 0:
                Z[bx, tx] = T.cast(T.rng_rand_float(dist="normal"), dtype)

    return random_threads


def _random_threads_ref(s, N, threads=32):
    M = s.shape[0]
    gen = Philox(SEED, np.arange(M * threads), np.repeat(s.numpy() % 4, threads))
    u = np.stack([gen.rand() for _ in range(N)], 1).astype(np.int64)
    first, second = gen.normal(), gen.normal()
    z = np.where(np.arange(M * threads) % 2 == 0, second, first).astype(np.float64)
    return [s.long().new_tensor(u.reshape(M, threads, N)),
            s.double().new_tensor(z.reshape(M, threads))]


def _offsets(torch, gen, dtype, M, N, **_):
    return [rand(torch, gen, (M,), "int32", low=0, high=1000)]


ROWS = (
    Kernel("random", (*BASE, "Parallel", "cast", "int64", "int32", "rng_init",
                      "rng_rand", "rng_rand_float"), (), _random, _offsets, _random_ref,
           {"full": {"M": 3, "N": 11}}, out_idx=(1, 2, 3), ref_args=("N",),
           features=("single_thread_blocks",), dtypes=("float32",),
           doc="random integers, uniform and normal floats of cuRAND's Philox generator at a "
               "run-time offset, drawn in order by a block of one thread"),
    Kernel("random_threads", (*BASE, "serial", "cast", "int64", "int32",
                              "get_thread_binding", "get_thread_extent", "get_block_extent",
                              "rng_init", "rng_rand", "rng_rand_float"),
           ("get_thread_binding",), _random_threads, _offsets, _random_threads_ref,
           {"full": {"M": 2, "N": 6}}, out_idx=(1, 2), ref_args=("N",), dtypes=("float32",),
           doc="a generator per thread at the default subsequence (its index in the grid); "
               "draws under a branch on the thread index"),
)
