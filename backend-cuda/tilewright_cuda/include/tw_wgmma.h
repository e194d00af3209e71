// tilewright wgmma GEMM (sm_90a): acc += A B with A and B swizzled tiles in shared memory
// (tilewright_cuda/layout.py) read through wgmma matrix descriptors.
//
// TY names the operand type (tw_wgmma_type, numbered as include/tw_mma.h's mma_kind codes):
// fp16 and bf16 take m64nNk16 steps, int8, fp8 e4m3 and e5m2 m64nNk32 ones; a step spans 32
// bytes of K either way, so descriptors and offsets are the same in bytes. int8 accumulates
// into int32 (.s32.s8.s8), every other form into float32 (tw_wgmma_acc<TY>::type).
//
// tw_gemm_wgmma<N, K, NC, TY, B_MN, RA, WA, RB, WB>(A, B, acc, wg): warpgroup wg (128
// threads) issues rows 64 wg .. 64 wg + 63 of an M x N tile as wgmma.m64nNCkKS steps, one
// committed group; the caller retires it with tw_wgmma_wait<N>() before reading acc: A is
// [RA, K] (K-major), B is [RB = K, N] (MN-major, B_MN: 16-bit types only, the 8-bit forms have
// no transpose) or [RB = N, K] (K-major); WA, WB are the tiles' column-block widths in bytes.
// scale_d 0 (a run-time clear_accum) makes the first k step of each N chunk D = A B, dropping
// what acc held (the instruction's scale-d predicate); 1 accumulates.
// acc holds NC / 2 accumulators per N chunk in the PTX m64nNk16 D layout (m64nNk32's is the same),
// which is the (warps x 1) warp grid of the "local.mma_acc" layout.
// Descriptor: start >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte offset
// >> 4 (32-45), swizzle mode (62-63: 1 = 128 B, 2 = 64 B, 3 = 32 B). K-major: SBO = 8 rows x
// W, LBO unused (16); MN-major: SBO = 8 K-rows x W, LBO = one column block (RB x W).
//
// tw_gemm_wgmma_rs<N, K, NC, TY, B_MN, RB, WB>(A, B, acc, wg): the same with A in registers
// (wgmma's register-A form, 16-bit types): A is this thread's K / 2 halves (fp16 or bf16)
// of its warpgroup's 64 x K rows in the m64nKk16 D layout (register i: row 16 warp + lane / 4
// + 8 ((i % 4) / 2), column 8 (i / 4) + 2 (lane % 4) + i % 2), which for every k16 step
// (registers 8 s .. 8 s + 7, as four .b32 pairs) is the PTX m64k16 A fragment layout. A fp32
// accumulator of that layout rounded pairwise to 16 bits is such an A (FlashAttention's P).
//
// tw_gemm_wgmma_sp<N, K, NC, TY, B_MN, RA, WA, RB, WB, LDE>(A, B, acc, wg, E): 2:4 sparse A
// (T.gemm_sp, 16-bit types): wgmma.mma_async.sp m64nNCk32 steps. A is the kept values, [RA,
// K / 2] (K-major): a step's 64 x 16 values are read through a descriptor exactly as a dense
// k16 step's A; B is as above, 32 deep a step. Each warp gives the metadata of its 16 rows
// (PTX ISA: warp w % 4 covers rows 16 w .. 16 w + 15), laid out as mma.sp m16n8k32's
// (tw_sparse_meta, sparsity selector 0), read from E's rows of LDE bytes. K counts dense
// columns. The metadata registers are the helper's own, dead once it returns, so its group
// must retire before the code after it runs (wait_group 0).
//
// tw_gemm_wgmma_sp_kept<...>(A, B, acc, wg, E, even, odd, parity): the same with the
// metadata in registers of the caller's, K / 32 of them in `even` (parity 0) or `odd`
// (parity 1), so that a pipelined loop can leave one group in flight (wait_group 1):
// consecutive k-tiles alternate the parity, and tw_wgmma_keep<K / 32>(even, odd) after each
// wait keeps both sets live, so ptxas cannot hand a register to other code while a wgmma.sp
// in flight still reads it (an HGMMA.SP reads its metadata register until it retires; the
// H200 gave 28% wrong elements at 8192^3 when ptxas reused it under a group in flight). Each
// set is written only in its own parity's branch, after the wait that retired the group
// which read it two k-tiles before.
#ifndef TW_WGMMA_H
#define TW_WGMMA_H

