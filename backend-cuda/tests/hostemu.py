"""Runs generated CUDA C++ on the host, for tests on machines without a GPU.

The source is compiled with g++ against a small shim: every CUDA thread of a block is a fiber
of one host thread (ucontext), switched only where it waits: ``__syncthreads``, a named barrier
or a warp's barrier (``tw_sync``), an mbarrier's phase. Between two waits a thread runs alone,
so a run is deterministic, a missing barrier shows up the same way every time, and a deadlock
(every thread waiting) is a RuntimeError instead of a hang; the barriers' state (block, named,
warp and mbarriers) is the library's own and made fresh as each cluster of blocks starts, so a
launch after a deadlock starts clean. Warp shuffles exchange through memory between two
barriers of the warp (a warp-collective op waits for its warp only, as on the GPU, so the warps
of one T.ws role run it while another role's do other work; a block's last warp may be partial,
and a shuffle whose member mask names a lane that does not exist is an error; shuffles pick
their source lanes as PTX's shfl modes do, votes exchange the same way, and a block's vote,
``__syncthreads_count/and/or``, between two block barriers), the dynamic
shared-memory pool is poisoned before each block, and blocks run one after another, except that
the blocks of one thread-block cluster run at once, each with its own shared memory, so that
they can wait for each other (cluster barriers, TMA multicast, remote mbarrier arrivals), and
so do all the blocks of a cooperative kernel (``T.sync_grid``, up to 8 along x). It checks what
the generated code computes (indexing, guards, barriers, reductions); it says nothing about
speed. float16 and bfloat16 use the host side of cuda_fp16.h and cuda_bf16.h; mma.sync and
ldmatrix are emulated per warp from the PTX fragment layouts (through memory between two
barriers of the warp); a cp.async copy (zero-filled past its source bytes) lands when a wait
retires its group (or an mbarrier arrival tracks it), a TMA load when a wait sees its
mbarrier's phase complete, and a TMA store reads its tile when a bulk wait retires its group,
so a read before its wait sees poison (or an older stage) and a tile overwritten before a
store's wait is stored overwritten. A block may have up to three dimensions (a
``T.CUDASourceCodeKernel``'s); the warp-level helpers number its threads by ``threadIdx.x``
alone, as in the one-dimensional blocks of generated kernels. The shim is a header
precompiled once per process (its parse is most of a small kernel's build); each kernel's
library is named by the digest of the shim and its source.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import filelock
from tilewright.runtime.cuda import kernels_of, symbol_values
from tilewright_sdk.conformance.runner import copy_argument

SHIM = r"""
#include <vector_types.h>  // float4 & co. for vectorised loads and stores (16-byte aligned)
#include <vector_functions.h>  // make_float4 & co.
#include <algorithm>
#include <map>
#include <memory>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
struct tw_dim3 { unsigned x = 0, y = 0, z = 0; };
constexpr int TW_MAX_CLUSTER = 8;
// The threads of the running blocks are fibers of one host thread, switched only where a
// thread waits (a barrier, an mbarrier's phase): between two waits a thread runs alone, so
// the emulation is deterministic and costs no more than its arithmetic. Every wait is a loop
// `while (!ready) tw_wait_turn();` that hands over to the next thread in round robin.
// a cp.async chunk in flight: its bytes (read at issue), written into dst when its group
// completes
struct tw_chunk { void* dst; int bytes; unsigned char data[16]; };
// a TMA store in flight: it reads its shared-memory box (and writes the tensor) when a
// cp.async.bulk.wait_group.read retires its group, or when its thread ends
struct tw_bulk_store {
  void (*run)(const tw_bulk_store&); const void* map; unsigned char* src; int c[5];
};
struct tw_fiber {
  ucontext_t context; tw_dim3 thread, block; unsigned rank; bool done;
  std::vector<tw_chunk> open;                 // issued since the last commit
  std::vector<std::vector<tw_chunk>> groups;  // committed, oldest first
  std::vector<tw_bulk_store> open_stores;     // the same for TMA stores
  std::vector<std::vector<tw_bulk_store>> store_groups;
};
tw_fiber* tw_fibers;
int tw_fiber_count, tw_fiber_now, tw_fibers_left;
// PTX ISA, cp.async: the copies of a thread land in shared memory only when a
// cp.async.wait_group leaves their group no longer pending (or a cp.async.mbarrier.arrive
// tracks them); until then a read of the destination sees what was there (the pool's
// poison), so a read before its wait shows in the results
inline void tw_emu_cp_async(void* dst, const void* src, int src_bytes, int bytes) {
  tw_chunk c{dst, bytes, {}};
  std::memcpy(c.data, src, src_bytes);
  std::memset(c.data + src_bytes, 0, bytes - src_bytes);
  tw_fibers[tw_fiber_now].open.push_back(c);
}
inline void tw_emu_cp_land(const std::vector<tw_chunk>& chunks) {
  for (const tw_chunk& c : chunks) std::memcpy(c.dst, c.data, c.bytes);
}
inline void tw_emu_cp_commit() {
  tw_fiber& f = tw_fibers[tw_fiber_now];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
inline void tw_emu_cp_wait(int pending) {  // cp.async.wait_group pending
  tw_fiber& f = tw_fibers[tw_fiber_now];
  while ((int)f.groups.size() > pending) {
    tw_emu_cp_land(f.groups.front());
    f.groups.erase(f.groups.begin());
  }
}
// PTX ISA, cp.async.bulk.wait_group.read: a TMA store's reads of shared memory are done
// only when its bulk group is no longer pending, so a box overwritten before the wait is
// stored as overwritten
inline void tw_emu_bulk_store(const tw_bulk_store& store) {
  tw_fibers[tw_fiber_now].open_stores.push_back(store);
}
inline void tw_emu_bulk_commit() {
  tw_fiber& f = tw_fibers[tw_fiber_now];
  f.store_groups.push_back(std::move(f.open_stores));
  f.open_stores.clear();
}
inline void tw_emu_bulk_wait(int pending) {
  tw_fiber& f = tw_fibers[tw_fiber_now];
  while ((int)f.store_groups.size() > pending) {
    for (const tw_bulk_store& store : f.store_groups.front()) store.run(store);
    f.store_groups.erase(f.store_groups.begin());
  }
}
inline void tw_emu_bulk_flush() {  // a thread's stores still in flight as it ends
  tw_emu_bulk_commit();
  tw_emu_bulk_wait(0);
}
inline void tw_emu_cp_land_all() {  // every copy the thread issued, committed or not
  tw_emu_cp_wait(0);
  tw_fiber& f = tw_fibers[tw_fiber_now];
  tw_emu_cp_land(f.open);
  f.open.clear();
}
long long tw_idle_turns;  // turns in a row in which no thread could go on: 2 rounds, deadlock
ucontext_t tw_launcher_context;
// the running thread's coordinates and block (set at every switch)
tw_dim3 threadIdx, blockIdx;
tw_dim3 blockDim, gridDim;
alignas(1024) unsigned char tw_smem_pool[TW_MAX_CLUSTER][1 << 18];
// per block of the running cluster: its shared memory, and its threads' slots in the
// exchange buffers below (rank * 1024 + threadIdx.x)
unsigned char* tw_smem_ptr;
unsigned tw_cta_rank = 0, tw_slot_base = 0;
unsigned long long tw_block_epoch = 0;  // counts the clusters run: per-thread state is fresh
unsigned char* tw_cta_smem[TW_MAX_CLUSTER];
inline void tw_enter(int i) {
  tw_fiber& f = tw_fibers[i];
  tw_fiber_now = i;
  threadIdx = f.thread;
  blockIdx = f.block;
  tw_cta_rank = f.rank;
  tw_slot_base = f.rank * 1024;
  tw_smem_ptr = tw_smem_pool[f.rank];
}
inline int tw_next_fiber() {
  int i = tw_fiber_now;
  do { i = (i + 1) % tw_fiber_count; } while (tw_fibers[i].done);
  return i;
}
inline void tw_progress() { tw_idle_turns = 0; }
inline void tw_switch() {  // to the next thread in round robin
  tw_fiber& me = tw_fibers[tw_fiber_now];
  int next = tw_next_fiber();
  if (&tw_fibers[next] == &me) return;
  tw_enter(next);
  swapcontext(&me.context, &tw_fibers[next].context);
}
// the calling thread cannot go on yet: the next thread runs; after two rounds in which no
// thread could go on (a deadlock) the launch stops (tw_run_grid returns 1)
bool tw_deadlock;
inline void tw_wait_turn() {
  if (++tw_idle_turns > 2LL * tw_fibers_left + 2) {
    std::printf("tw emulation: block (%u, %u, %u) thread %u: every thread waits for another "
                "(deadlock)\n", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    std::fflush(stdout);
    tw_deadlock = true;
    setcontext(&tw_launcher_context);
  }
  tw_switch();
}
// the calling thread lets the others run first (where the GPU works asynchronously: a wgmma
// in flight until its wait_group)
inline void tw_yield() {
  tw_progress();
  tw_switch();
}
// a barrier of `expected` threads (std::barrier's arrive and arrive_and_wait, for fibers)
struct tw_sync {
  int expected = 0, count = 0;
  unsigned phase = 0;
  explicit tw_sync(int n = 0) : expected(n) {}
  unsigned arrive() {
    tw_progress();
    unsigned now = phase;
    if (++count == expected) { count = 0; ++phase; }
    return now;
  }
  void wait(unsigned arrived_in) {
    while (phase == arrived_in) tw_wait_turn();
    tw_progress();
  }
  void arrive_and_wait() { wait(arrive()); }
};
// one T for each thread of the running clusters, fresh in each cluster
template <class T> struct tw_per_thread {
  T slots[TW_MAX_CLUSTER * 1024];
  unsigned long long epochs[TW_MAX_CLUSTER * 1024] = {};
  T& get() {
    unsigned t = tw_slot_base + threadIdx.x;
    if (epochs[t] != tw_block_epoch) { slots[t] = T(); epochs[t] = tw_block_epoch; }
    return slots[t];
  }
};
// The state of the barriers (plain globals: each kernel library has its own; an `inline`
// variable of a header would be one symbol shared by every library of the process), made
// fresh as each cluster starts, so a launch after one that stopped at a deadlock (its
// barriers part-way) starts clean
tw_sync tw_block_sync[TW_MAX_CLUSTER], tw_cluster_barrier_sync;
tw_sync tw_wgmma_warp_syncs[TW_MAX_CLUSTER * 32];  // a register-A wgmma's exchange
// mbarriers by address: arrivals still expected, transaction bytes, phase bit
// a TMA load's bytes waiting to land: in shared memory at dst once a wait sees the phase of
// its mbarrier that counted them complete
struct tw_landing {
  unsigned long long phase; unsigned char* dst; std::vector<unsigned char> bytes;
};
struct tw_mbar_state {
  long long expected, pending, tx; int phase;
  unsigned long long completed = 0;  // phases completed so far
  std::vector<tw_landing> landings;
};
std::map<void*, tw_mbar_state> tw_mbars;
std::map<long long, tw_sync> tw_named;  // named barriers by block, id and thread count
tw_sync* tw_cluster_barrier = &tw_cluster_barrier_sync;
tw_sync tw_warp_syncs[TW_MAX_CLUSTER][32];  // one per warp: warp ops wait on theirs
alignas(16) unsigned char tw_exchange[TW_MAX_CLUSTER * 1024][16];
inline void __syncthreads() { tw_block_sync[tw_cta_rank].arrive_and_wait(); }
inline void tw_warp_sync() { tw_warp_syncs[tw_cta_rank][threadIdx.x / 32].arrive_and_wait(); }
// a barrier of the lanes of `mask` in the calling thread's warp (the whole warp's when the mask
// names every lane that exists); the partial ones by block, warp and mask
std::map<long long, tw_sync> tw_lane_syncs;
unsigned tw_live_lanes();
inline void tw_mask_sync(unsigned mask) {
  unsigned lanes = mask & tw_live_lanes();
  if (lanes == tw_live_lanes()) return tw_warp_sync();
  long long key = ((long long)tw_cta_rank * 32 + threadIdx.x / 32) << 32 | lanes;
  auto it = tw_lane_syncs.try_emplace(key, __builtin_popcount(lanes)).first;
  it->second.arrive_and_wait();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { tw_mask_sync(mask); }
inline void __trap() { std::fflush(stdout); std::abort(); }
inline void __nanosleep(unsigned) {}  // a thread runs alone until it waits: nothing to pause
// The lanes of the calling thread's warp that exist: the last warp of a block whose size is
// not a multiple of 32 has fewer. A shuffle whose member mask names a lane that does not exist,
// or leaves out the calling lane, is undefined on the GPU: the launch fails (tw_run_grid
// returns 2); a value read from a lane outside the mask is undefined too: it reads as 0xFF
// bytes (a float NaN, an integer -1).
int tw_block_threads;
bool tw_bad_shuffle;
unsigned tw_live_lanes() {
  int left = tw_block_threads - (int)(threadIdx.x / 32 * 32);
  return left >= 32 ? 0xffffffffu : (1u << left) - 1;
}
inline void tw_check_mask(unsigned mask) {
  unsigned live = tw_live_lanes();
  if (((mask & ~live) || !((mask >> (threadIdx.x % 32)) & 1)) && !tw_bad_shuffle) {
    std::printf("tw emulation: block (%u, %u, %u) thread %u: a warp shuffle's member mask "
                "0x%08x does not fit the lanes of its warp that exist (0x%08x) and the "
                "calling lane\n", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, mask, live);
    std::fflush(stdout);
    tw_bad_shuffle = true;
  }
}
template <class T> T tw_shuffle(unsigned mask, T v, unsigned lane) {
  unsigned t = tw_slot_base + threadIdx.x, live = tw_live_lanes();
  tw_check_mask(mask);
  std::memcpy(tw_exchange[t], &v, sizeof(T));
  tw_mask_sync(mask);
  T r;
  if ((mask & live) >> lane & 1) std::memcpy(&r, tw_exchange[t / 32 * 32 + lane], sizeof(T));
  else std::memset(&r, 0xff, sizeof(T));
  tw_mask_sync(mask);
  return r;
}
// PTX's shfl (mode 0 idx, 1 bfly, 2 down, 3 up): the source lane of the calling lane in its
// group of `width` lanes, its own lane when the source is out of the group as the mode says
inline unsigned tw_shuffle_lane(int mode, int b, int width) {
  int lane = threadIdx.x % 32, first = lane & ~(width - 1), last = first + width - 1, j;
  b &= 31;
  switch (mode) {
    case 0: return first | (b & (width - 1));
    case 1: j = lane ^ b; return j <= last ? j : lane;
    case 2: j = lane + b; return j <= last ? j : lane;
    default: j = lane - b; return j >= first ? j : lane;
  }
}
template <class T> T __shfl_sync(unsigned mask, T v, int lane, int width = 32) {
  return tw_shuffle(mask, v, tw_shuffle_lane(0, lane, width));
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int offset, int width = 32) {
  return tw_shuffle(mask, v, tw_shuffle_lane(1, offset, width));
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tw_shuffle(mask, v, tw_shuffle_lane(2, delta, width));
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tw_shuffle(mask, v, tw_shuffle_lane(3, delta, width));
}
// a warp's vote: the lanes of the mask that exist for which `f` holds of their value,
// exchanged between two barriers of the warp
template <class T, class F> unsigned tw_warp_vote(unsigned mask, T v, F f) {
  unsigned t = tw_slot_base + threadIdx.x, live = tw_live_lanes(), bits = 0;
  tw_check_mask(mask);
  std::memcpy(tw_exchange[t], &v, sizeof(T));
  tw_mask_sync(mask);
  for (unsigned k = 0; k < 32; ++k) {
    T o;
    std::memcpy(&o, tw_exchange[t / 32 * 32 + k], sizeof(T));
    if ((mask & live) >> k & 1 && f(o)) bits |= 1u << k;
  }
  tw_mask_sync(mask);
  return bits;
}
inline int __any_sync(unsigned m, int p) {
  return tw_warp_vote(m, p, [](int o) { return o != 0; }) != 0;
}
inline int __all_sync(unsigned m, int p) {
  return tw_warp_vote(m, p, [](int o) { return o == 0; }) == 0;
}
inline unsigned __ballot_sync(unsigned m, int p) {
  return tw_warp_vote(m, p, [](int o) { return o != 0; });
}
inline unsigned __activemask() { return tw_live_lanes(); }
template <class T> unsigned __match_any_sync(unsigned m, T v) {
  return tw_warp_vote(m, v, [v](T o) { return o == v; });
}
template <class T> unsigned __match_all_sync(unsigned m, T v, int* pred) {
  *pred = tw_warp_vote(m, v, [v](T o) { return o == v; }) == (m & tw_live_lanes());
  return *pred ? m : 0;
}
// a block's vote: the number of its threads with a non-zero predicate, exchanged between two
// barriers of the block
inline int tw_block_count(int p) {
  std::memcpy(tw_exchange[tw_slot_base + threadIdx.x], &p, sizeof(int));
  __syncthreads();
  int n = 0;
  for (int k = 0; k < tw_block_threads; ++k) {
    int o;
    std::memcpy(&o, tw_exchange[tw_slot_base + k], sizeof(int));
    n += o != 0;
  }
  __syncthreads();
  return n;
}
inline int __syncthreads_count(int p) { return tw_block_count(p); }
inline int __syncthreads_and(int p) { return tw_block_count(p) == tw_block_threads; }
inline int __syncthreads_or(int p) { return tw_block_count(p) != 0; }
template <class T> T atomicAdd(T* p, T v) {
  T o = *p; *p = o + v; return o;
}
template <class T> T atomicMax(T* p, T v) {
  T o = *p; *p = o > v ? o : v; return o;
}
template <class T> T atomicMin(T* p, T v) {
  T o = *p; *p = o < v ? o : v; return o;
}
template <class T> T atomicCAS(T* p, T c, T v) {
  T o = *p; if (o == c) *p = v; return o;
}
template <class T> T atomicOr(T* p, T v) {
  T o = *p; *p = o | v; return o;
}
template <class T> T atomicAnd(T* p, T v) {
  T o = *p; *p = o & v; return o;
}
template <class T> T atomicXor(T* p, T v) {
  T o = *p; *p = o ^ v; return o;
}
// CUDA's bit counts (CUDA Math API, integer intrinsics): leading zeros of 32/64 bits (all of
// them for 0), set bits
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
// max and min of two arithmetic types in their common type, as CUDA's overloads of max(int,
// int), max(long long, long long) ... take a char and an int promoted (an int8 reduction);
// of floats those of fmaxf / fminf (CUDA Math API: "If one argument is NaN, returns the
// other argument"; __hmax / __hmin of half and bfloat16 likewise)
template <class C> C tw_emu_pick(C a, C b, bool larger) {
  if constexpr (!std::is_integral_v<C>) {  // float, double, __half, __nv_bfloat16
    if (std::isnan(static_cast<float>(a))) return b;
    if (std::isnan(static_cast<float>(b))) return a;
  }
  return larger ? (a > b ? a : b) : (a < b ? a : b);
}
template <class A, class B> std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>; return tw_emu_pick<C>(C(a), C(b), true);
}
template <class A, class B> std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>; return tw_emu_pick<C>(C(a), C(b), false);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
// the other fast float32 intrinsics TileLang's T.__log ... call, as the precise functions
// (within the intrinsics' error bounds); __ldg, a plain read
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __sinf(float x) { return std::sin(x); }
template <class T> T __ldg(const T* p) { return *p; }
inline float exp2f(float x) { return std::exp2(x); }
// CUDA's reinterpretations of a float's bits (device-only in CUDA's headers)
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(unsigned long long v) {
  double d; std::memcpy(&d, &v, 8); return d;
}
// The half and bfloat16 math of cuda_fp16.hpp and cuda_bf16.hpp that is device-only, on the
// host through float (TVM's header defines bfloat16 htanh, hpow, htan, hatan, herf itself)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define TW_EMU_LOW_MATH(T, NAME, F, TO_FLOAT, FROM_FLOAT) \
  inline T NAME(T x) { return FROM_FLOAT(F(TO_FLOAT(x))); }
#define TW_EMU_HALF_MATH(NAME, F) TW_EMU_LOW_MATH(__half, NAME, F, __half2float, __float2half)
#define TW_EMU_BF16_MATH(NAME, F) \
  TW_EMU_LOW_MATH(__nv_bfloat16, NAME, F, __bfloat162float, __float2bfloat16)
#define TW_EMU_BOTH_MATH(NAME, F) TW_EMU_HALF_MATH(NAME, F) TW_EMU_BF16_MATH(NAME, F)
inline float tw_rsqrt(float x) { return 1.0f / std::sqrt(x); }
TW_EMU_BOTH_MATH(hexp, std::exp) TW_EMU_BOTH_MATH(hexp2, std::exp2)
TW_EMU_BOTH_MATH(hexp10, [](float v) { return std::pow(10.0f, v); })
TW_EMU_BOTH_MATH(hlog, std::log) TW_EMU_BOTH_MATH(hlog2, std::log2)
TW_EMU_BOTH_MATH(hlog10, std::log10) TW_EMU_BOTH_MATH(hsqrt, std::sqrt)
TW_EMU_BOTH_MATH(hrsqrt, tw_rsqrt) TW_EMU_BOTH_MATH(hfloor, std::floor)
TW_EMU_BOTH_MATH(hceil, std::ceil) TW_EMU_BOTH_MATH(htrunc, std::trunc)
TW_EMU_BOTH_MATH(hrint, std::nearbyint) TW_EMU_BOTH_MATH(hsin, std::sin)
TW_EMU_BOTH_MATH(hcos, std::cos) TW_EMU_HALF_MATH(htanh, std::tanh)
#define TW_HOST_EMULATION 1
unsigned tw_mma_exchange[TW_MAX_CLUSTER * 1024][9];
inline float tw_bits16_to_float(unsigned bits, bool bf16) {
  unsigned u;
  if (bf16) {
    u = bits << 16;
  } else {  // IEEE half: sign, 5-bit exponent, 10-bit mantissa
    unsigned sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1f, man = bits & 0x3ff;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
      float f = std::ldexp((float)man, -24);
      return (bits & 0x8000u) ? -f : f;
    } else {
      u = sign | ((exp + 112) << 23) | (man << 13);
    }
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// One element of an mma operand register: code 0 half, 1 bfloat16 (16-bit), 2 int8, 3 e4m3fn,
// 4 e5m2 (8-bit), as include/tw_mma.h's mma_kind numbers them.
inline float tw_mma_element(unsigned bits, int code) {
  if (code < 2) return tw_bits16_to_float(bits, code == 1);
  if (code == 2) return (float)(signed char)bits;
  if (code == 4) return tw_bits16_to_float(bits << 8, false);  // e5m2 is half's upper byte
  unsigned exp = (bits >> 3) & 0xf, man = bits & 7;  // e4m3fn: bias 7, no infinities
  float f = exp == 0xf && man == 7 ? NAN
            : exp == 0 ? std::ldexp((float)man, -9) : std::ldexp((float)(8 + man), (int)exp - 10);
  return (bits & 0x80u) ? -f : f;
}
// mma.sync.m16n8k16 (16-bit operands) or m16n8k32 (8-bit) across the 32 lanes of the calling
// warp, from the PTX fragment layouts: each 32-bit register holds E = 2 or 4 consecutive k.
template <class C>
inline void tw_emulate_mma(C* c, const unsigned* a, const unsigned* b, int code) {
  unsigned t = tw_slot_base + threadIdx.x, base = t / 32 * 32;
  for (int i = 0; i < 4; ++i) tw_mma_exchange[t][i] = a[i];
  tw_mma_exchange[t][4] = b[0];
  tw_mma_exchange[t][5] = b[1];
  tw_warp_sync();
  const int E = code < 2 ? 2 : 4, K = 8 * E, H = K / 2, W = 32 / E;
  float A[16][32], B[32][8];
  for (int l = 0; l < 32; ++l) {
    const unsigned* r = tw_mma_exchange[base + l];
    int g = l >> 2, q = (l & 3) * E;
    for (int e = 0; e < E; ++e) {
      auto at = [&](int reg) {
        return tw_mma_element((r[reg] >> (W * e)) & ((1u << W) - 1), code);
      };
      A[g][q + e] = at(0);
      A[g + 8][q + e] = at(1);
      A[g][q + H + e] = at(2);
      A[g + 8][q + H + e] = at(3);
      B[q + e][g] = at(4);
      B[q + H + e][g] = at(5);
    }
  }
  tw_warp_sync();
  int lane = t % 32, g = lane >> 2, q = (lane & 3) * 2;
  int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {q, q + 1, q, q + 1};
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < K; ++k) c[i] += (C)(A[rows[i]][k] * B[k][cols[i]]);
}
// mma.sync.m16n8k32.s32.s4.s4.s32 across the calling warp: A two registers (rows g, g + 8),
// B one (column g), each 8 signed 4-bit k from 8 (l % 4), the first in the low bits.
inline void tw_emulate_mma_s4(int* c, const unsigned* a, const unsigned* b) {
  unsigned t = tw_slot_base + threadIdx.x, base = t / 32 * 32;
  tw_mma_exchange[t][0] = a[0];
  tw_mma_exchange[t][1] = a[1];
  tw_mma_exchange[t][4] = b[0];
  tw_warp_sync();
  int A[16][32], B[32][8];
  auto s4 = [](unsigned r, int e) {
    int v = (int)((r >> (4 * e)) & 0xfu);
    return v < 8 ? v : v - 16;
  };
  for (int l = 0; l < 32; ++l) {
    const unsigned* r = tw_mma_exchange[base + l];
    int g = l >> 2, q = (l & 3) * 8;
    for (int e = 0; e < 8; ++e) {
      A[g][q + e] = s4(r[0], e);
      A[g + 8][q + e] = s4(r[1], e);
      B[q + e][g] = s4(r[4], e);
    }
  }
  tw_warp_sync();
  int lane = t % 32, g = lane >> 2, q = (lane & 3) * 2;
  int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {q, q + 1, q, q + 1};
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 32; ++k) c[i] += A[rows[i]][k] * B[k][cols[i]];
}
// mma.sp::ordered_metadata.m16n8k32 (16-bit operands, selector 0) across the calling warp:
// A the m16n8k16 fragment of the kept values [16][16], B the dense [32][8] fragment (register
// j: k = 2 (l % 4) + 8 j + 0, 1), the metadata of row g from lanes 4 g and 4 g + 1 (k 0..15
// and 16..31; rows g + 8 in the high halves): in each group of 4 along k, the 2-bit slots of
// its 4-bit field place the group's two kept values.
template <class C>
inline void tw_emulate_mma_sp(C* c, const unsigned* a, const unsigned* b, unsigned e, int code) {
  unsigned t = tw_slot_base + threadIdx.x, base = t / 32 * 32;
  for (int i = 0; i < 4; ++i) tw_mma_exchange[t][i] = a[i];
  for (int i = 0; i < 4; ++i) tw_mma_exchange[t][4 + i] = b[i];
  tw_mma_exchange[t][8] = e;
  tw_warp_sync();
  float V[16][16], A[16][32] = {}, B[32][8];
  unsigned meta[16] = {};
  for (int l = 0; l < 32; ++l) {
    const unsigned* r = tw_mma_exchange[base + l];
    int g = l >> 2, q = (l & 3) * 2;
    for (int x = 0; x < 2; ++x) {
      auto at = [&](int reg) { return tw_mma_element((r[reg] >> (16 * x)) & 0xffffu, code); };
      V[g][q + x] = at(0);
      V[g + 8][q + x] = at(1);
      V[g][q + 8 + x] = at(2);
      V[g + 8][q + 8 + x] = at(3);
      for (int j = 0; j < 4; ++j) B[q + 8 * j + x][g] = at(4 + j);
    }
    if ((l & 3) < 2) {
      meta[g] |= (r[8] & 0xffffu) << (16 * (l & 1));
      meta[g + 8] |= (r[8] >> 16) << (16 * (l & 1));
    }
  }
  tw_warp_sync();
  for (int row = 0; row < 16; ++row)
    for (int kk = 0; kk < 16; ++kk) {
      int group = kk / 2, slot = (meta[row] >> (4 * group + 2 * (kk % 2))) & 3;
      A[row][4 * group + slot] += V[row][kk];
    }
  int lane = t % 32, g = lane >> 2, q = (lane & 3) * 2;
  int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {q, q + 1, q, q + 1};
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 32; ++k) c[i] += (C)(A[rows[i]][k] * B[k][cols[i]]);
}
// ldmatrix.m8n8.x{num}[.trans] across the calling warp: lane l gave the address of row l % 8
// of matrix l / 8; register j gets matrix j, (row l / 4, columns 2 (l % 4) + 0, 1), or with
// trans (rows 2 (l % 4) + 0, 1, column l / 4)
const void* tw_ldsm_rows[TW_MAX_CLUSTER * 1024];
inline void tw_emulate_ldmatrix(unsigned* d, const void* row, int num, bool trans) {
  unsigned t = tw_slot_base + threadIdx.x, base = t / 32 * 32, lane = t % 32;
  tw_ldsm_rows[t] = row;
  tw_warp_sync();
  for (int j = 0; j < num; ++j) {
    const unsigned short* const* rows = (const unsigned short* const*)&tw_ldsm_rows[base + 8 * j];
    unsigned lo, hi;
    if (trans) {
      lo = rows[(lane % 4) * 2][lane / 4];
      hi = rows[(lane % 4) * 2 + 1][lane / 4];
    } else {
      lo = rows[lane / 4][(lane % 4) * 2];
      hi = rows[lane / 4][(lane % 4) * 2 + 1];
    }
    d[j] = lo | (hi << 16);
  }
  tw_warp_sync();
}
inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }
struct tw_ptr { void* p; template <class T> operator T*() const { return (T*)p; } };
// Runs every block of a grid: one cluster at a time, each of its threads a fiber on a stack
// of its own (the stacks kept for the whole grid; a guard page below each).
constexpr size_t TW_FIBER_STACK = 1 << 20, TW_PAGE = 4096;
void (*tw_body)(void**, long long*);
void** tw_body_ptrs;
long long* tw_body_ints;
inline void tw_fiber_main() {
  tw_progress();
  tw_body(tw_body_ptrs, tw_body_ints);
  tw_emu_bulk_flush();
  tw_progress();
  tw_fibers[tw_fiber_now].done = true;
  if (--tw_fibers_left == 0) setcontext(&tw_launcher_context);
  int next = tw_next_fiber();
  tw_enter(next);
  setcontext(&tw_fibers[next].context);
}
inline int tw_run_grid(int gx, int gy, int gz, int bx, int by, int bz, int cluster,
                       void (*body)(void**, long long*), void** ptrs, long long* ints) {
  gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
  blockDim = {(unsigned)bx, (unsigned)by, (unsigned)bz};
  int threads = bx * by * bz;
  tw_block_threads = threads;
  tw_bad_shuffle = false;
  tw_body = body;
  tw_body_ptrs = ptrs;
  tw_body_ints = ints;
  int n = threads * cluster;
  size_t each = TW_FIBER_STACK + TW_PAGE;
  char* stacks = (char*)mmap(nullptr, each * n, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) { std::perror("tw emulation: fiber stacks"); std::abort(); }
  for (int i = 0; i < n; ++i) mprotect(stacks + i * each, TW_PAGE, PROT_NONE);
  std::vector<tw_fiber> fibers(n);
  tw_fibers = fibers.data();
  tw_fiber_count = n;
  for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y)
  for (int x0 = 0; x0 < gx; x0 += cluster) {
    ++tw_block_epoch;
    tw_cluster_barrier_sync = tw_sync(n);
    tw_mbars.clear();
    tw_named.clear();
    tw_lane_syncs.clear();
    for (tw_sync& s : tw_wgmma_warp_syncs) s = tw_sync(32);
    tw_idle_turns = 0;
    for (int r = 0; r < cluster; ++r) {
      tw_cta_smem[r] = tw_smem_pool[r];
      std::memset(tw_smem_pool[r], 0xff, sizeof(tw_smem_pool[r]));  // poison: NaN for floats
      tw_block_sync[r] = tw_sync(threads);
      for (int w = 0; w * 32 < threads; ++w)
        tw_warp_syncs[r][w] = tw_sync(std::min(32, threads - 32 * w));
    }
    for (int i = 0; i < n; ++i) {
      tw_fiber& f = fibers[i];
      f.thread = {(unsigned)(i % threads % bx), (unsigned)(i % threads / bx % by),
                  (unsigned)(i % threads / (bx * by))};
      f.rank = i / threads;
      f.block = {(unsigned)x0 + f.rank, (unsigned)y, (unsigned)z};
      f.done = false;
      f.open.clear();
      f.groups.clear();
      f.open_stores.clear();
      f.store_groups.clear();
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = stacks + i * each + TW_PAGE;
      f.context.uc_stack.ss_size = TW_FIBER_STACK;
      f.context.uc_link = nullptr;
      makecontext(&f.context, tw_fiber_main, 0);
    }
    tw_fibers_left = n;
    tw_deadlock = false;
    tw_enter(0);
    swapcontext(&tw_launcher_context, &fibers[0].context);
    if (tw_deadlock) { munmap(stacks, each * n); return 1; }
  }
  munmap(stacks, each * n);
  return tw_bad_shuffle ? 2 : 0;
}
"""

LAUNCHER = r"""
extern "C" int LAUNCH(void** ptrs, long long* ints, int gx, int gy, int gz, int bx, int by,
                         int bz, int cluster) {
  return tw_run_grid(gx, gy, gz, bx, by, bz, cluster,
              [](void** ptrs, long long* ints) { KERNEL(ARGS); }, ptrs, ints);
}
"""


class _TensorMap(ctypes.Structure):
    """The emulation's stand-in for a CUtensorMap (``tw_tensormap`` under TW_HOST_EMULATION)."""

    _fields_ = [("base", ctypes.c_void_p), ("rank", ctypes.c_longlong),
                ("elem_bytes", ctypes.c_longlong), ("swizzle", ctypes.c_longlong),
                ("dims", ctypes.c_longlong * 5), ("strides", ctypes.c_longlong * 5),
                ("box", ctypes.c_longlong * 5)]

    @classmethod
    def of(cls, p: dict, tensor):
        from tilewright.runtime.cuda import tensor_map_layout

        dims, strides = tensor_map_layout(p, tensor)
        m = cls(tensor.data_ptr(), p["rank"], tensor.element_size(), p["swizzle"])
        for i in range(p["rank"]):
            m.dims[i], m.strides[i], m.box[i] = dims[i], strides[i], p["box"][i]
        return m


