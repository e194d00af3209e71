"""CUDA codegen: TVM's CUDA code generator on the lowered kernel, our device headers for the
intrinsics it calls (``intrinsics.TABLE`` says which), and the launch description (kernel
name, parameters, grid, block, dynamic shared memory, TMA descriptors, cluster dims) that the
executors and exported bundles use. The text edits TVM leaves no way around are in
``codegen.source``."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.plugin import DeviceCodegen, GeneratedSource
from tilewright.transform import float_to_int, narrow_float, prim_func_pass, wrapping_int
from tvm import tirx
from tvm.tirx.build import split_host_device_mods

from .. import intrinsics, keys, options
from . import external, source, wgmma
from .launch import (
    check_grid_known,
    check_params_known,
    host_binds_inlined,
    launch_info,
    param_kinds,
    symbol_sources,
    workspaces,
)

INCLUDE = Path(__file__).resolve().parents[1] / "include"
HEADERS = {name: (INCLUDE / name).read_text() for name in
           (intrinsics.BASE, intrinsics.HOPPER, *intrinsics.PASTED)}
# attributes of the lowered kernel that are ours, not TVM's: read here, removed before TVM
OUR_ATTRS = (keys.DYN_SMEM, keys.TENSORMAPS, keys.CLUSTER, keys.SEQUENCE, keys.IMPORT_SOURCE,
             keys.BLOCKS)
# the launch-bounds attribute TVM's CUDA printer turns into __launch_bounds__(threads, blocks)
MIN_BLOCKS = "tirx.launch_bounds_min_blocks_per_sm"
# the function attribute TVM's CUDA printer reads to mark pointer parameters __restrict__
NO_ALIAS = "tirx.noalias"


def tvm_target(arch) -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch.name},
                             host=tvm.target.Target("llvm"))


def tvm_passes() -> list:
    """TVM's passes from flat loops to a device kernel and its host launcher. Unlike TVM's
    default CUDA pipeline, no automatic barriers or shared-buffer merging: the insert_sync and
    place_memory phases own those; no float8 legalisation below sm_89 (float8 arithmetic is
    made in float32 here, conversions are ``cuda_fp8.h``'s on every architecture, see
    ``codegen.source``)."""
    t, s = tirx.transform, tvm.s_tir.transform
    return [s.UnifyThreadBinding(), s.LowerOpaqueBlock(), t.StmtSimplify(), t.FlattenBuffer(),
            t.BF16ComputeLegalize(), t.NarrowDataType(32),
            prim_func_pass("tw.ReinterpretOperandsWidened", reinterpret_operands_widened),
            t.VectorizeLoop(True), t.UnrollLoop(), t.StmtSimplify(), t.RemoveNoOp(),
            t.CommonSubexprElim(), prim_func_pass("tw.HostBindsInlined", host_binds_inlined),
            t.VerifyMemory(),
            t.AnnotateEntryFunc(), t.SplitHostDevice(), t.MakePackedAPI(),
            t.BF16StorageLegalize()]


_REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")


def reinterpret_operands_widened(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with the integer operand of each reinterpret that is narrower than its result
    converted back to the result's width (the same value, so the same bits). TVM's
    NarrowDataType makes a 64-bit integer expression whose values fit 32 bits 32-bit, also
    the operand of a reinterpret (``T.unpack`` of an int8 value cast to int64 reads the
    fields of ``reinterpret(uint64, int64(x))``), and the CUDA printer then stops on the
    widths. A reinterpret to or from a pointer (``T.make_tensor`` of an address read from a
    ``T.ptr`` table) is left as it is."""

    def visit(c):
        if not c.op.same_as(_REINTERPRET):
            return c
        (value,) = c.args
        if not (isinstance(value.ty, tvm.ir.PrimType) and isinstance(c.ty, tvm.ir.PrimType)):
            return c
        src, dst = tvm.DataType(str(value.ty)), tvm.DataType(str(c.ty))
        kind = str(src.with_lanes(1)).rstrip("0123456789")
        if kind not in ("int", "uint") or src.lanes != dst.lanes or src.bits >= dst.bits:
            return c
        wide = f"{kind}{dst.bits}" + (f"x{dst.lanes}" if dst.lanes > 1 else "")
        return tirx.reinterpret(str(c.ty), tirx.Cast(wide, value))

    return tvm_ffi.structural_map(func, (tvm.ir.Call, visit))


def _extern_names(func) -> list[str]:
    """The ``call_extern`` names of ``func``, in program order."""
    found = []
    tvm_ffi.structural_walk(func, (tvm.ir.Call, lambda c: found.append(
        intrinsics.extern_name(c)) if intrinsics.extern_name(c) is not None else None),
        order="pre")
    return found


