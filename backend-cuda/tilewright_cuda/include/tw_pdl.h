// tilewright: programmatic dependent launch (T.pdl_trigger, T.pdl_sync; sm_90+). The launcher
// starts a kernel calling tw_pdl_sync with programmatic stream serialisation, so it may begin
// while the kernel before it on the stream is still running: tw_pdl_trigger lets the next
// kernel start once every block has called it, tw_pdl_sync waits until the kernels before
// this one have finished and their memory is visible. The memory clobbers keep the compiler
// from moving loads and stores across either.
// Under TW_HOST_EMULATION (tests/hostemu.py) kernels run one after another: nothing to do.
#ifndef TW_PDL_H
#define TW_PDL_H
#ifndef TW_HOST_EMULATION
__device__ __forceinline__ void tw_pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void tw_pdl_sync() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#else
inline void tw_pdl_trigger() {}
inline void tw_pdl_sync() {}
#endif  // TW_HOST_EMULATION
#endif  // TW_PDL_H
