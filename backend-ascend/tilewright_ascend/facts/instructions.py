"""What A2/A3 instructions accept, from the Ascend C API documentation
(``docs/zh/api/SIMD-API/基础API``, the "数据类型" and "参数说明" sections for Atlas A2): the
element types of each vector instruction, the rounding modes of each Cast, and the limits of
instruction fields. The dialect, the rules and the passes check against these tables; the
emulator's header asserts the same facts in C++.
"""

from __future__ import annotations

from tilewright.errors import KernelError

from .dtypes import dtype_bytes

_ARITH = frozenset({"int16", "float16", "int32", "float32"})
_FLOAT = frozenset({"float16", "float32"})

# instruction -> element types it computes on A2 (Memory矢量计算/基础算术/*.md, 数据填充,
# 归约计算/ReduceRepeat.md for the WholeReduce family)
VECTOR_DTYPES = {
    **{op: _ARITH for op in ("Add", "Sub", "Mul", "Max", "Min", "Adds", "Muls", "Maxs",
                             "Mins")},
    **{op: _FLOAT for op in ("Div", "Exp", "Ln", "Abs", "Sqrt", "Rsqrt", "Reciprocal",
                             "WholeReduceSum", "WholeReduceMax", "WholeReduceMin")},
    "Relu": frozenset({"float16", "int32", "float32"}),
    "Duplicate": frozenset({"int16", "uint16", "float16", "bfloat16", "int32", "uint32",
                            "float32"}),
    "CreateVecIndex": _ARITH,  # 数据填充/CreateVecIndex.md: half, int16_t, int32_t, float
}

# the element types of the atomic modes of the MTE3 copy into GM (SetAtomicAdd/Max/Min, the
# ASCENDC_ASSERT of SetAtomicAddImpl and its kin in impl/basic_api/dav_c220/
# kernel_operator_set_atomic_impl.h): T.atomic_add/max/min of other types are refused
ATOMIC_DTYPES = frozenset({"float16", "float32", "int16", "int32", "int8", "bfloat16"})

# Compare/Compares and Select on A2 (比较与选择/Compare.md, Compares.md, Select.md, "数据类型"
# for Atlas A2): the comparisons (TIR node -> CMPMODE) each source dtype takes, and the dtypes
# Select picks between. The vector path writes a tile select ``c ? x : y`` (T.if_then_else in
# a T.Parallel nest, and a guarded store as ``c ? v : old``) as Compare(s) into a uint8 bit
# mask and Select when ``c`` is comparisons of two tile values or a tile value with a scalar in
# a dtype of COMPARE_MODES, joined by and/or/not (And/Or/Not of the masks on their uint16
# lanes: A2's logic instructions take int16 and uint16, 逻辑计算/And.md), and ``x``/``y`` are
# SELECT_DTYPES (bfloat16 through float32, which is exact); a comparison of loop indices is
# compared in float32 on index tiles (transforms/indices.py: CreateVecIndex, exact below
# 2**24); everything else stays on the scalar unit: conditions without tile data or indices,
# integer comparisons of tile data other than int32 ==, integer selects.
COMPARISONS = {"LT": "LT", "LE": "LE", "GT": "GT", "GE": "GE", "EQ": "EQ", "NE": "NE"}
COMPARE_MODES = {"float16": frozenset(COMPARISONS.values()),
                 "float32": frozenset(COMPARISONS.values()), "int32": frozenset({"EQ"})}
SELECT_DTYPES = _FLOAT
# Compare's count form compares whole repeats of this many bytes ("需要保证count个元素所占空间
# 256字节对齐"): a source is read up to the next multiple
COMPARE_REPEAT_BYTES = 256


def compare_takes(dtype, mode: str) -> bool:
    """Whether A2's Compare/Compares compare ``dtype`` in ``mode`` (a CMPMODE name)."""
    return mode in COMPARE_MODES.get(str(dtype), ())


