"""Ascend C code generation: one source file per kernel, with its host launch function.

The kernel is ``extern "C" __global__ __aicore__``, of type MIX (1 AIC : 2 AIV). A ``TPipe``
serves only as an allocator: one ``TBuf`` per memory, every buffer taken at the offset the
memory plan gave it. Cube code sits under ``if ASCEND_IS_AIC``, vector code under
``if ASCEND_IS_AIV``; statements outside ``T.Scope`` go to the core whose memories or pipes
they use. Tile ops become Ascend C calls through the rules in :mod:`..rules`; expressions print
through :mod:`.expr`. Buffers are named by identity: two tiles with one name get two
identifiers.
"""

from __future__ import annotations

import tvm
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode
from tilewright.plugin import DeviceCodegen, GeneratedSource
from tvm import sym, tirx

from .. import __version__
from ..analysis.accesses import has_simt
from ..analysis.buffers import allocations, loads_and_stores
from ..analysis.cores import core_of
from ..analysis.gemm import gemm_calls, square_operands
from ..facts.arch import ARCHS, CUBE_SCOPES, EMULATOR_SPACES, MEMORIES, arch_of, soc_of
from ..facts.dtypes import ctype, dtype_bytes
from ..facts.keys import (
    PLAN_KEY,
    PORTABLE_KEY,
    SCALAR_KEY,
    SCOPE_KEY,
    SEQUENCE_KEY,
    SIMD_VF_KEY,
    SIMT_KEY,
    STAGING_KEY,
    TEMPS_KEY,
    WORKSPACES_KEY,
)
from ..facts.simt import memories_with_simt
from ..facts.terms import statement_term
from ..rules import RULES, emit_scalar_loop, emit_vector_function, parallel_rule
from ..transforms.tile_exprs import simplified
from ..transforms.vecmath import fold_constant_math
from .expr import ExprPrinter
from .simt import ATTRIBUTE as SIMT_ATTRIBUTE
from .simt import INCLUDES as SIMT_INCLUDES
from .simt import PRELUDE as SIMT_PRELUDE
from .simt import emit_simt

CORES = ("AIC", "AIV")
# lines every generated file starts with; the emulator's header defines its own versions
PRELUDE = (
    "#ifndef TW_CAST",
    "#define TW_CAST(T, x) static_cast<T>(x)",
    "#endif",
    "#ifndef TW_SELECT",
    "#define TW_SELECT(c, a, b) ((c) ? (a) : (b))",
    "#define TW_MIN(a, b) ((a) < (b) ? (a) : (b))",
    "#define TW_MAX(a, b) ((a) > (b) ? (a) : (b))",
    "#endif",
    "#ifndef TW_ISNAN",  # T.isnan and fabs on the scalar unit: IEEE comparisons
    "#define TW_ISNAN(x) ((x) != (x))",
    "#define TW_FABS(x) ((x) < 0 ? -(x) : (x))",
    "#endif",
    "#ifndef TW_FLOORDIV",  # integer division and modulo rounding towards minus infinity
    "template <typename A, typename B> __aicore__ inline auto tw_floordiv(A a, B b) {",
    "    auto q = a / b;",
    "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;",
    "}",
    "template <typename A, typename B> __aicore__ inline auto tw_floormod(A a, B b) {",
    "    auto r = a % b;",
    "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
    "}",
    "#define TW_FLOORDIV(a, b) tw_floordiv((a), (b))",
    "#define TW_FLOORMOD(a, b) tw_floormod((a), (b))",
    "#endif",
    "#ifndef TW_BITCAST",  # T.reinterpret: the bits of a U as a T of the same width
    "template <typename T, typename U> __aicore__ inline T tw_bitcast(U u) {",
    "    static_assert(sizeof(T) == sizeof(U), \"T.reinterpret keeps the width\");",
    "    T t;",
    "    __builtin_memcpy(&t, &u, sizeof(T));",
    "    return t;",
    "}",
    "#define TW_BITCAST(T, U, x) tw_bitcast<T, U>(x)",
    "#endif",
    "#ifndef TW_DEVICE_ASSERT",
    "#define TW_DEVICE_ASSERT(c, msg) assert((c) && (msg))",
    "#endif",
)