def available() -> str | None:
    """None when g++ with C++20 is here, else the reason."""
    return None if shutil.which("g++") else "g++ is not on PATH"


FLAGS = ["-std=c++20", "-O1", "-fPIC", "-pthread", "-w", "-I/usr/local/cuda/include"]
SHIM_HEADER = "tw_emu_shim.h"


def _compile(cmd: list[str], output: Path) -> None:
    """Run the g++ command ``cmd`` writing to a temporary name, then move its result onto
    ``output`` (two processes building the same file at once both leave a whole one)."""
    fd, partial = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
    os.close(fd)
    try:
        result = subprocess.run([*cmd, "-o", partial], capture_output=True, text=True,
                                check=False)
        if result.returncode:
            raise RuntimeError(f"host emulation build failed: {' '.join(cmd)}\n"
                               f"{result.stderr[-3000:]}")
        os.replace(partial, output)
    finally:
        Path(partial).unlink(missing_ok=True)


_shared: list[Path] = []  # the folder set by share_builds, if any


def share_builds(folder: Path) -> None:
    """Keep the precompiled shim and every kernel's library in ``folder`` from now on,
    shared by the processes that name the same folder (a test run's workers): a kernel built
    once is loaded by every later test that runs the same source."""
    folder.mkdir(parents=True, exist_ok=True)
    _shared[:] = [folder]
    shim_dir.cache_clear()