def compare_count(count: int, dtype) -> int:
    """``count`` elements of ``dtype`` rounded up to Compare's whole repeats."""
    per = COMPARE_REPEAT_BYTES // dtype_bytes(str(dtype))
    return -(-count // per) * per


_ROUNDING = ("CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC")
# (source, destination) -> the rounding modes Cast takes on A2 (类型转换/Cast.md)
CAST_MODES = {
    ("int8", "float16"): ("CAST_NONE",), ("uint8", "float16"): ("CAST_NONE",),
    ("int16", "float16"): (*_ROUNDING, "CAST_NONE"), ("int16", "float32"): ("CAST_NONE",),
    ("float16", "int8"): (*_ROUNDING, "CAST_NONE"), ("float16", "uint8"): (*_ROUNDING,
                                                                            "CAST_NONE"),
    ("float16", "int16"): _ROUNDING, ("float16", "int32"): _ROUNDING,
    ("float16", "float32"): ("CAST_NONE",),
    ("bfloat16", "int32"): _ROUNDING, ("bfloat16", "float32"): ("CAST_NONE",),
    ("int32", "int16"): ("CAST_NONE",), ("int32", "float32"): (*_ROUNDING, "CAST_NONE"),
    ("int32", "int64"): ("CAST_NONE",),
    ("float32", "int16"): _ROUNDING, ("float32", "float16"): (*_ROUNDING, "CAST_ODD",
                                                               "CAST_NONE"),
    ("float32", "bfloat16"): _ROUNDING, ("float32", "int32"): _ROUNDING,
    ("float32", "float32"): _ROUNDING, ("float32", "int64"): _ROUNDING,
    ("int64", "int32"): ("CAST_NONE",), ("int64", "float32"): _ROUNDING,
}

# rounding to an integral value: a float32 -> float32 Cast in the mode (T.round: halves to even)
ROUNDING_CASTS = {"floor": "CAST_FLOOR", "ceil": "CAST_CEIL", "round": "CAST_RINT",
                  "trunc": "CAST_TRUNC"}

REPEAT_LIMIT = 255  # repeatTime of the repeat-form vector instructions (ReduceRepeat.md)
ND2NZ_SRC_D_LIMIT = 65535  # Nd2NzParams.srcDValue (DataCopy GM->L1 ND2NZ)


def computes(instruction: str, dtype) -> bool:
    """Whether ``instruction`` computes on ``dtype`` on A2."""
    return str(dtype) in VECTOR_DTYPES[instruction]


_STAGES = ("float16", "float32")  # what a chain of Casts may pass through


def cast_route(src, dst) -> tuple[str, ...]:
    """The dtypes a conversion from ``src`` to ``dst`` passes through, ``dst`` last: one Cast
    where A2 converts the pair directly, else the shortest chain of Casts A2 has (int8 ->
    float16 -> float32, exact; bfloat16 -> float32 -> float16, one rounding; int32 -> float32
    -> float16 rounds twice only above 2**24). A pair no chain reaches is refused."""
    route = _chain(str(src), str(dst))
    if route is None:
        cast_mode(src, dst)  # raises, naming the pair
    return route


def _chain(src: str, dst: str) -> tuple[str, ...] | None:
    """:func:`cast_route`'s chain, None where A2's Casts do not reach ``dst``."""
    routes, frontier = {src: ()}, [src]
    while frontier and dst not in routes:
        step = []
        for here in frontier:
            for a, b in CAST_MODES:
                if a == here and b not in routes and (b == dst or b in _STAGES):
                    routes[b] = (*routes[here], b)
                    step.append(b)
        frontier = step
    return routes.get(dst)


def converts(src, dst) -> bool:
    """Whether A2's vector Casts convert ``src`` to ``dst``, directly or by a chain (a float
    to an integer by :func:`float_to_int_steps`). None takes uint16_t or uint32_t, as source
    or destination (类型转换/Cast.md lists no pair with either for Atlas A2): such a
    conversion runs on the scalar unit."""
    src, dst = str(src), str(dst)
    if _is_float(src) and not _is_float(dst):
        return _float_to_int(src, dst) is not None
    return _chain(src, dst) is not None


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def cast_mode(src, dst) -> str:
    """The rounding mode that gives a TIR cast's meaning: floats to integers truncate (as C
    does), a narrowing float conversion rounds to nearest even, a widening one is exact."""
    src, dst = str(src), str(dst)
    modes = CAST_MODES.get((src, dst))
    if modes is None:
        raise KernelError(f"A2's Cast does not convert {src} to {dst}; convert through "
                          "float32 or float16")
    if dst.startswith(("int", "uint")) and not src.startswith(("int", "uint")):
        return "CAST_TRUNC"
    if "CAST_NONE" in modes and dtype_bytes(src) <= dtype_bytes(dst):
        return "CAST_NONE"
    return "CAST_RINT" if "CAST_RINT" in modes else modes[0]


# integer types a float value is converted into exactly, then clamped to a narrower one
_WIDE_INTEGERS = ("int16", "int32")


def float_to_int_steps(src, dst) -> tuple[tuple[str, str], ...]:
    """A conversion from the float ``src`` to the integer ``dst`` by the language's rule
    (toward zero, saturated at the bounds, NaN gives 0) with A2's Casts: each step is
    ``("cast", dtype)``, a Cast of the value so far to ``dtype`` (:func:`cast_mode`: to an
    integer CAST_TRUNC), or ``("clamp", dtype)``, Maxs and Mins of the value so far (of
    ``dtype``) to ``dst``'s bounds. A float -> integer Cast saturates and gives 0 for NaN
    (数据结构/precision_conversion.md: "溢出默认按照饱和模式处理"; C-API/reg/data_type_convert/
    rounding_mode.md, 浮点转整型), so a pair A2 converts directly is one Cast; any other goes
    through the first of :data:`_WIDE_INTEGERS` A2 converts ``src`` to, is clamped there and
    reaches ``dst`` through Casts that are exact in its range; half -> uint8_t too, since A2
    takes a negative source of it for an exception (precision_conversion.md). A source with
    no such Cast is widened to float32 first (exact)."""
    steps = _float_to_int(str(src), str(dst))
    if steps is None:
        raise KernelError(f"A2's Cast does not convert {src} to {dst}, not even through "
                          f"{' or '.join(_WIDE_INTEGERS)} or float32")
    return steps


def _float_to_int(src: str, dst: str) -> tuple[tuple[str, str], ...] | None:
    """:func:`float_to_int_steps`, None where A2's Casts do not reach ``dst``."""
    if (src, dst) in CAST_MODES and not dst.startswith("uint"):
        return (("cast", dst),)
    for wide in _WIDE_INTEGERS:
        route = _chain(wide, dst)
        if (src, wide) in CAST_MODES and dtype_bytes(wide) > dtype_bytes(dst) and route:
            return (("cast", wide), ("clamp", wide), *(("cast", d) for d in route))
    if src != "float32" and (src, "float32") in CAST_MODES:
        rest = _float_to_int("float32", dst)
        return None if rest is None else (("cast", "float32"), *rest)
    return None