enum tw_wgmma_type {
  TW_WGMMA_F16 = 0, TW_WGMMA_BF16 = 1, TW_WGMMA_S8 = 2, TW_WGMMA_E4M3 = 3, TW_WGMMA_E5M2 = 4
};
// bytes per element of a wgmma operand type
__host__ __device__ constexpr int tw_wgmma_bytes(int ty) { return ty >= TW_WGMMA_S8 ? 1 : 2; }
// the accumulator type of a wgmma operand type
template <int TY> struct tw_wgmma_acc { using type = float; };
template <> struct tw_wgmma_acc<TW_WGMMA_S8> { using type = int; };

__host__ __device__ inline unsigned long long tw_wgmma_desc(unsigned addr, unsigned lbo,
                                                            unsigned sbo, int width) {
  unsigned long long mode = width == 128 ? 1 : width == 64 ? 2 : 3;
  return (unsigned long long)((addr & 0x3FFFF) >> 4) |
         ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (mode << 62);
}
// The descriptor of the operand `bytes` (a multiple of 16) past the one `desc` describes:
// the start field alone grows, in the low word (a shared address stays below 256 KB, so the
// 14-bit field does not carry). Built once per tile, a step's descriptor is then one integer
// add of a constant, where tw_wgmma_desc of each step's address costs a mask, a shift and an
// or per wgmma.
__host__ __device__ __forceinline__ unsigned long long tw_wgmma_desc_add(unsigned long long desc,
                                                                         unsigned bytes) {
#if defined(__CUDA_ARCH__)
  // the two words apart and back through mov.b64, so that the compiler cannot fold the add into
  // a 64-bit one (an add with carry and an or of the high word per wgmma)
  unsigned lo, hi;
  asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(desc));
  unsigned long long out;
  asm("mov.b64 %0, {%1, %2};" : "=l"(out) : "r"(lo + (bytes >> 4)), "r"(hi));
  return out;
#else
  return (desc & 0xFFFFFFFF00000000ull) | (unsigned)((unsigned)desc + (bytes >> 4));
#endif
}
// The descriptor of the B block at k0 = n0 = 0 of a swizzled [RB, ...] tile of WB-byte column
// blocks (layout.py) at b0, stored N-major (B_MN, rows are k) or K-major (rows are n); and the
// block at (k0, n0), of EB-byte elements, as a byte offset from it.
template <bool B_MN, int RB, int WB>
__host__ __device__ inline unsigned long long tw_wgmma_b_desc0(unsigned b0) {
  return B_MN ? tw_wgmma_desc(b0, RB * WB, 8 * WB, WB) : tw_wgmma_desc(b0, 16, 8 * WB, WB);
}
template <bool B_MN, int RB, int WB, int EB>
__host__ __device__ constexpr unsigned tw_wgmma_b_offset(int k0, int n0) {
  return B_MN ? (n0 * EB / WB) * RB * WB + k0 * WB
              : (k0 * EB / WB) * RB * WB + n0 * WB + (k0 * EB % WB);
}

// one wgmma of type TY over NC columns (the m64nNCk16 or m64nNCk32 step)
// (scale_d: the instruction's scale-d predicate, 0 for D = A B, else D = A B + D)
template <int NC, int TY, bool B_MN>
__device__ inline void tw_wgmma_step(typename tw_wgmma_acc<TY>::type* d, unsigned long long da,
                                     unsigned long long db, int scale_d);
template <int NC, int TY, bool B_MN>
__device__ inline void tw_wgmma_step_rs(typename tw_wgmma_acc<TY>::type* d, const unsigned* a,
                                        unsigned long long db, int scale_d);
template <int NC, int TY, bool B_MN>
__device__ inline void tw_wgmma_step_sp(float* d, unsigned long long da, unsigned long long db,
                                        unsigned e, int scale_d);

