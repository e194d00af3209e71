// tilewright: the barrier of a whole grid (T.sync_grid), cooperative groups' grid barrier. It
// needs a cooperative launch (cuLaunchCooperativeKernel) with every block of the grid resident
// at once; the launcher makes one for every kernel that calls it.
// Under TW_HOST_EMULATION (tests/hostemu.py) the blocks of a cooperative kernel run at once,
// and the barrier is the one of all their threads.
#ifndef TW_GRID_H
#define TW_GRID_H
#ifndef TW_HOST_EMULATION
#include <cooperative_groups.h>

__device__ __forceinline__ void tw_grid_sync() { cooperative_groups::this_grid().sync(); }
#else
inline void tw_grid_sync() { tw_cluster_barrier->arrive_and_wait(); }
#endif  // TW_HOST_EMULATION
#endif  // TW_GRID_H
