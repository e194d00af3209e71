"""Expression intrinsics of the portable language: TileLang's fast-math functions and
``T.__ldg``.

A fast-math call of a float32 value is CUDA's intrinsic (``__expf``, ``__logf``, ``__sinf``
...: the error bounds of the CUDA programming guide's table of intrinsic functions, which the
language's contract takes over); of another dtype, the precise function (CUDA has no fast
form of it; float16 and bfloat16 then take the half functions, or float32's rounded).
``T.__ldg(x[i])`` is ``__ldg(&x[i])`` where CUDA's ``__ldg`` takes the element type, a plain
load otherwise (bool, the float8 and float4 formats); a guard the safe-memory pass put around
the element (``i < n ? x[i] : 0``) stays around it."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import FAST_MATH_OPS, READ_ONLY_LOAD
from tvm import tirx

from .table import INTRINSIC_RULES

# the element types CUDA's __ldg overloads take (sm_32_intrinsics.h, cuda_fp16.h, cuda_bf16.h)
LDG_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64", "float16", "bfloat16", "float32", "float64"})


def lower_fast_math(call):
    name = FAST_MATH_OPS[call.op.name]
    (x,) = call.args
    if str(call.ty) == "float32":
        return tirx.call_pure_extern("float32", f"__{name}f", x)
    return getattr(tirx, name)(x)


def lower_read_only_load(call):
    def through_cache(load):
        if str(load.source.scope()) != "global" or str(load.ty) not in LDG_DTYPES:
            return load
        return tirx.call_extern(str(load.ty), "__ldg", tirx.address_of(load))

    return tvm_ffi.structural_map(call.args[0], (tvm.ir.TensorLoad, through_cache))


INTRINSIC_RULES.update(dict.fromkeys(FAST_MATH_OPS, lower_fast_math))
INTRINSIC_RULES[READ_ONLY_LOAD] = lower_read_only_load