#ifndef TW_HOST_EMULATION
__device__ __forceinline__ void tw_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tw_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// at most N committed wgmma groups of this warpgroup still in flight
template <int N>
__device__ __forceinline__ void tw_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// no code: the kept form's bookkeeping is the host emulation's
__device__ __forceinline__ void tw_wgmma_hold_meta(const unsigned*) {}
// the metadata registers of tw_gemm_wgmma_sp_kept (R a parity) live up to here
template <int R>
__device__ __forceinline__ void tw_wgmma_keep(const unsigned* even, const unsigned* odd) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" ::"r"(even[i]), "r"(odd[i]));
}
// v, the same in every lane of the warp (the warpgroup index), as ptxas can prove it: a
// broadcast from lane 0 (what CUTLASS's canonical_warp_group_idx does), so that the descriptor
// arithmetic built on it runs once per warp on the uniform datapath, not per thread with an
// R2UR to move each descriptor word across
__device__ __forceinline__ int tw_warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }
#else
inline int tw_warp_uniform(int v) { return v; }
inline unsigned tw_smem_u32(const void* p) {
  return (unsigned)((const unsigned char*)p - tw_smem_ptr);
}
inline void tw_wgmma_fence() {}
// the operand a descriptor describes, decoded from the descriptor alone: at(row, col) reads
// its element (row, col)
struct tw_wgmma_operand {
  long long start, lbo, sbo;
  int width, eb, ty;
  bool mn_major;
  tw_wgmma_operand(unsigned long long desc, bool mn_major, int ty)
      : start((long long)(desc & 0x3FFF) << 4), lbo((long long)((desc >> 16) & 0x3FFF) << 4),
        sbo((long long)((desc >> 32) & 0x3FFF) << 4),
        width((desc >> 62) == 1 ? 128 : (desc >> 62) == 2 ? 64 : 32), eb(tw_wgmma_bytes(ty)),
        ty(ty), mn_major(mn_major) {}
  __attribute__((always_inline)) float at(int row, int col) const {
    long long o;
    if (!mn_major) {  // (row: M or N, col: K): 8-row groups SBO apart, rows `width` apart
      o = start + (row / 8) * sbo + (row % 8) * width + col * eb;
    } else {  // (row: K, col: N): column blocks LBO apart, 8 K-row groups SBO apart
      int per = width / eb;
      o = start + (col / per) * lbo + (row / 8) * sbo + (row % 8) * width + (col % per) * eb;
    }
    const unsigned char* e = tw_smem_ptr + tw_swizzled(o, width);  // little-endian
    return tw_mma_element(eb == 1 ? e[0] : e[0] | e[1] << 8, ty);
  }
};
// wgmma is asynchronous: an instruction may read shared memory at any time until the
// wait_group that retires its group. The emulation computes each instruction's products when
// it is issued and again when it is retired, adds them to the accumulators at retirement,
// and aborts when the two differ: shared memory under a wgmma in flight was overwritten.
// A wgmma.sp reads its metadata register until it retires too: tw_gemm_wgmma_sp loads that
// register itself, so it dies when the gemm returns, and a wait that leaves a group holding
// such a wgmma.sp in flight aborts (on the GPU the next code reuses the register under it);
// tw_gemm_wgmma_sp_kept's registers are the caller's, and retirement aborts when one was
// overwritten before the wait (as for register A).
// Products are summed in float: exact for int8 (32 products of at most 2^14 each).
struct tw_wgmma_op {
  void* d;  // float*, int* for TW_WGMMA_S8
  unsigned long long da, db;
  int nc, ty;
  bool b_mn;
  std::vector<float> issued;
  int scale_d = 1;                 // 0: the products replace the accumulators at retirement
  bool sparse = false;             // wgmma.sp: A holds kept values, meta picks their k
  unsigned meta[2] = {};           // ... for the thread's rows g and g + 8 of its warp
  const unsigned* meta_reg = nullptr;  // ... the caller's metadata register (the kept form)
  unsigned meta_held = 0;              // ... as issued
  const unsigned* regs = nullptr;  // register-A form: this thread's four A registers
  unsigned held[4] = {};           // ... as issued (they must not change until retirement)
  float a[2][16] = {};             // ... and the thread's two rows of A, from its quad's lanes
};
inline std::vector<float> tw_wgmma_products(const tw_wgmma_op& op) {
  // the thread's outputs: rows r0 and r0 + 8, columns 8 j + 2 (lane % 4) + {0, 1}; each
  // operand element is decoded once (A of the two rows, B of the nc / 4 columns)
  int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, r0 = 16 * warp + lane / 4;
  const int K = 32 / tw_wgmma_bytes(op.ty), KB = op.sparse ? 32 : K;
  float a[2][32], b[64][32];
  const tw_wgmma_operand da(op.da, false, op.ty), db(op.db, op.b_mn, op.ty);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < (op.sparse ? 16 : K); ++k)
      a[r][k] = op.regs ? op.a[r][k] : da.at(r0 + 8 * r, k);
  for (int c = 0; c < op.nc / 4; ++c) {
    int col = (c / 2) * 8 + 2 * (lane % 4) + c % 2;
    for (int k = 0; k < KB; ++k) b[c][k] = op.b_mn ? db.at(k, col) : db.at(col, k);
  }
  std::vector<float> out(op.nc / 2);
  for (int i = 0; i < op.nc / 2; ++i) {
    const float* ar = a[(i % 4) / 2];
    const float* bc = b[(i / 4) * 2 + i % 2];
    float s = 0;
    if (op.sparse) {  // value v of a group of 2 sits at k 4 (v / 2) + its 2-bit index
      for (int v = 0; v < 16; ++v)
        s += ar[v] * bc[4 * (v / 2) + ((op.meta[(i % 4) / 2] >> (2 * v)) & 3)];
    } else {
      for (int k = 0; k < K; ++k) s += ar[k] * bc[k];
    }
    out[i] = s;
  }
  return out;
}
// each thread's wgmmas: issued, not committed; committed, in flight (`static`: the kernel
// library's own, fresh in each cluster by the library's tw_block_epoch; an `inline` variable
// would be one symbol shared by every library loaded, with another library's epochs)
static tw_per_thread<std::vector<tw_wgmma_op>> tw_wgmma_open;
static tw_per_thread<std::vector<std::vector<tw_wgmma_op>>> tw_wgmma_groups;
template <int NC, int TY, bool B_MN>
inline void tw_wgmma_step(typename tw_wgmma_acc<TY>::type* d, unsigned long long da,
                          unsigned long long db, int scale_d) {
  tw_wgmma_op op{d, da, db, NC, TY, B_MN, {}};
  op.scale_d = scale_d;
  op.issued = tw_wgmma_products(op);
  tw_wgmma_open.get().push_back(std::move(op));
}
// The register-A form: A is spread over the warp's lanes (lane l holds rows l / 4 and
// l / 4 + 8, columns 2 (l % 4) + {0, 1, 8, 9}), so each thread gathers its two rows from the
// four lanes of its quad through memory between two barriers of its warp (wgmma is issued by
// whole warpgroups; other warps, a producer role's say, need not take part).
inline unsigned tw_wgmma_a_exchange[TW_MAX_CLUSTER * 1024][4];
inline tw_sync& tw_wgmma_warp_barrier() {  // the shim's, fresh in each cluster
  return tw_wgmma_warp_syncs[(tw_slot_base + threadIdx.x) / 32];
}
template <int NC, int TY, bool B_MN>
inline void tw_wgmma_step_rs(typename tw_wgmma_acc<TY>::type* d, const unsigned* a,
                             unsigned long long db, int scale_d) {
  tw_wgmma_op op{d, 0, db, NC, TY, B_MN, {}};
  op.scale_d = scale_d;
  op.regs = a;
  unsigned t = tw_slot_base + threadIdx.x, quad = t / 4 * 4;
  for (int r = 0; r < 4; ++r) op.held[r] = tw_wgmma_a_exchange[t][r] = a[r];
  tw_wgmma_warp_barrier().arrive_and_wait();
  for (int l = 0; l < 4; ++l)
    for (int r = 0; r < 4; ++r)  // register r: row + 8 (r % 2), columns 2 l + 8 (r / 2) + h
      for (int h = 0; h < 2; ++h)
        op.a[r % 2][2 * l + 8 * (r / 2) + h] =
            tw_mma_element((tw_wgmma_a_exchange[quad + l][r] >> (16 * h)) & 0xffff, TY);
  tw_wgmma_warp_barrier().arrive_and_wait();
  op.issued = tw_wgmma_products(op);
  tw_wgmma_open.get().push_back(std::move(op));
}
// The sparse form: each thread gathers the metadata of its rows g and g + 8 from lanes 4 g
// and 4 g + 1 of its warp (selector 0: low halves row g, high halves row g + 8, lane 4 g + h
// holding k 16 h .. 16 h + 15), through memory between two barriers of its warp.
template <int NC, int TY, bool B_MN>
inline void tw_wgmma_step_sp(float* d, unsigned long long da, unsigned long long db,
                             unsigned e, int scale_d) {
  tw_wgmma_op op{d, da, db, NC, TY, B_MN, {}};
  op.scale_d = scale_d;
  op.sparse = true;
  unsigned t = tw_slot_base + threadIdx.x, quad = t / 4 * 4;
  tw_wgmma_a_exchange[t][0] = e;
  tw_wgmma_warp_barrier().arrive_and_wait();
  for (int h = 0; h < 2; ++h) {
    unsigned word = tw_wgmma_a_exchange[quad + h][0];
    op.meta[0] |= (word & 0xffffu) << (16 * h);
    op.meta[1] |= (word >> 16) << (16 * h);
  }
  tw_wgmma_warp_barrier().arrive_and_wait();
  op.issued = tw_wgmma_products(op);
  tw_wgmma_open.get().push_back(std::move(op));
}
// the kept form: the wgmma.sp just issued reads the caller's register `reg` until it retires
inline void tw_wgmma_hold_meta(const unsigned* reg) {
  tw_wgmma_op& op = tw_wgmma_open.get().back();
  op.meta_reg = reg;
  op.meta_held = *reg;
}
template <int R>
inline void tw_wgmma_keep(const unsigned*, const unsigned*) {}
inline void tw_wgmma_commit() {
  tw_wgmma_groups.get().push_back(std::move(tw_wgmma_open.get()));
  tw_wgmma_open.get().clear();
}
template <int N>
inline void tw_wgmma_wait() {
  tw_yield();  // the other threads run while the groups are in flight (a refill shows here)
  std::vector<std::vector<tw_wgmma_op>>& groups = tw_wgmma_groups.get();
  while (groups.size() > (size_t)N) {
    for (auto& op : groups.front()) {
      std::vector<float> now = tw_wgmma_products(op);
      if (std::memcmp(now.data(), op.issued.data(), now.size() * sizeof(float)) != 0) {
        std::printf("tw emulation: block (%u, %u, %u) thread %u: shared memory read by a wgmma "
                    "in flight was overwritten before its wait_group\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        __trap();
      }
      if (op.meta_reg && *op.meta_reg != op.meta_held) {
        std::printf("tw emulation: block (%u, %u, %u) thread %u: the metadata register read by "
                    "a wgmma.sp in flight was overwritten before its wait_group\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        __trap();
      }
      if (op.regs && std::memcmp(op.regs, op.held, sizeof(op.held)) != 0) {
        std::printf("tw emulation: block (%u, %u, %u) thread %u: A registers read by a wgmma "
                    "in flight were overwritten before its wait_group\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        __trap();
      }
      for (size_t i = 0; i < now.size(); ++i) {
        if (op.ty == TW_WGMMA_S8) {
          int* d = static_cast<int*>(op.d);
          d[i] = (op.scale_d ? d[i] : 0) + (int)now[i];
        } else {
          float* d = static_cast<float*>(op.d);
          d[i] = (op.scale_d ? d[i] : 0.f) + now[i];
        }
      }
    }
    groups.erase(groups.begin());
  }
  for (auto& group : groups)
    for (auto& op : group)
      if (op.sparse && !op.meta_reg) {
        std::fprintf(stderr, "tw emulation: block (%u, %u, %u) thread %u: a wgmma.sp left in "
                     "flight "
                     "past tw_wgmma_wait<%d>: its metadata register is dead once "
                     "tw_gemm_wgmma_sp returns\n",
                     blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, N);
        __trap();
      }
}
#endif

template <int N, int K, int NC, int TY, bool B_MN, int RA, int WA, int RB, int WB>
__device__ __forceinline__ void tw_gemm_wgmma(const void* A, const void* B,
                                              typename tw_wgmma_acc<TY>::type* acc, int wg,
                                              int scale_d = 1) {
  constexpr int EB = tw_wgmma_bytes(TY), KS = 32 / EB;  // a step is 32 bytes of K
  static_assert(!B_MN || EB == 2, "the 8-bit wgmma forms read B K-major only");
  const unsigned long long da0 =
      tw_wgmma_desc(tw_smem_u32(A) + 64 * tw_warp_uniform(wg) * WA, 16, 8 * WA, WA);
  const unsigned long long db0 = tw_wgmma_b_desc0<B_MN, RB, WB>(tw_smem_u32(B));
  tw_wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += KS) {
    const unsigned long long da =
        tw_wgmma_desc_add(da0, (k0 * EB / WA) * RA * WA + (k0 * EB % WA));
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += NC) {
      const unsigned long long db =
          tw_wgmma_desc_add(db0, tw_wgmma_b_offset<B_MN, RB, WB, EB>(k0, n0));
      tw_wgmma_step<NC, TY, B_MN>(acc + n0 / 2, da, db, k0 == 0 ? scale_d : 1);
    }
  }
  tw_wgmma_commit();  // the gemm's own tw_wgmma_wait<0> (or <1> when pipelined) follows
}
// 2:4 sparse A (see the top): per k32 step the values' descriptor (16 values, 32 bytes of
// each row) and this warp's metadata register, then one wgmma.sp per N chunk.
template <int N, int K, int NC, int TY, bool B_MN, int RA, int WA, int RB, int WB, int LDE>
__device__ __forceinline__ void tw_gemm_wgmma_sp(const void* A, const void* B, float* acc, int wg,
                                                 const void* E, int scale_d = 1) {
  static_assert(tw_wgmma_bytes(TY) == 2, "sparse wgmma is lowered for 16-bit operands only");
  const unsigned long long da0 =
      tw_wgmma_desc(tw_smem_u32(A) + 64 * tw_warp_uniform(wg) * WA, 16, 8 * WA, WA);
  const unsigned long long db0 = tw_wgmma_b_desc0<B_MN, RB, WB>(tw_smem_u32(B));
  const int rows = 64 * wg + 16 * (threadIdx.x / 32 % 4);
  tw_wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 32) {
    // k0 / 2 values
    const unsigned long long da = tw_wgmma_desc_add(da0, (k0 / WA) * RA * WA + (k0 % WA));
    const unsigned e = tw_sparse_meta<LDE>(E, rows, k0);
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += NC) {
      const unsigned long long db =
          tw_wgmma_desc_add(db0, tw_wgmma_b_offset<B_MN, RB, WB, 2>(k0, n0));
      tw_wgmma_step_sp<NC, TY, B_MN>(acc + n0 / 2, da, db, e, k0 == 0 ? scale_d : 1);
    }
  }
  tw_wgmma_commit();
}
// the kept form's k-tile (see the top): metadata step k0 / 32 in e[k0 / 32], from the rows
// `meta` of E; da0 and db0 the k0 = 0 descriptors
template <int N, int K, int NC, int TY, bool B_MN, int RA, int WA, int RB, int WB, int LDE>
__device__ __forceinline__ void tw_gemm_wgmma_sp_into(unsigned long long da0,
                                                      unsigned long long db0, float* acc,
                                                      const void* E, int rows, unsigned* e,
                                                      int scale_d) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 32) e[k0 / 32] = tw_sparse_meta<LDE>(E, rows, k0);
  tw_wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 32) {
    const unsigned long long da = tw_wgmma_desc_add(da0, (k0 / WA) * RA * WA + (k0 % WA));
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += NC) {
      const unsigned long long db =
          tw_wgmma_desc_add(db0, tw_wgmma_b_offset<B_MN, RB, WB, 2>(k0, n0));
      tw_wgmma_step_sp<NC, TY, B_MN>(acc + n0 / 2, da, db, e[k0 / 32], k0 == 0 ? scale_d : 1);
      tw_wgmma_hold_meta(&e[k0 / 32]);
    }
  }
  tw_wgmma_commit();
}
template <int N, int K, int NC, int TY, bool B_MN, int RA, int WA, int RB, int WB, int LDE>
__device__ __forceinline__ void tw_gemm_wgmma_sp_kept(const void* A, const void* B, float* acc,
                                                      int wg, const void* E, unsigned* even,
                                                      unsigned* odd, int parity,
                                                      int scale_d = 1) {
  static_assert(tw_wgmma_bytes(TY) == 2, "sparse wgmma is lowered for 16-bit operands only");
  // the descriptors and metadata rows before the branch, where the loop around can hoist
  // what of them does not change
  const unsigned long long da0 =
      tw_wgmma_desc(tw_smem_u32(A) + 64 * tw_warp_uniform(wg) * WA, 16, 8 * WA, WA);
  const unsigned long long db0 = tw_wgmma_b_desc0<B_MN, RB, WB>(tw_smem_u32(B));
  const int rows = 64 * wg + 16 * (threadIdx.x / 32 % 4);
  // two calls, not one through a pointer chosen by parity: each set's registers then have
  // fixed names (a pointer chosen at run time would put them in local memory)
  if (parity)
    tw_gemm_wgmma_sp_into<N, K, NC, TY, B_MN, RA, WA, RB, WB, LDE>(da0, db0, acc, E, rows, odd,
                                                                   scale_d);
  else
    tw_gemm_wgmma_sp_into<N, K, NC, TY, B_MN, RA, WA, RB, WB, LDE>(da0, db0, acc, E, rows,
                                                                   even, scale_d);
}
// A in registers (see the top): no descriptor, no shared-memory fence for A; the wgmma.fence
// orders the ordinary instructions that wrote A (the convert) and acc before the wgmma reads.
template <int N, int K, int NC, int TY, bool B_MN, int RB, int WB, class T>
__device__ __forceinline__ void tw_gemm_wgmma_rs(const T* A, const void* B,
                                                 typename tw_wgmma_acc<TY>::type* acc, int wg,
                                                 int scale_d = 1) {
  static_assert(sizeof(T) == 2 && tw_wgmma_bytes(TY) == 2,
                "wgmma register A holds 16-bit elements");
  const unsigned* a = reinterpret_cast<const unsigned*>(A);
  const unsigned long long db0 = tw_wgmma_b_desc0<B_MN, RB, WB>(tw_smem_u32(B));
  tw_wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += NC) {
      const unsigned long long db =
          tw_wgmma_desc_add(db0, tw_wgmma_b_offset<B_MN, RB, WB, 2>(k0, n0));
      tw_wgmma_step_rs<NC, TY, B_MN>(acc + n0 / 2, a + k0 / 4, db, k0 == 0 ? scale_d : 1);
    }
  }
  tw_wgmma_commit();
}

// A register fragment of 16-bit elements from a pair of fp32 accumulators: one cvt.rn.f16x2
// (or .bf16x2) per pair, written as one 32-bit register.
#if defined(TW_HOST_EMULATION)
template <class T>
inline void tw_wgmma_pack(T* p, float lo, float hi) {
  p[0] = T(lo);
  p[1] = T(hi);
}
#else
#ifdef __CUDA_FP16_TYPES_EXIST__
__device__ __forceinline__ void tw_wgmma_pack(half* p, float lo, float hi) {
  *reinterpret_cast<half2*>(p) = __floats2half2_rn(lo, hi);
}
#endif
#ifdef __CUDA_BF16_TYPES_EXIST__
__device__ __forceinline__ void tw_wgmma_pack(__nv_bfloat16* p, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(lo, hi);
}
#endif
#endif
#endif  // TW_WGMMA_H
