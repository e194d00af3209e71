"""What the Ascend 950 (arch 3510) SIMT API gives a SIMT vector function, from the asc-devkit.

- A SIMT vector function is a ``__simt_vf__`` function launched from the vector core by
  ``asc_vf_call<func>(dim3 threadNums, args...)`` (``include/simt_api/common_functions.h``;
  the SIMD form ``__simd_vf__`` takes only raw pointers and basic types as arguments,
  ``docs/zh/api/SIMD-API/基础API/Reg矢量计算/VF调用/asc_vf_call.md``, which this backend keeps
  for SIMT too: UB tiles are passed as ``__ubuf__`` pointers).
- A thread block has up to three dimensions (the ``dim3`` ``asc_vf_call`` takes); a thread reads
  its index in each from ``threadIdx.x``/``.y``/``.z`` (the built-in variable the vendor's
  ``impl/simt_api/cooperative_groups_impl.h`` reads ``thread_index()`` from), and its linear
  index is ``x + y * X + z * X * Y`` (``thread_rank()`` there): :data:`THREAD_INDEX`.
- A thread block has at most 2048 threads (``max_thread_block_size`` in
  ``include/simt_api/cooperative_groups.h``), in all its dimensions together.
- ``asc_syncthreads()`` is the barrier of the block's threads (``__sync_workitems()``,
  ``include/simt_api/device_sync_functions.h`` and its ``impl``): between two barriers the
  threads run in no order the program can rely on, so two threads touching one byte, one of
  them writing, race unless a barrier lies between.
- A thread computes math with ``AscendC::Simt::Exp`` and its kin
  (``include/simt_api/cpp/kernel_simt_transcendental_intf.h``, ``Abs`` in
  ``kernel_simt_math_intf.h``; ``kernel_operator.h`` includes them for arch 3510), here in
  float32 (:data:`MATH`: TIR's function -> the SIMT one; other element types are converted).
- A kernel that runs SIMT vector functions has at most 216 KiB of UB (the rest of the 248 KiB
  is the SIMT threads' data cache): ``GetRuntimeUBSize.md`` under
  ``docs/zh/api/SIMD-API/基础API/工具接口/系统资源与变量`` (:data:`UB_BYTES`,
  :func:`memories_with_simt`).
- The threads work on UB tiles and on GM tensors: the SIMT API loads and stores GM through
  ``__gm__`` pointers (``asc_ldcg``/``asc_stcg`` of ``include/simt_api/device_functions.h``,
  ``asc_fp16.h``, ``asc_bf16.h``; atomics likewise). :data:`GM_LOAD`/:data:`GM_STORE` are the
  forms that do not keep the line in the SIMT data cache (``__ldg``/``__stg`` with
  ``L1CacheType::NON_CACHEABLE`` in ``impl/simt_api/device_functions_impl.h``), so that the
  copies of the vector core's MTE2/MTE3 and the other cores see the same GM (orders between
  the function and those copies are the synchronisation pass's, as for its UB tiles). The
  cube's memories (L1, L0) are outside the function.
"""

import math
from dataclasses import replace

import tvm
from tvm import tirx

from .ops import pack

MAX_THREADS = 2048
BARRIER = "asc_syncthreads"
THREAD_INDEX = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LAUNCH = "asc_vf_call"
GM_LOAD, GM_STORE = "asc_ldcg", "asc_stcg"
# the element types device_functions.h loads and stores (float16 and bfloat16 are asc_fp16.h's
# and asc_bf16.h's, which the generated code does not include)
GM_DTYPES = frozenset({"float32", "int32", "uint32", "int16", "uint16", "int8", "uint8",
                       "int64", "uint64"})
UB, GM = "ascend.ub", "global"  # the scopes a thread reaches
MATH = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "fabs": "Abs",
        "tanh": "Tanh", "sin": "Sin", "cos": "Cos"}
UB_BYTES = 216 * 1024


def block_value(block: tuple) -> tvm.ir.Call:
    """The value of a ``T.SimtVF`` scope's AttrStmt: its thread block ``(x, y, z)``."""
    return pack([tirx.const(d, "int32") for d in block])


def block_of(attr) -> tuple:
    """The thread block ``(x, y, z)`` of a ``T.SimtVF`` scope's AttrStmt."""
    return tuple(int(d) for d in attr.value.args)


def block_threads(attr) -> int:
    return math.prod(block_of(attr))


def memories_with_simt(memories: dict) -> dict:
    """``memories`` (an architecture's, by scope) as a kernel with SIMT functions has them."""
    ub = memories["ascend.ub"]
    return {**memories, "ascend.ub": replace(ub, capacity=min(ub.capacity, UB_BYTES))}
