// tilewright 16-byte global -> shared copies (pasted into kernels that use them).
//
// tw_cp_async16(dst, src, src_bytes): cp.async.cg.shared.global of 16 bytes; bytes past
// src_bytes (0 or 16) are zero-filled, so a chunk outside the tensor reads nothing and
// writes zeros. tw_cp_async_commit() closes a group, tw_cp_async_wait<N>() waits until at
// most N groups are in flight. Without sm_80 (tw_copy16) the chunk is one 128-bit load and
// store through registers.
#pragma once

#if defined(TW_HOST_EMULATION)
// the GPU faults ("misaligned address") on a 16-byte chunk not on a 16-byte boundary; the
// host would copy it
inline void tw_check_chunk(const void* dst, const void* src, const char* what) {
  if ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) &
      15) {
    std::fprintf(stderr, "%s of 16 bytes from %p to %p: not 16-byte aligned (a misaligned "
                 "address on the GPU)\n", what, src, dst);
    __trap();
  }
}
#endif

__device__ __forceinline__ void tw_cp_async16(void* dst, const void* src, int src_bytes) {
#if defined(TW_HOST_EMULATION)
  tw_check_chunk(dst, src, "cp.async");
  tw_emu_cp_async(dst, src, src_bytes, 16);  // lands at its group's wait
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(addr), "l"(src), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void tw_cp_async_commit() {
#if defined(TW_HOST_EMULATION)
  tw_emu_cp_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void tw_cp_async_wait() {
#if defined(TW_HOST_EMULATION)
  tw_emu_cp_wait(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

__device__ __forceinline__ void tw_copy16(void* dst, const void* src, int src_bytes) {
#if defined(TW_HOST_EMULATION)
  tw_check_chunk(dst, src, "128-bit copy");
  std::memcpy(dst, src, src_bytes);
  std::memset(static_cast<char*>(dst) + src_bytes, 0, 16 - src_bytes);
#else
  uint4 v = make_uint4(0, 0, 0, 0);
  if (src_bytes) v = *static_cast<const uint4*>(src);
  *static_cast<uint4*>(dst) = v;
#endif
}
