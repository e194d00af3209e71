"""Runs generated CUDA C++ on the host, for tests on machines without a GPU.

The source is compiled with g++ against a small shim: every CUDA thread of a block is a host
thread, ``__syncthreads`` is a ``std::barrier``, warp shuffles exchange through memory between
two barriers, the dynamic shared-memory pool is poisoned before each block, and blocks run one
after another. It checks what the generated code computes (indexing, guards, barriers,
reductions); it says nothing about speed. Float types only (no cuda_fp16 on the host).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
struct tw_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local tw_dim3 threadIdx, blockIdx;
tw_dim3 blockDim, gridDim;
alignas(128) unsigned char tw_smem_ptr[1 << 18];
std::barrier<>* tw_barrier;
std::mutex tw_atomic_mutex;
alignas(16) unsigned char tw_exchange[1024][16];
inline void __syncthreads() { tw_barrier->arrive_and_wait(); }
inline void __trap() { std::fflush(stdout); std::abort(); }
template <class T> T __shfl_xor_sync(unsigned, T v, int offset, int = 32) {
  unsigned t = threadIdx.x;
  std::memcpy(tw_exchange[t], &v, sizeof(T));
  tw_barrier->arrive_and_wait();
  T r;
  std::memcpy(&r, tw_exchange[t ^ offset], sizeof(T));
  tw_barrier->arrive_and_wait();
  return r;
}
template <class T> T atomicAdd(T* p, T v) { std::lock_guard<std::mutex> g(tw_atomic_mutex); T o = *p; *p = o + v; return o; }
template <class T> T atomicMax(T* p, T v) { std::lock_guard<std::mutex> g(tw_atomic_mutex); T o = *p; *p = o > v ? o : v; return o; }
template <class T> T atomicMin(T* p, T v) { std::lock_guard<std::mutex> g(tw_atomic_mutex); T o = *p; *p = o < v ? o : v; return o; }
template <class T> T atomicCAS(T* p, T c, T v) { std::lock_guard<std::mutex> g(tw_atomic_mutex); T o = *p; if (o == c) *p = v; return o; }
template <class T> T max(T a, T b) { return a > b ? a : b; }
template <class T> T min(T a, T b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float exp2f(float x) { return std::exp2(x); }
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(unsigned long long v) { double d; std::memcpy(&d, &v, 8); return d; }
struct tw_ptr { void* p; template <class T> operator T*() const { return (T*)p; } };
"""

LAUNCHER = r"""
extern "C" void tw_launch(void** ptrs, long long* ints, int gx, int gy, int gz, int threads) {
  gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
  blockDim = {(unsigned)threads, 1, 1};
  for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) for (int x = 0; x < gx; ++x) {
    std::memset(tw_smem_ptr, 0xff, sizeof(tw_smem_ptr));  // poison: NaN for floats
    std::barrier<> bar(threads);
    tw_barrier = &bar;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([=] {
      threadIdx = {(unsigned)t, 0, 0};
      blockIdx = {(unsigned)x, (unsigned)y, (unsigned)z};
      KERNEL(ARGS);
    });
    for (auto& th : pool) th.join();
  }
}
"""


def available() -> str | None:
    """None when g++ with C++20 is here, else the reason."""
    return None if shutil.which("g++") else "g++ is not on PATH"


def build(source: str, launch: dict, workdir: Path) -> ctypes.CDLL:
    args = []
    for n, p in enumerate(launch["params"]):
        args.append(f"tw_ptr{{ptrs[{n}]}}" if p["kind"] == "tensor" else f"ints[{n}]")
    text = SHIM + source + LAUNCHER.replace("KERNEL", launch["entry"]).replace(
        "ARGS", ", ".join(args))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    lib = Path(workdir) / f"emu-{digest}.so"
    if not lib.exists():
        src = Path(workdir) / f"emu-{digest}.cpp"
        src.write_text(text)
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
               "-I/usr/local/cuda/include", "-o", str(lib), str(src)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode:
            raise RuntimeError(f"host emulation build failed: {' '.join(cmd)}\n"
                               f"{result.stderr[-3000:]}")
    return ctypes.CDLL(str(lib))


def run(source: str, launch: dict, workdir: Path, *args) -> None:
    """Launch the kernel on ``args`` (every kernel parameter, torch CPU tensors or ints)."""
    lib = build(source, launch, workdir)
    symbols = {name: int(args[param].shape[dim])
               for name, (param, dim) in launch["symbols"].items()}
    n = len(launch["params"])
    ptrs, ints = (ctypes.c_void_p * n)(), (ctypes.c_longlong * n)()
    for i, p in enumerate(launch["params"]):
        if p["kind"] == "tensor":
            ptrs[i] = args[p["param"]].data_ptr()
        elif p["kind"] == "scalar":
            ints[i] = int(args[p["param"]])
        else:
            ints[i] = symbols[p["name"]]
    grid = [int(eval(g, {"min": min, "max": max}, symbols)) for g in launch["grid"]]
    lib.tw_launch(ptrs, ints, *grid, int(launch["block"][0]))