class Emitter:
    """Walks one lowered PrimFunc and writes its Ascend C."""

    def __init__(self, func: tirx.PrimFunc, name: str, arch=ARCHS["ascend"]):
        self.func, self.name, self.arch = func, name, arch
        # the memories the kernel has: SIMT functions keep part of UB
        self.memories = memories_with_simt(arch.memories) if has_simt(func) else arch.memories
        self.plan = {entry[0]: (str(entry[1]), int(entry[2]), int(entry[3]))
                     for entry in func.attrs[PLAN_KEY]}
        self.staging = [(pair[0], pair[1]) for pair in (func.attrs.get(STAGING_KEY) or [])]
        self.analyzer = sym.Analyzer()
        self.printer = ExprPrinter(self.var, self.buf, self.analyzer)
        self.lines: list[str] = []
        self.depth = 0
        self.var_names: dict = {}
        self.used: set[str] = set()
        self.core = "AIV"
        self.scope: str | None = None
        self.buffer_names: dict = {}  # buffer -> C identifier
        # the backend's temporaries -> what they hold, in the user's terms
        self.temporaries = dict(func.attrs.get(TEMPS_KEY) or {})
        self.functions: list[str] = []  # written before the kernel (T.SimdVF's, T.SimtVF's)
        self.vf = None  # the vector function being written (rules.simd)
        # (statement handle, core, scope) -> (the statement, whether it projects); see projects
        self.projected: dict[tuple, tuple] = {}

    # -- names and expressions --------------------------------------------------------
    def ident(self, wanted: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in wanted) or "v"
        name, n = base, 1
        while name in self.used:
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        return name

    def var(self, v) -> str:
        if v not in self.var_names:
            self.var_names[v] = self.ident(str(v.name))
        return self.var_names[v]

    def buf(self, buffer) -> str:
        return self.buffer_names[buffer]

    def tile_name(self, buffer) -> str:
        """``buffer`` as error messages name it: the user's name quoted, or what a temporary
        of the backend holds (the message's location is the user's line)."""
        return str(self.temporaries.get(buffer, repr(str(buffer.name))))

    def expr(self, e) -> str:
        """``e`` simplified and printed as Ascend C."""
        if isinstance(e, (int, float)):
            return self.printer.cpp(e)
        # math of what simplifies to constants (the block index of a grid of one) is a value
        return self.printer.cpp(fold_constant_math(simplified(self.analyzer, e)))

    # -- output -----------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def declare(self, text: str) -> None:
        """A definition written before the kernel function, once."""
        if text not in self.functions:
            self.functions.append(text)

    def block(self, head: str):
        emitter = self

        class _Block:
            def __enter__(self):
                emitter.line(f"{head} {{" if head else "{")
                emitter.depth += 1

            def __exit__(self, *exc):
                emitter.depth -= 1
                emitter.line("}")

        return _Block()

    # -- statements -------------------------------------------------------------------
    def projects(self, stmt) -> bool:
        """Whether ``stmt`` has anything for the current core: it is written and taken back.
        The answer is kept per statement, core and scope (with the statement, so that its
        handle is not reused): writing the body of a loop nest asks again for each loop
        around it, in the same state, which would write the innermost body once per level."""
        key = (stmt.__chandle__(), self.core, self.scope) if self.vf is None else None
        if key in self.projected:
            return self.projected[key][1]
        mark = len(self.lines), self.depth, dict(self.var_names), set(self.used)
        functions = len(self.functions)
        self.stmt(stmt)
        found = len(self.lines) > mark[0]
        del self.lines[mark[0]:]
        del self.functions[functions:]
        self.depth, self.var_names, self.used = mark[1], mark[2], mark[3]
        if key is not None:
            self.projected[key] = (stmt, found)
        return found

    def stmt(self, s) -> None:
        kind = type(s).__name__
        getattr(self, f"stmt_{kind}", self.stmt_unknown)(s)

    def stmt_unknown(self, s):
        raise KernelError(f"backend 'ascend' cannot generate code for {statement_term(s)}",
                          span_location(getattr(s, "span", None)))

    def stmt_SeqStmt(self, s):
        for child in s.seq:
            self.stmt(child)

    def stmt_AllocBuffer(self, s):
        pass  # declared at the top of the core's block

    def stmt_Bind(self, s):
        value = self.expr(s.value)
        loads, _ = loads_and_stores(s.value)
        if any(str(b.scope()) != "global" for b in loads):
            # a value the scalar unit reads (GetValue): its type is the cast's, the value that
            # of the read at this line (the emulator's GetValue gives it when the read has run)
            self.line(f"auto {self.var(s.var)} = TW_CAST({ctype(str(s.var.ty))}, {value});")
            return
        self.line(f"{ctype(str(s.var.ty))} {self.var(s.var)} = {value};")

    def stmt_AttrStmt(self, s):
        if s.attr_key == SIMD_VF_KEY:
            return self.emit_rule(lambda: emit_vector_function(self, s), s.span, ("AIV",),
                                  "T.SimdVF")
        if s.attr_key == SIMT_KEY:
            return self.emit_rule(lambda: emit_simt(self, s), s.span, ("AIV",), "T.SimtVF")
        if s.attr_key != SCOPE_KEY:
            return self.stmt(s.body)
        want = "AIC" if str(s.value.value) == "C" else "AIV"
        if want != self.core:
            return None
        self.scope = want
        try:
            self.stmt(s.body)
        finally:
            self.scope = None
        return None

    def stmt_IfThenElse(self, s):
        has_then = self.projects(s.then_case)
        has_else = s.else_case is not None and self.projects(s.else_case)
        if not (has_then or has_else):
            return
        with self.block(f"if ({self.expr(s.condition)})"):
            self.stmt(s.then_case)
        if has_else:
            self.lines[-1] += " else {"
            self.depth += 1
            self.stmt(s.else_case)
            self.depth -= 1
            self.line("}")

    def stmt_For(self, s):
        if SCALAR_KEY in s.annotations:
            return self.emit_rule(lambda: emit_scalar_loop(self, s), s.span, ("AIV",),
                                  "a scalar loop")
        if str(s.annotations.get("tw.loop", "")) == "parallel":
            return self.emit_rule(lambda: parallel_rule(self, s), s.span, "AIV", "T.Parallel")
        if not self.projects(s.body):
            return None
        self.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent))
        v = self.var(s.loop_var)
        lo, hi = self.expr(s.min), self.expr(s.min + s.extent)
        with self.block(f"for (int32_t {v} = {lo}; {v} < {hi}; ++{v})"):
            self.stmt(s.body)
        return None

    def stmt_Evaluate(self, s):
        call = decode(s)
        if call is None:
            if isinstance(s.value, tirx.IntImm):
                return None
            raise KernelError(f"backend 'ascend' cannot generate code for {s.value}",
                              span_location(s.span))
        rule = RULES.get(call.name)
        if rule is None:
            raise KernelError(f"T.{call.name} is not supported by backend 'ascend'; rewrite "
                              "the kernel without it", span_location(call.span))
        cores = core_of(call)
        return self.emit_rule(lambda: rule(self, call), call.span, cores,
                              f"T.{call.name.removeprefix('ascend.')}")

    def emit_rule(self, fn, span, cores, what):
        where = span_location(span)
        if self.scope is not None and cores is not None and self.scope not in cores:
            other = "T.Scope('C') (cube core)" if self.scope == "AIC" else \
                "T.Scope('V') (vector core)"
            raise KernelError(f"{what} runs on the {'/'.join(cores)} core but is inside "
                              f"{other}", where)
        if self.scope is None and cores is not None and self.core not in cores:
            return
        if self.scope is None and cores is None:
            raise KernelError(f"{what} outside T.Scope: put it inside T.Scope('C') or "
                              "T.Scope('V') so the backend knows which core runs it", where)
        try:
            fn()
        except KernelError as exc:
            if exc.location is None:
                raise KernelError(exc.message, where) from exc
            raise
        return

    # -- the file ---------------------------------------------------------------------
    def core_block(self, core: str, body, cid, vid) -> None:
        self.core = core
        if not self.projects(body):
            return
        guard = "ASCEND_IS_AIC" if core == "AIC" else "ASCEND_IS_AIV"
        with self.block(f"if {guard}"):
            for buf, (scope, offset, size) in self.plan.items():
                if (scope in CUBE_SCOPES) != (core == "AIC"):
                    continue
                dt = str(buf.dtype)
                count = size // dtype_bytes(dt)
                self.line(f"LocalTensor<{ctype(dt)}> {self.buf(buf)} = "
                          f"{self.memory_var(scope)}.GetWithOffset<{ctype(dt)}>({count}, "
                          f"{offset});")
                self.line(f"TW_DEBUG_NAME({self.buf(buf)});")
            self.analyzer.bind(cid, tvm.ir.Range.from_min_extent(0, self.blocks))
            self.analyzer.bind(vid, tvm.ir.Range.from_min_extent(0, 2))
            if core == "AIC":
                self.line(f"int32_t {self.var(cid)} = GetBlockIdx();")
                self.line(f"int32_t {self.var(vid)} = 0;")
            else:
                self.line(f"int32_t {self.var(cid)} = GetBlockIdx() / 2;")
                self.line(f"int32_t {self.var(vid)} = GetSubBlockIdx();")
            self.stmt(body)
        self.var_names.pop(cid, None)
        self.var_names.pop(vid, None)
        self.used.discard(str(cid.name))
        self.used.discard(str(vid.name))

    def staging_of(self, call) -> tuple:
        """The (L0A, L0B) staging tiles the memory plan gave a T.gemm_v0."""
        for n, other in enumerate(self.gemms):
            if other.stmt.same_as(call.stmt):
                return self.staging[n]
        raise KernelError("internal error: T.gemm_v0 missing from the memory plan")

    def memory_var(self, scope: str) -> str:
        return scope.split(".")[-1] + "_mem"

    def generate(self, blocks, exception_dump: bool = False) -> None:
        """Write the kernel function (``self.lines``, after the definitions it needs in
        ``self.functions``) for a launch of ``blocks`` AI core groups; its host launch line
        is ``self.launch``."""
        func = self.func
        cid_loop = func.body
        if not (isinstance(cid_loop, tirx.For) and isinstance(cid_loop.body, tirx.For)):
            raise KernelError("backend 'ascend' compiles kernels written with "
                              "'T.Kernel(n, is_npu=True) as (cid, vid)' from "
                              "tilewright_ascend.language")
        vid_loop = cid_loop.body
        self.blocks = blocks
        for alloc in allocations(func):
            self.buffer_names[alloc.buffer] = self.ident(str(alloc.buffer.name))
        for buf in self.plan:
            if buf not in self.buffer_names:  # the staging tiles of gemm_v0
                self.buffer_names[buf] = self.ident(str(buf.name))
        self.gemms = gemm_calls(func)
        self.squares = square_operands(func)
        params = []
        for p in func.params:
            buf = func.buffer_map.get(p, p) if hasattr(func, "buffer_map") else p
            if not isinstance(buf, tirx.Buffer):
                raise KernelError(f"parameter {p.name!r}: backend 'ascend' takes tensor "
                                  "parameters only")
            self.buffer_names[buf] = self.ident(str(buf.name))
            params.append(buf)
        # GM workspaces of the cube/vector split: trailing arguments the executor allocates
        self.workspaces = list(func.attrs.get(WORKSPACES_KEY) or [])
        for buf in self.workspaces:
            self.buffer_names[buf] = self.ident(str(buf.name))
        params += self.workspaces
        # dynamic dimensions (T.dynamic): int32 kernel arguments after the tensors, read
        # from the tensors' shapes at each launch
        self.dims = []
        for index, buf in enumerate(params):
            for axis, dim in enumerate(buf.shape):
                if isinstance(dim, tirx.Var) and all(not d[0].same_as(dim) for d in self.dims):
                    self.dims.append((dim, index, axis))
        self.lines = []
        args = ", ".join([*(f"GM_ADDR {self.buf(b)}_addr" for b in params),
                          *(f"int32_t {self.var(d[0])}" for d in self.dims)])
        if exception_dump:  # the runtime's exception handler finds this by its magic
            args += ", GM_ADDR tw_exception_desc"
        kernel = f"{self.name}_kernel"
        self.kernel_symbol = kernel
        with self.block(f'extern "C" __global__ __aicore__ void {kernel}({args})'):
            self.line("KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);")
            self.line("TPipe pipe;")
            for scope in MEMORIES:
                if any(v[0] == scope for v in self.plan.values()):
                    memory = self.memories[scope]
                    position, size = memory.position, memory.capacity
                    mem = self.memory_var(scope)
                    self.line(f"TBuf<TPosition::{position}> {mem};")
                    self.line(f"pipe.InitBuffer({mem}, {size});")
            for b in params:
                t = ctype(str(b.dtype))
                self.line(f"GlobalTensor<{t}> {self.buf(b)};")
                self.line(f"{self.buf(b)}.SetGlobalBuffer((__gm__ {t}*){self.buf(b)}_addr);")
            for core in CORES:
                self.core_block(core, vid_loop.body, cid_loop.loop_var, vid_loop.loop_var)
        self.host_args = ", ".join([*(f"uint8_t* {self.buf(b)}" for b in params),
                                    *(f"int32_t {self.var(d[0])}" for d in self.dims)])
        call_args = ", ".join([*(self.buf(b) for b in params),
                               *(self.var(d[0]) for d in self.dims)])
        self.grid = blocks if isinstance(blocks, int) else self.expr(blocks)
        if exception_dump:
            self.host_args += ", uint8_t* tw_exception_desc"
            call_args += ", tw_exception_desc"
        self.launch = f"{kernel}<<<{self.grid}, nullptr, stream>>>({call_args});"
        self.params = params


