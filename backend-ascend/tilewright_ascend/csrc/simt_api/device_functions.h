// The emulator's include/simt_api/device_functions.h: empty, the SIMT API the generated code uses
// (asc_ldcg, asc_stcg on GM) is in kernel_operator.h, which every generated source includes
// first.
#pragma once