@functools.cache
def _digest_of_tools() -> str:
    """What else goes into a build: the shim, the flags and the compiler's version."""
    version = subprocess.run(["g++", "--version"], capture_output=True, text=True,
                             check=False).stdout
    return hashlib.sha256("\0".join([SHIM, *FLAGS, version]).encode()).hexdigest()


@functools.cache
def shim_dir() -> Path:
    """The folder holding the shim as a header and its precompiled form (built with the
    kernels' flags, so g++ uses it): in the shared folder, named by the digest of the shim,
    the flags and g++, else one of this process, removed at exit."""
    if _shared:
        path = _shared[0] / f"shim-{_digest_of_tools()[:12]}"
        path.mkdir(exist_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="tw-hostemu-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    header = path / SHIM_HEADER
    pch = path / f"{SHIM_HEADER}.gch"
    with filelock.FileLock(path / "build.lock"):
        if not pch.exists():
            header.write_text(SHIM)
            _compile(["g++", *FLAGS, "-x", "c++-header", str(header)], pch)
    return path


def _launcher(kernel: dict, name: str) -> str:
    """The host function ``name`` running every block of ``kernel`` (a launch description)."""
    args = []
    for n, p in enumerate(kernel["params"]):
        if p["kind"] == "tensormap":  # the host struct of include/tw_hopper.h
            args.append(f"*(const tw_tensormap*)ptrs[{n}]")
            continue
        pointer = p["kind"] in ("tensor", "workspace") or p.get("dtype") == "handle"
        floating = p.get("dtype", "").startswith("float")  # its bits as a double's
        args.append(f"tw_ptr{{ptrs[{n}]}}" if pointer else
                    f"*(double*)&ints[{n}]" if floating else f"ints[{n}]")
    return LAUNCHER.replace("LAUNCH", name).replace("KERNEL", kernel["entry"]).replace(
        "ARGS", ", ".join(args))


def _launchers(launch: dict) -> list[tuple[dict, str]]:
    """(kernel, host launcher name) of each kernel ``launch`` runs, in order: ``tw_launch``
    for a single kernel, ``tw_launch_<i>`` for the blocks of a kernel sequence."""
    kernels = kernels_of(launch)
    if len(kernels) == 1 and "kernels" not in launch:
        return [(launch, "tw_launch")]
    return [(k, f"tw_launch_{i}") for i, k in enumerate(kernels)]


def build(source: str, launch: dict, workdir: Path) -> ctypes.CDLL:
    source = re.sub(r"extern __shared__[^;]*\btw_smem_ptr\[\];", "", source)  # the shim's
    text = source + "".join(_launcher(k, name) for k, name in _launchers(launch))
    digest = hashlib.sha256((_digest_of_tools() + text).encode()).hexdigest()[:16]
    folder = _shared[0] if _shared else Path(workdir)
    lib = folder / f"emu-{digest}.so"
    if not lib.exists():
        with filelock.FileLock(folder / f"emu-{digest}.lock"):
            if not lib.exists():
                src = folder / f"emu-{digest}.cpp"
                src.write_text(f'#include "{SHIM_HEADER}"\n{text}')
                _compile(["g++", *FLAGS, "-shared", "-I", str(shim_dir()), str(src)], lib)
    return ctypes.CDLL(str(lib))


def run_script(script: str, source: str, launch: dict, workdir: Path,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``script`` (Python text; ``{tests}`` stands for this folder) in a process of its own,
    with argv the paths of ``source`` and ``launch`` written into ``workdir`` and ``workdir``:
    for a run that may abort its process (the emulation's wgmma checks)."""
    (workdir / "k.cu").write_text(source)
    (workdir / "launch.json").write_text(json.dumps(launch))
    code = script.format(tests=str(Path(__file__).resolve().parent))
    return subprocess.run([sys.executable, "-c", code, str(workdir / "k.cu"),
                           str(workdir / "launch.json"), str(workdir)], capture_output=True,
                          text=True, timeout=timeout, check=False)


def run(source: str, launch: dict, workdir: Path, *args) -> None:
    """Launch the kernel on ``args`` (every kernel parameter: torch CPU tensors, ints or
    floats); a kernel sequence's blocks one after another, on workspaces allocated for the
    call. The GPU's workspaces are uninitialised (``torch.empty``); here every byte is 0xFF
    (a float NaN, an integer -1), so a read of an element nobody wrote shows in the
    results."""
    import torch

    lib = build(source, launch, workdir)
    symbols = symbol_values(launch["symbols"], args)
    spaces = [torch.full((max(1, _eval(w["bytes"], symbols)),), 255, dtype=torch.uint8)
              for w in launch.get("workspaces", ())]
    for kernel, name in _launchers(launch):
        _run_kernel(getattr(lib, name), kernel, symbols, spaces, args)


def _eval(expr: str, symbols: dict) -> int:
    return int(eval(expr, {"min": min, "max": max}, symbols))


def _run_kernel(launcher, kernel: dict, symbols: dict, spaces: list, args) -> None:
    n = len(kernel["params"])
    ptrs, ints = (ctypes.c_void_p * n)(), (ctypes.c_longlong * n)()
    maps = []  # TMA descriptors as the emulation's host structs, alive for the launch
    for i, p in enumerate(kernel["params"]):
        if p["kind"] == "tensor":
            ptrs[i] = args[p["param"]].data_ptr()
        elif p["kind"] == "workspace":
            ptrs[i] = spaces[p["workspace"]].data_ptr()
        elif p["kind"] == "tensormap":
            maps.append(_TensorMap.of(p, args[p["param"]]))
            ptrs[i] = ctypes.addressof(maps[-1])
        elif p["kind"] == "scalar" and p["dtype"] == "handle":  # a T.ptr address
            arg = args[p["param"]]
            ptrs[i] = arg.data_ptr() if hasattr(arg, "data_ptr") else int(arg)
        elif p["kind"] == "scalar" and p["dtype"].startswith("float"):
            ints[i] = struct.unpack("<q", struct.pack("<d", float(args[p["param"]])))[0]
        elif p["kind"] == "scalar":
            ints[i] = int(args[p["param"]])
        else:
            ints[i] = symbols[p["name"]]
    grid = [_eval(g, symbols) for g in kernel["grid"]]
    if min(grid) <= 0:
        return
    cluster = [int(c) for c in kernel.get("cluster_dims") or (1, 1, 1)]
    if kernel.get("cooperative"):  # T.sync_grid: every block at once, as one cluster
        if grid[1:] != [1, 1] or grid[0] > 8:
            raise RuntimeError(f"host emulation runs a cooperative kernel (T.sync_grid) with "
                               f"all its blocks at once, up to 8 along x; got grid {grid}")
        cluster = [grid[0], 1, 1]
    if cluster[1:] != [1, 1] or not 1 <= cluster[0] <= 8 or grid[0] % cluster[0]:
        raise RuntimeError(f"host emulation runs clusters of up to 8 blocks along x whose "
                           f"count divides the grid; got cluster {cluster}, grid {grid}")
    failed = launcher(ptrs, ints, *grid, *(int(b) for b in kernel["block"]), cluster[0])
    if failed == 1:
        raise RuntimeError(f"host emulation: every thread of a block of {kernel['entry']} waits "
                           f"for another (a deadlock: a barrier that not every thread reaches?)")
    if failed:
        raise RuntimeError(f"host emulation: a warp shuffle of {kernel['entry']} names lanes "
                           f"that do not exist or leaves out the calling lane (undefined on "
                           f"the GPU)")


def run_case(case, target: str, workdir: Path) -> str:
    """A conformance case (``tilewright_sdk.conformance.catalogue.Case``) lowered for the CUDA
    ``target`` and run here; every output is compared with the case's float64 reference under
    the suite's tolerance (exactly for an exact row, within the row's ``approximate`` error
    where that is looser). Outputs start as NaN (-1 for integers), so an element the kernel
    leaves unwritten fails. Returns the generated source."""
    import tilewright
    import torch
    from tilewright.testing import assert_close, tolerance

    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, target)
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    expected = case.reference(inputs)
    outputs = {i % len(func.params) for i in case.kernel.out_idx}
    given, args, results = iter(copy_argument(torch, t) for t in inputs), [], []
    for i, param in enumerate(func.params):
        if i in outputs:
            dtype = getattr(torch, str(param.dtype))
            fill = float("nan") if dtype.is_floating_point else -1
            results.append(torch.full([int(s) for s in param.shape], fill, dtype=dtype))
            args.append(results[-1])
        else:
            args.append(next(given))
    run(lowered.source.text, lowered.source.payload, workdir, *args)
    results += [args[i] for i in case.kernel.inplace]
    for n, (got, want) in enumerate(zip(results, expected, strict=True)):
        dtype, length = str(got.dtype), case.kernel.reduction(**case.dims)
        given_tolerance = {}
        if case.kernel.exact:
            given_tolerance = {"rtol": 0.0, "atol": 0.0, "max_mismatch_ratio": 0.0}
        elif case.kernel.approximate:
            loose = max(case.kernel.approximate,
                        tolerance(dtype, reduction_length=length).rtol)
            given_tolerance = {"rtol": loose, "atol": loose}
        assert_close(got, want, dtype=dtype, reduction_length=length,
                     name=f"{case.id} output {n}", **given_tolerance)
    return lowered.source.text