def device_kernel(gvar, func, target):
    """TVM's passes on ``func`` (named ``gvar``), then its device kernel: ``(target, module,
    (global var, function))``."""
    # float -> integer conversions saturate (nvcc makes (signed char)f of a float32 a
    # cvt.rzi.s32.f32 and a byte store: the int32 saturated, then wrapped); unsigned and
    # narrow integer arithmetic wraps, made in int64 (TVM's folding stops on 0U - 1U or a
    # negative constant cast to uint32 once it knows a one-block grid's index is 0, and CUDA
    # C promotes 8- and 16-bit operands to int)
    body = wrapping_int.rewrite(float_to_int.rewrite(func.body))
    mod = tvm.IRModule({gvar: func.with_body(body)})
    mod = tirx.transform.BindTarget(target)(mod)
    mod = tvm.ir.transform.Sequential(tvm_passes())(mod)
    _, device = split_host_device_mods(mod)
    (dev_target, dev_mod), = list(device.items())
    dev_mod = tvm.ir.transform.Sequential([tirx.transform.LowerWarpMemory(),
                                           tirx.transform.StmtSimplify()])(dev_mod)
    kernels = list(dev_mod.functions.items())
    if len(kernels) != 1:  # split_kernels leaves one 'with T.Kernel' block per function
        raise KernelError(f"CUDA codegen expected one device kernel per function, got "
                          f"{len(kernels)}")
    (kernel_gvar, kernel), = kernels
    # float8 math calls, and half ones CUDA has no function for, become float32 ones before
    # LowerIntrin names CUDA's functions
    dev_mod = tirx.transform.LowerIntrin()(tvm.IRModule(
        {kernel_gvar: float8_arithmetic(half_math_in_float32(kernel))}, attrs=dev_mod.attrs))
    kernel = float8_conversions(packed_vectors(printable_constants(dev_mod[kernel_gvar])))
    dev_mod = tvm.IRModule({kernel_gvar: kernel}, attrs=dev_mod.attrs)
    return dev_target, dev_mod, (kernel_gvar, kernel)


def printable_constants(func):
    """``func`` with each non-finite bfloat16 constant written as the float32 constant converted
    to bfloat16: TVM's CUDA printer writes the former as ``inff``/``nanf`` (T.infinity of
    bfloat16, which does not compile) and the latter as ``CUDART_INF_F``/``CUDART_NAN_F``;
    and each reinterpret of a constant as the constant it is (the printer takes the operand's
    address, ``*(uint *)(&(4660))``, which does not compile: ``T.unpack`` of a value the
    simplifier folds); and each int32 constant -2^31 as the int64 constant converted to int32
    (the printer writes an int32 constant as a bare number, and in C++ ``-2147483648`` is the
    negation of the ``long`` 2147483648: ``max(x ? -2147483648 : y, z)`` of an int ``z``, the
    lower bound of a saturating float -> int32 conversion, matches two overloads)."""

    def visit(c):
        if str(c.ty) == "bfloat16" and not math.isfinite(c.value):
            return tirx.Cast("bfloat16", tirx.FloatImm("float32", c.value))
        return c

    def int32_min(c):
        if c.value == INT32_MIN and str(c.ty) == "int32":
            return tirx.Cast("int32", tirx.IntImm("int64", INT32_MIN))
        return c

    func = tvm_ffi.structural_map(func, (tirx.FloatImm, visit))
    func = tvm_ffi.structural_map(func, (tvm.ir.Call, reinterpreted_constant))
    return tvm_ffi.structural_map(func, (tirx.IntImm, int32_min))


INT32_MIN = -(2 ** 31)


