// The emulator's include/simt_api/common_functions.h: the SIMT API the generated code uses
// (asc_vf_call, threadIdx, asc_syncthreads) is in kernel_operator.h with the rest.
#pragma once
#include "kernel_operator.h"
