// The emulator's include/simt_api/common_functions.h: empty, the SIMT API the generated code uses
// (asc_vf_call, threadIdx, asc_syncthreads) is in kernel_operator.h, which every generated
// source includes first.
#pragma once