def packed_vectors(func):
    """``func`` with each vector of 8- or 16-bit integers of 32 bits or more (``int8x4``,
    ``int16x4`` ...) or of 8 16-bit floats (``float16x8``, ``bfloat16x8``) built from its
    lanes' values (a ``Shuffle`` of scalars: the lanes of a
    wrapping vector operation, ``T.int8x8(a, ..., h)``) built as 32-bit words instead, the
    lanes' bits shifted into place, and reinterpreted: TVM's CUDA printer holds such a vector
    in an ``int`` / ``int2`` / ``int4`` (a ``uint4`` for 8 halves) and writes its construction
    as ``make_int2`` of every lane (eight arguments for ``int8x8``), which does not compile."""

    def built_badly(t) -> bool:
        """Whether TVM's printer builds a vector of type ``t`` with too many arguments: 8- and
        16-bit integers in whole 32-bit words; 16-bit floats beyond the 64 bits of ``half4``
        / ``nv_bfloat164`` (``float16x8`` is a ``uint4`` there: ``make_uint4`` of 8 halves)."""
        if t.type_code in (0, 1):
            return t.bits in (8, 16) and (t.lanes * t.bits) % 32 == 0
        return t.type_code in (2, 4) and t.bits == 16 and t.lanes * t.bits > 64

    def visit(shuffle):
        t = tvm.runtime.DataType(str(shuffle.ty))
        lanes, bits = t.lanes, t.bits
        if lanes == 1 or not built_badly(t) or any(tvm.runtime.DataType(str(v.ty)).lanes != 1
                                             for v in shuffle.vectors):
            return shuffle
        per_word = 32 // bits
        values = [shuffle.vectors[int(i)] for i in shuffle.indices]
        words = []
        for w in range(lanes // per_word):
            word = None
            for k in range(per_word):
                value = values[w * per_word + k]
                unsigned = value if t.type_code == 1 else \
                    tirx.reinterpret(f"uint{bits}", value)
                part = tirx.Cast("uint32", unsigned)
                if k:
                    part = tirx.shift_left(part, tirx.const(k * bits, "uint32"))
                word = part if word is None else tirx.bitwise_or(word, part)
            words.append(word)
        packed = words[0] if len(words) == 1 else \
            tirx.Shuffle(words, [tirx.const(w, "int32") for w in range(len(words))])
        return tirx.reinterpret(str(shuffle.ty), packed)

    return tvm_ffi.structural_map(func, (tirx.Shuffle, visit))


_FLOAT_FORMATS = {16: "<e", 32: "<f", 64: "<d"}  # struct's IEEE formats by width


def reinterpreted_constant(c):
    """``c``, or the constant it is when it reinterprets an integer or IEEE float constant of
    one lane."""
    if not c.op.same_as(_REINTERPRET) or \
            not isinstance(c.args[0], (tirx.IntImm, tirx.FloatImm)):
        return c
    src, dst = (tvm.DataType(str(t)) for t in (c.args[0].ty, c.ty))
    kinds = [str(t.with_lanes(1)).rstrip("0123456789") for t in (src, dst)]
    if src.lanes != 1 or dst.lanes != 1 or src.bits != dst.bits or \
            any(k not in ("int", "uint", "float") for k in kinds) or \
            ("float" in kinds and src.bits not in _FLOAT_FORMATS):
        return c
    value, bits = c.args[0].value, src.bits
    if kinds[0] == "float":
        word = int.from_bytes(struct.pack(_FLOAT_FORMATS[bits], value), "little")
    else:
        word = int(value) % (1 << bits)
    if kinds[1] == "float":
        out = struct.unpack(_FLOAT_FORMATS[bits], word.to_bytes(bits // 8, "little"))[0]
        return tirx.FloatImm(str(c.ty), out)
    if kinds[1] == "int" and word >= 1 << (bits - 1):
        word -= 1 << bits
    return tirx.const(word, str(c.ty))


FLOAT8 = frozenset({"float8_e4m3fn", "float8_e5m2"})
HALF = frozenset({"float16", "bfloat16"})
# the math functions of float16/bfloat16 values that CUDA's half headers (cuda_fp16.h,
# cuda_bf16.h: hexp, hexp10, hlog10, hsin, hrint ...) lack: TVM leaves the call unresolved,
# prints a name NVRTC rejects (hsinh, hfmod, hnearbyint), or one its CUDA preamble defines
# (htan, hatan, herf, hpow: the float32 function rounded) for device compilation only
HALF_MATH_IN_FLOAT32 = frozenset(tvm.ir.Op.get(f"tirx.{name}") for name in (
    "tan", "atan", "erf", "pow", "log1p", "sinh", "cosh", "asin", "acos", "asinh", "acosh",
    "atanh", "nearbyint", "fmod", "atan2", "hypot", "copysign"))


def half_math_in_float32(func):
    """``func`` with each :data:`HALF_MATH_IN_FLOAT32` call on float16/bfloat16 values the
    float32 function rounded once (:mod:`tilewright.transform.narrow_float`, as CUDA's own
    half functions are)."""
    return func.with_body(narrow_float.rewrite(func.body, HALF, arithmetic=False,
                                               math=HALF_MATH_IN_FLOAT32))


def float8_arithmetic(func):
    """``func`` with each arithmetic operation, comparison and math call on float8 values made
    in float32, an arithmetic or math result converted back (the language's semantic, rounded
    once per operation): CUDA's ``__nv_fp8_e4m3`` and ``__nv_fp8_e5m2`` have no arithmetic
    operators and no math functions."""
    return func.with_body(narrow_float.rewrite(func.body, FLOAT8))


def float8_conversions(func):
    """``func`` with each conversion to or between float8 formats in a form CUDA computes by
    the language's rules. A cast from one format to the other goes through float32 (exact:
    float32 holds every float8 value): ``__nv_fp8_e4m3`` and ``__nv_fp8_e5m2`` convert to and
    from float but not to each other, and TVM prints the cast as one C cast. A conversion to
    float8_e5m2 is ``tw_fp8_e5m2`` (``include/tw_fp8.h``): TVM prints ``(__nv_fp8_e5m2)x``,
    which saturates to +-57344 where the format, and torch, overflow to +-inf."""

    def visit(c):
        src, dst = tvm.DataType(str(c.value.ty)), tvm.DataType(str(c.ty))
        lanes = dst.lanes
        src, dst = str(src.with_lanes(1)), str(dst.with_lanes(1))
        if src == dst or not dst.startswith("float8"):
            return c
        if dst != "float8_e5m2":
            wide = tirx.Cast(f"float32x{lanes}" if lanes > 1 else "float32", c.value)
            return tirx.Cast(str(c.ty), wide) if src.startswith("float8") else c
        if lanes != 1:
            raise KernelError(f"the CUDA backend converts to float8_e5m2 one value at a time; "
                              f"cannot print the {lanes}-lane conversion {c}",
                              span_location(c.span))
        value = c.value if src == "float32" else tirx.Cast("float32", c.value)
        return tirx.call_pure_extern(dst, "tw_fp8_e5m2", value)

    return tvm_ffi.structural_map(func, (tirx.Cast, visit))


class Kernel:
    """One function of the lowered module as a device kernel (``gvar``, ``device_func``): its
    launch (``entry``, ``params``, ``symbols``, ``launch``: grid, block, shared memory;
    ``cooperative``, ``pdl``: how the launcher starts it), its
    place in a kernel sequence (``sequence``, None outside one) and what its printed source
    needs (``names``: our intrinsics it calls, ``used``: their table entries; ``maps``,
    ``cluster``: the dialect's TMA descriptors and cluster dims)."""

    def __init__(self, gvar, func, chosen):
        self.launch = launch_info(func)
        attrs = func.attrs
        self.maps = json.loads(str(attrs[keys.TENSORMAPS])) if keys.TENSORMAPS in attrs else []
        self.cluster = json.loads(str(attrs[keys.CLUSTER])) if keys.CLUSTER in attrs else None
        self.sources = json.loads(str(attrs[keys.IMPORT_SOURCE])) \
            if keys.IMPORT_SOURCE in attrs else []
        sequence = json.loads(str(attrs[keys.SEQUENCE])) if keys.SEQUENCE in attrs else None
        # T.annotate_min_blocks_per_sm's blocks, else the pass config's
        annotated = int(attrs[keys.BLOCKS]) if keys.BLOCKS in attrs else None
        for key in OUR_ATTRS:
            if key in func.attrs:
                func = func.without_attr(key)
        self.func, self.sequence = func, sequence
        check_grid_known(func, None if sequence is None else sequence["params"])
        self.target, dev_mod, (self.gvar, device_func) = device_kernel(gvar, func,
                                                                       tvm_target(chosen.arch))
        self.attrs = dev_mod.attrs
        # ours only: TVM's codegen calls CUDA's math functions (exp2f ...) too
        self.names = [n for n in _extern_names(device_func) if intrinsics.lookup(n) is not None]
        self.used = [intrinsics.named(n) for n in self.names]
        roles = {entry.role for entry in self.used}
        # a barrier of the whole grid: every block resident at once (a cooperative launch)
        self.cooperative = "grid_sync" in roles
        # T.pdl_sync: launched to overlap the kernel before it (a cooperative launch does not
        # overlap; the wait then finds that kernel finished). Its parameters lose __restrict__,
        # with which nvcc may read them through the non-coherent read-only path (ld.global.nc),
        # which need not see what the kernel it overlaps writes.
        self.pdl = "pdl_sync" in roles and not self.cooperative
        if "pdl_sync" in roles:
            device_func = device_func.with_attr(NO_ALIAS, False)
        blocks = annotated or chosen.blocks_per_sm
        if annotated is not None and "setmaxnreg" in roles and annotated != chosen.blocks_per_sm:
            raise KernelError(
                f"T.annotate_min_blocks_per_sm({annotated}) in a kernel whose warpgroups set "
                f"their registers (setmaxnreg) for {chosen.blocks_per_sm} block(s) per SM: "
                f"give the pass config {keys.BLOCKS_PER_SM}={annotated} instead, which "
                "budgets them for that many", span_location(func.body.span))
        # a warp tile's accumulators (let ptxas use up to 255 registers: its share of the SM's),
        # setmaxnreg (the register count at entry must be fixed), several blocks per SM, or
        # T.annotate_min_blocks_per_sm
        if roles & {"gemm", "wgmma", "setmaxnreg"} or blocks > 1 or annotated is not None:
            device_func = device_func.with_attr(MIN_BLOCKS, blocks)
        self.device_func = device_func
        count = None if sequence is None else sequence["params"]
        self.entry = str(self.gvar.name_hint)
        self.params = param_kinds(func, device_func, count)
        check_params_known(func, self.params, count)
        self.symbols = symbol_sources(func, count)


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    """One source for the module's kernels: one ``__global__`` function per function of
    ``mod`` (a kernel sequence has one per block, see ``transforms.kernels``), compiled into
    one cubin; the launch description of a sequence lists them in launch order. A
    ``T.CUDASourceCodeKernel``'s is the user's source (``codegen.external``)."""
    chosen = options.of(ctx)
    arch = chosen.arch
    for func in mod.functions.values():  # T.CUDASourceCodeKernel: its function's only launch
        stmt = external.marker(func)
        if stmt is not None:
            return external.generate(func, stmt, chosen, ctx.func_name)
    kernels = [Kernel(gvar, func, chosen) for gvar, func in mod.functions.items()]
    kernels.sort(key=lambda k: k.sequence["index"] if k.sequence else 0)
    dev_mod = tvm.IRModule({k.gvar: k.device_func for k in kernels}, attrs=kernels[0].attrs)
    text = tvm.get_global_func("target.build.cuda")(dev_mod, kernels[0].target).inspect_source()
    used = [entry for k in kernels for entry in k.used]
    headers = {entry.header for entry in used}
    headers |= {intrinsics.BUILDS_ON[h] for h in headers if h in intrinsics.BUILDS_ON}
    # the user's sources (T.import_source), each once, after ours
    imported = list(dict.fromkeys(s for k in kernels for s in k.sources))
    text = source.insert_headers(text, HEADERS[intrinsics.BASE] + "".join(
        HEADERS[h] for h in intrinsics.PASTED if h in headers) +
        "".join(f"\n{s}\n" for s in imported))
    text = source.float8_on_every_arch(source.drop_unused_type_traits(text))
    metas = [{"entry": k.entry, "arch": arch.name, "params": k.params, "symbols": k.symbols,
              **k.launch, **({"cooperative": True} if k.cooperative else {}),
              **({"pdl": True} if k.pdl else {})}
             for k in kernels]
    head, body = source.split_kernel(text)
    if body and (any(k.maps or k.cluster for k in kernels) or
                 headers & {intrinsics.HOPPER, intrinsics.WGMMA}):
        for k, meta in zip(kernels, metas):
            if k.maps:  # the CUDA dialect's descriptors
                body = source.tensormap_params(body, k.entry, [m["name"] for m in k.maps])
                meta["params"] = [*meta["params"], *k.maps]
            if k.cluster:
                body = source.cluster_dims(body, k.entry, k.cluster)
                meta["cluster_dims"] = k.cluster
        gemms = [n for k in kernels for n, entry in zip(k.names, k.used) if entry.role == "wgmma"]
        if gemms:
            body = wgmma.source(gemms) + body
        text = head + HEADERS[intrinsics.HOPPER] + "\n" + body
    payload = metas[0] if kernels[0].sequence is None else sequence_launch(kernels, metas, arch)
    if chosen.compile_flags:  # the executors pass them to NVRTC / nvcc
        payload["compile_flags"] = list(chosen.compile_flags)
    return GeneratedSource(text=text, language="cuda", file_ext="cu", payload=payload,
                           entry=ctx.func_name)


def sequence_launch(kernels: list[Kernel], metas: list[dict], arch) -> dict:
    """The launch description of a kernel sequence: the blocks' descriptions in launch order
    (``kernels``), the shape symbols they read and the workspaces to allocate for a call."""
    first = kernels[0]
    return {"arch": arch.name, "symbols": first.symbols,
            "workspaces": workspaces(first.func, first.sequence["params"]),
            "kernels": [{key: value for key, value in meta.items()
                         if key not in ("arch", "symbols")} for meta in metas]}


CODEGEN = DeviceCodegen(language="cuda", file_ext="cu", generate=generate)