def source_text(emitters: list[Emitter], name: str, soc: str) -> str:
    """The source file of the kernels ``emitters`` wrote (one, or the blocks of a kernel
    sequence in launch order): the prelude, each kernel after the definitions it needs, and
    the host function ``<name>_launch`` that launches them in order on one stream."""
    arch = emitters[0].arch
    functions = []
    for emitter in emitters:
        functions += [f for f in emitter.functions if f not in functions]
    lines = [
        (f"// Ascend C generated by tilewright-ascend {__version__} for kernel "
         f"'{name}' (SoC {soc}, {arch.name})"),
        '#include "kernel_operator.h"',
        *(SIMT_INCLUDES if any(f.startswith(SIMT_ATTRIBUTE) for f in functions) else ()),
        "using namespace AscendC;",
        "",
        "#ifndef TW_DEBUG_NAME",
        "#define TW_DEBUG_NAME(t)",
        "#endif",
        *PRELUDE,
        *SIMT_PRELUDE,
        "",
        *(text for f in functions for text in (f, "")),
    ]
    for emitter in emitters:
        lines += [*emitter.lines, ""]
    lines.append("#ifndef TW_DEVICE_ONLY  // the emulator and the header check leave it out")
    lines += [f"// host launch{f' {n}' if len(emitters) > 1 else ''}: {e.grid} AI core groups "
              "(1 AIC + 2 AIV each)" for n, e in enumerate(emitters)]
    lines.append(f'extern "C" void {name}_launch(void* stream, {emitters[0].host_args}) {{')
    lines += [f"    {e.launch}" for e in emitters]
    lines += ["}", "#endif"]
    return "\n".join(lines) + "\n"


