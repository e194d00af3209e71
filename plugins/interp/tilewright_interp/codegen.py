"""The interpreter's codegen: the tile IR becomes a plain Python function.

Every statement becomes the Python statement that does the same thing: loops become ``for``
loops (the block grid too, so blocks run one at a time), buffers become NumPy arrays named
after the kernel's buffers, tile ops become calls into the rule table (:mod:`.lowering`).
The source is what runs: step through it with a debugger and print any tile by name.
"""

from __future__ import annotations

import keyword
import re

import tvm
from tilewright.errors import UnsupportedOpError, span_location
from tilewright.ir import ATOMIC_LOAD, ATOMIC_PREV, decode
from tilewright.ir.schema import Region as IRRegion
from tilewright.plugin import DeviceCodegen, GeneratedSource
from tvm import sym, tirx

from .runtime import EMULATED, lanes_of

_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%",
           "EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">=",
           "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^", "LShift": "<<",
           "RShift": ">>"}
# unsigned arithmetic wraps modulo 2**bits (a Python int operand would go below zero or
# past the dtype's range and stay there)
_WRAPPING = ("Add", "Sub", "Mul", "LShift")
_MATH = {"exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
         "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
         "floor", "ceil", "trunc", "round", "nearbyint", "fabs", "sigmoid", "erf", "pow", "fmod",
         "atan2", "hypot", "copysign", "isnan", "isinf"}
_FLOAT = ("float", "bfloat")


def _dtype(expr) -> str:
    return str(expr.ty) if hasattr(expr, "ty") else str(expr.dtype)


