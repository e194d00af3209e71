// tilewright: T.fence_gpu, fence.sc.gpu (__threadfence: MEMBAR.SC.GPU, then CCTL.IVALL on
// sm_90a), a thread's memory accesses ordered for every thread of the GPU. Apart from
// tw_grid.h so that a kernel fencing its blocks' hand-over (split-K's last slice block) does
// not pull in cooperative groups (5.9 KB of gmem in the W4A16 _tk cubins when it did).
// Under TW_HOST_EMULATION (tests/hostemu.py) a kernel's blocks run one after another (a
// cluster's at once): a compiler and CPU fence is all it needs.
#ifndef TW_FENCE_H
#define TW_FENCE_H
#ifndef TW_HOST_EMULATION
__device__ __forceinline__ void tw_fence_gpu() { __threadfence(); }
#else
inline void tw_fence_gpu() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif  // TW_HOST_EMULATION
#endif  // TW_FENCE_H