def _grid(func: tirx.PrimFunc):
    grid = func.body.extent if isinstance(func.body, tirx.For) else None
    if grid is None or not (isinstance(grid, tirx.IntImm) or func.attrs.get(PORTABLE_KEY)):
        raise KernelError("backend 'ascend' needs a grid size known at compile time in "
                          "T.Kernel(n, is_npu=True)")
    return int(grid.value) if isinstance(grid, tirx.IntImm) else grid


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    """One kernel, or the blocks of a kernel sequence (:mod:`..transforms.sequence`) as one
    kernel each in launch order, all taking the same arguments."""
    funcs = [f for _, f in mod.functions.items()]
    sequence = len(funcs) > 1 or any(SEQUENCE_KEY in f.attrs for f in funcs)
    funcs.sort(key=lambda f: int(f.attrs[SEQUENCE_KEY][0]) if sequence else 0)
    soc, arch = soc_of(ctx.target), arch_of(ctx.target)
    dump = bool(ctx.pass_configs.get("ascend.exception_dump", False))
    emitters = []
    for func in funcs:
        if sequence and func.attrs.get(WORKSPACES_KEY):
            raise KernelError("backend 'ascend' launches the 'with T.Kernel' blocks of a kernel "
                              "one after another, each with the same arguments; this block "
                              "splits its work between the cube and vector cores through GM "
                              "workspaces of its own, which a kernel sequence does not support "
                              "yet: make it a kernel of its own", span_location(func.span))
        name = f"{ctx.func_name}_{int(func.attrs[SEQUENCE_KEY][0])}" if sequence \
            else ctx.func_name
        emitter = Emitter(func, name, arch)
        emitter.generate(_grid(func), dump)
        emitters.append(emitter)
    text = source_text(emitters, ctx.func_name, soc.name)
    first = emitters[0]
    known = {str(d[0].name) for d in first.dims}

    def blocks(emitter):
        grid = emitter.blocks
        return grid if isinstance(grid, int) else emitter.printer.python(grid, known)

    # workspaces: trailing parameters the executor allocates for the call (the cube/vector
    # split's, or the T.alloc_global buffers the blocks of a sequence share)
    workspaces = int(first.func.attrs[SEQUENCE_KEY][1]) if sequence else \
        len(first.workspaces)
    payload = {"kernel": first.kernel_symbol, "blocks": blocks(first),
               # every launch in order: (kernel, blocks)
               "launches": [[e.kernel_symbol, blocks(e)] for e in emitters],
               "exception_dump": dump,
               "params": [(first.buf(b), str(b.dtype),
                           [int(s) if isinstance(s, tirx.IntImm) else -1 for s in b.shape])
                          for b in first.params],
               "dims": [[str(v.name), index, axis] for v, index, axis in first.dims],
               "workspaces": workspaces,
               # the emulator's memories are the kernel's (the target's, less SIMT's share)
               "capacities": [first.memories[s].capacity for s in EMULATOR_SPACES]}
    return GeneratedSource(text=text, language="ascendc", file_ext="cpp", payload=payload,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="ascendc", file_ext="cpp", generate=generate)