class _Emitter:
    """Walks one PrimFunc and writes its Python source."""

    def __init__(self, func: tirx.PrimFunc, name: str):
        self.func, self.name = func, name
        self.lines: list[str] = []
        self.consts: list[str] = []
        self.names: dict[int, str] = {}  # object handle -> Python name
        self.taken: set[str] = {"np", "rt", "RULES", "atomic_prev"}
        self.buffers: dict[int, tirx.Buffer] = {}
        self.blocks: list[str] = []
        # the loops' ranges: an element index it proves non-negative is emitted as it is
        self.analyzer = sym.Analyzer()

    # -- names ---------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint or "v")
        if not base or base[0].isdigit() or keyword.iskeyword(base):
            base = "v_" + base
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name

    def var(self, var) -> str:
        key = var.__chandle__()
        if key not in self.names:
            self.names[key] = self.fresh(var.name)
        return self.names[key]

    def buf(self, buffer) -> str:
        key = buffer.__chandle__()
        if key not in self.names:
            self.names[key] = self.fresh(buffer.name)
            self.buffers[key] = buffer
        return self.names[key]

    def const(self, value: float, dtype: str) -> str:
        name = f"_c{len(self.consts)}"
        emulated = dtype in EMULATED
        cast = "np.float32" if emulated else f"np.{dtype}"
        text = f"{cast}(float.fromhex({float(value).hex()!r}))"
        if emulated:
            text = f"rt.round_to({text}, {dtype!r})"
        self.consts.append(f"{name} = {text}")
        return name

    # -- expressions ---------------------------------------------------------------------
    def expr(self, e) -> str:
        kind = type(e).__name__
        if isinstance(e, tirx.Var):
            return self.buf(e) if tirx.buffer.is_buffer_var(e) else self.var(e)
        if kind == "IntImm":
            return str(bool(e.value)) if _dtype(e) == "bool" else str(int(e.value))
        if kind == "FloatImm":
            return self.const(e.value, _dtype(e))
        if kind == "StringImm":
            return repr(str(e.value))
        if kind == "TensorLoad":
            load = f"{self.buf(e.source)}[{self.index(e.indices, e.source)}]"
            # an element of a vector dtype's buffer: its lanes, a copy (not a view)
            return f"{load}.copy()" if lanes_of(str(e.source.dtype))[1] > 1 else load
        if kind == "Shuffle":
            vectors = ", ".join(self.expr(v) for v in e.vectors)
            indices = ", ".join(str(int(i)) for i in e.indices)
            return f"rt.shuffle([{vectors}], [{indices}])"
        if kind == "Broadcast":
            return f"rt.broadcast({self.expr(e.value)}, {int(e.lanes)})"
        if kind == "Ramp":
            return f"rt.ramp({self.expr(e.base)}, {self.expr(e.stride)}, {int(e.lanes)})"
        if kind in _BINARY:
            text = f"({self.expr(e.a)} {_BINARY[kind]} {self.expr(e.b)})"
            if kind in _WRAPPING and _dtype(e).startswith("uint"):
                return f"rt.cast({text}, {_dtype(e)!r})"  # Python ints do not wrap
            return text
        if kind in ("Div", "Mod"):
            if _dtype(e).startswith(_FLOAT):
                op = "/" if kind == "Div" else "%"
                return f"({self.expr(e.a)} {op} {self.expr(e.b)})"
            return f"rt.t{kind.lower()}({self.expr(e.a)}, {self.expr(e.b)})"
        if kind in ("Min", "Max"):
            if lanes_of(_dtype(e))[1] > 1:  # lane by lane
                return f"np.{kind.lower()}imum({self.expr(e.a)}, {self.expr(e.b)})"
            return f"{kind.lower()}({self.expr(e.a)}, {self.expr(e.b)})"
        if kind == "And":
            return f"({self.expr(e.a)} and {self.expr(e.b)})"
        if kind == "Or":
            return f"({self.expr(e.a)} or {self.expr(e.b)})"
        if kind == "Not":
            return f"(not {self.expr(e.a)})"
        if kind == "BitwiseNot":
            text = f"(~{self.expr(e.a)})"
            if _dtype(e).startswith("uint"):  # ~ of a Python int (a constant) is negative
                return f"rt.cast({text}, {_dtype(e)!r})"
            return text
        if kind == "Select" and lanes_of(_dtype(e))[1] > 1:  # lane by lane
            return (f"np.where({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
        if kind == "Select":
            return (f"({self.expr(e.true_value)} if {self.expr(e.condition)} else "
                    f"{self.expr(e.false_value)})")
        if kind == "Cast":
            return f"rt.cast({self.expr(e.value)}, {_dtype(e)!r})"
        if kind == "Let":
            return f"(lambda {self.var(e.var)}: {self.expr(e.body)})({self.expr(e.value)})"
        if kind == "Call":
            return self.call(e)
        raise UnsupportedOpError(f"backend 'interp' cannot evaluate a {kind} expression "
                                 f"({e}); add it to tilewright_interp.codegen")

    def call(self, e) -> str:
        op = e.op.name if isinstance(e.op, tvm.ir.Op) else str(e.op)
        short = op.split(".", 1)[-1]
        args = [self.expr(a) for a in e.args]
        if short == "if_then_else":  # lazy, like the hardware: the untaken side may be out of
            return f"({args[1]} if {args[0]} else {args[2]})"  # bounds
        if short in _MATH:
            return f"rt.{short}({', '.join(args)})"
        if short in ("clz", "popcount"):  # of the operand's bits: its width counts
            return f"rt.{short}({args[0]}, {_dtype(e.args[0])!r})"
        if short in ("abs",):
            return f"rt.abs({args[0]})"
        if short == "reinterpret" and _dtype(e).startswith("T.handle"):
            return f"int({args[0]})"  # an address (T.make_tensor): the integer itself
        if short == "reinterpret":
            return f"rt.reinterpret({args[0]}, {_dtype(e.args[0])!r}, {_dtype(e)!r})"
        if op in ATOMIC_PREV:
            kind = ATOMIC_PREV[op]
            load = e.args[0]
            return (f"atomic_prev({kind!r}, {self.buf(load.source)}, "
                    f"({self.index(load.indices, load.source)},), {args[1]}, "
                    f"{str(load.source.dtype)!r})")
        if op == ATOMIC_LOAD:  # blocks run one at a time: any load is whole and in order
            return args[0]
        raise UnsupportedOpError(f"backend 'interp' cannot evaluate call {op}; add it to "
                                 "tilewright_interp.codegen or tilewright_interp.runtime")

    def index(self, indices, buffer) -> str:
        """The element index into ``buffer``. NumPy counts a negative index from the end of its
        axis, where the hardware reads before the start: an index the loops' ranges do not
        prove non-negative goes through ``rt.element_index``, which raises for it."""
        if not len(indices):
            return "()"
        parts = []
        for axis, i in enumerate(indices):
            text = self.expr(i)
            if not self.analyzer.can_prove(i >= 0):
                text = f"rt.element_index({text}, {str(buffer.name)!r}, {axis})"
            parts.append(text)
        return ", ".join(parts)

    def region(self, r: IRRegion) -> str:
        starts = ", ".join(self.expr(s) if not isinstance(s, int) else str(s) for s in r.starts)
        extents = ", ".join(self.expr(x) if not isinstance(x, int) else str(x)
                            for x in r.extents)
        return (f"rt.Region({self.buf(r.buffer)}, ({starts},), ({extents},), "
                f"{str(r.buffer.dtype)!r}, {str(r.buffer.name)!r})")

    # -- statements ----------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def block(self, s, depth: int) -> None:
        """The statements of a Python block: ``pass`` when ``s`` emits none (a loop or branch
        whose body simplified to a no-op)."""
        before = len(self.lines)
        self.stmt(s, depth)
        if len(self.lines) == before:
            self.emit(depth, "pass")

    def stmt(self, s, depth: int) -> None:
        kind = type(s).__name__
        line = span_location(s.span) if getattr(s, "span", None) is not None else None
        if kind == "SeqStmt":
            for child in s.seq:
                self.stmt(child, depth)
        elif kind == "For":
            v = self.var(s.loop_var)
            lo, ext = self.expr(s.min), self.expr(s.extent)
            rng = f"range({ext})" if lo == "0" else f"range({lo}, {lo} + {ext})"
            block = s.kind == tirx.ForKind.THREAD_BINDING
            # a loop's own range holds inside it (a variable two loops share is rebound)
            self.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent),
                               allow_override=True)
            self.emit(depth, f"for {v} in {rng}:" + ("  # block index" if block else ""))
            if block:
                self.blocks.append(v)
            self.block(s.body, depth + 1)
            if block:
                self.blocks.pop()
        elif kind == "While":
            self.emit(depth, f"while {self.expr(s.condition)}:")
            self.block(s.body, depth + 1)
        elif kind == "IfThenElse":
            self.emit(depth, f"if {self.expr(s.condition)}:" + (f"  # {line}" if line else ""))
            self.block(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.block(s.else_case, depth + 1)
        elif kind == "BufferStore":
            value = self.expr(s.value)
            scalar = lanes_of(str(s.buffer.dtype))[0]
            if scalar in EMULATED:
                value = f"rt.round_to({value}, {scalar!r})"
            where = f"  # {line}" if line else ""  # the executor names it for an IndexError
            self.emit(depth, f"{self.buf(s.buffer)}[{self.index(s.indices, s.buffer)}] = "
                      f"{value}{where}")
        elif kind == "DeclBuffer" and isinstance(s.data, tirx.Var):
            # T.make_tensor: the memory at an address the kernel read
            shape = ", ".join(self.expr(x) for x in s.buffer.shape)
            where = f"  # {line}" if line else ""  # the executor names it for a refusal
            self.emit(depth, f"{self.buf(s.buffer)} = rt.at_address({self.var(s.data)}, "
                      f"({shape},), {str(s.buffer.dtype)!r}){where}")
        elif kind == "DeclBuffer" and getattr(s, "data", None) is not None:
            # a view of a global tensor's memory: T.Tensor(shape, dtype, A.data)
            base = s.data.args[0]
            shape = ", ".join(self.expr(x) for x in s.buffer.shape)
            self.emit(depth, f"{self.buf(s.buffer)} = rt.view({self.buf(base)}, ({shape},), "
                      f"{str(base.dtype)!r}, {str(s.buffer.dtype)!r})")
        elif kind in ("AllocBuffer", "DeclBuffer"):
            buffer = s.buffer
            shape = ", ".join(self.expr(x) for x in buffer.shape)
            name = self.buf(buffer)
            self.emit(depth, f"{name} = rt.alloc(({shape},), {str(buffer.dtype)!r})"
                      f"  # {buffer.scope()}")
        elif kind in ("Bind", "LetStmt"):
            where = f"  # {line}" if line else ""
            self.emit(depth, f"{self.var(s.var)} = {self.expr(s.value)}{where}")
            if kind == "LetStmt":
                self.stmt(s.body, depth)
        elif kind == "AttrStmt":
            self.stmt(s.body, depth)
        elif kind == "AssertStmt":
            msg = ", ".join(str(m.value) if hasattr(m, "value") else str(m)
                            for m in (s.message if isinstance(s.message, (list, tuple)) or
                                      hasattr(s.message, "__len__") and
                                      not isinstance(s.message, str) else [s.message]))
            self.emit(depth, f"if not {self.expr(s.condition)}:")
            self.emit(depth + 1, f"raise RuntimeError({msg!r})")
        elif kind == "Evaluate":
            self.evaluate(s, depth, line)
        else:
            raise UnsupportedOpError(f"backend 'interp' cannot run a {kind} statement; add it "
                                     "to tilewright_interp.codegen", line)

    def evaluate(self, s, depth: int, line) -> None:
        call = decode(s)
        if call is None:
            if isinstance(s.value, tvm.ir.Call):
                self.emit(depth, self.expr(s.value))
            return
        args = [f"({', '.join(self.blocks)}{',' if len(self.blocks) == 1 else ''})"]
        for operand in call.schema.operands:
            value = call.operands[operand.name]
            text = self.region(value) if isinstance(value, IRRegion) else self.expr(value)
            args.append(f"{operand.name}={text}")
        args += [f"{k}={v!r}" for k, v in call.attrs.items()]
        where = f"  # {line}" if line else ""
        self.emit(depth, f"RULES[{call.name!r}]({', '.join(args)}){where}")

    # -- the function ----------------------------------------------------------------------
    def function(self) -> str:
        func = self.func
        params, prologue, epilogue = [], [], []
        for param in func.params:
            buffer = param if tirx.buffer.is_buffer_var(param) else None
            if buffer is None:
                params.append(self.var(param))
                continue
            arg = self.fresh(f"{buffer.name}_arg")
            params.append(arg)
            name = self.buf(buffer)
            dtype = str(buffer.dtype)
            prologue.append(f"{name} = rt.bind({arg}, {dtype!r}, {str(buffer.name)!r})")
            for axis, dim in enumerate(buffer.shape):
                if isinstance(dim, tirx.Var) and not tirx.buffer.is_buffer_var(dim) and \
                        dim.__chandle__() not in self.names:
                    prologue.append(f"{self.var(dim)} = {name}.shape[{axis}]")
            # a T.StridedTensor's array is a view with the argument's strides; a symbol among
            # them is the argument's stride, in elements
            for axis, stride in enumerate(buffer.strides):
                if isinstance(stride, tirx.Var) and stride.__chandle__() not in self.names:
                    prologue.append(f"{self.var(stride)} = rt.stride({arg}, {axis})")
            if dtype in EMULATED:
                epilogue.append(f"rt.write_back({arg}, {name}, {dtype!r})")
        body_start = len(self.lines)
        self.stmt(func.body, 1)
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        head = [f"def {self.name}({', '.join(params)}):",
                f'    """Kernel {self.name!r}: runs every block of the grid, one at a time."""']
        return "\n".join([*head, *("    " + p for p in prologue), *body,
                          *("    " + e for e in epilogue), ""])


HEADER = '''"""Generated by tilewright-interp from the tile program {name!r}.

Each buffer is a NumPy array named after the kernel's buffer; blocks run one at a time in the
outer loops. Set a breakpoint on any line and print any tile.
"""

import numpy as np

from tilewright_interp import runtime as rt
from tilewright_interp.lowering import RULES, atomic_prev

'''


def python_name(name: str) -> str:
    name = re.sub(r"\W", "_", name) or "kernel"
    return f"k_{name}" if name[0].isdigit() or keyword.iskeyword(name) else name


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    gvar, func = next(iter(mod.functions.items()))
    emitter = _Emitter(func, "")
    # a fresh name: a kernel called like a helper of the module (atomic_prev, rt) would
    # shadow it
    name = emitter.name = emitter.fresh(
        python_name(ctx.func_name if ctx is not None else gvar.name_hint))
    body = emitter.function()
    text = HEADER.format(name=name) + "\n".join(emitter.consts) + "\n\n\n" + body
    return GeneratedSource(text=text, language="python", file_ext="py", payload=None,
                           entry=name)


CODEGEN = DeviceCodegen(language="python", file_ext="py", generate=generate)
