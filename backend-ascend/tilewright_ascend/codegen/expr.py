"""The one expression printer of the backend: TIR scalar expressions as Ascend C, and grid sizes
as Python (the executor evaluates those at launch).

A load of a tile element prints as the scalar unit's ``GetValue`` of the flattened index (in a
SIMT vector function, a read through the tile's pointer);
variables print through a naming callback (the emitter's C identifiers). Floor division and
modulo print as C's ``/`` and ``%`` only where the operands are provably non-negative and
positive; elsewhere as ``TW_FLOORDIV``/``TW_FLOORMOD``, which round towards minus infinity
(C's operators truncate towards zero).

TIR's integer arithmetic wraps modulo 2**bits; C++ leaves a signed result outside its type
undefined (the compiler may assume it never happens) and computes on integers narrower than
``int`` as ``int``. So an integer ``+``, ``-``, ``*`` or ``<<`` of a signed or narrow type prints
through the unsigned type of its width, ``TW_CAST(int32_t, (TW_CAST(uint32_t, a) +
TW_CAST(uint32_t, b)))``, unless the analyzer bounds its value within its type (an index of
bounded loop variables prints as written); the result of the other arithmetic and bitwise
operators on the narrow types is cast back to its type, so it wraps where TIR's does before a
comparison, a ``T.max`` or a division reads it. C++ may hold a ``half`` result in float
(excess precision); each one is cast to ``half``, which rounds it as TIR's float16 arithmetic
does after each operator.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tvm import tirx

from ..analysis.buffers import flat_index
from ..facts.dtypes import ctype, int_range, rounded_back, wrapping_ctype

_C_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%", "EQ": "==", "NE": "!=",
             "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "And": "&&", "Or": "||",
             "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^", "LShift": "<<",
             "RShift": ">>"}  # >> of a negative signed integer: arithmetic (C++20, bisheng)
# the operators whose result has the operands' type (the others give bool)
_ARITH = {"Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "BitwiseAnd", "BitwiseOr",
          "BitwiseXor", "LShift", "RShift", "BitwiseNot"}
# the operators whose C++ result may leave a signed type or compute as int: printed through the
# unsigned type where the analyzer does not bound them within their type
_WRAPPING = {"Add": "+", "Sub": "-", "Mul": "*", "LShift": "<<"}
# the operators and casts whose result the analyzer bounds as if it kept its mathematical value
_BOUNDED = (tirx.Add, tirx.Sub, tirx.Mul, tirx.LShift, tirx.Cast)
_INFINITY = (1 << 63) - 1  # the analyzer's bound of an unbounded int64 (and its negation)
# TIR calls the scalar unit computes, each a macro of the generated file's prelude (T.isnan;
# fabs, which T.isinf and T.isfinite compare with infinity)
_C_CALLS = {"tirx.isnan": "TW_ISNAN", "tirx.fabs": "TW_FABS"}
_FLOOR = {"FloorDiv": ("/", "TW_FLOORDIV"), "FloorMod": ("%", "TW_FLOORMOD")}
_PY_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%"}


class ExprPrinter:
    """Prints expressions; ``name(var)`` gives a variable's identifier, ``buffer(buf)`` a
    buffer's, ``analyzer`` what holds and the bounds of values (the enclosing loops bound) and
    ``load(buf, index)`` a tile element's read (default: the scalar unit's ``GetValue``)."""

    def __init__(self, name, buffer, analyzer, load=None):
        self.name, self.buffer, self.analyzer = name, buffer, analyzer
        self.load = load or (lambda buf, index: f"{self.buffer(buf)}.GetValue({index})")

    def proves(self, cond) -> bool:
        return bool(self.analyzer.can_prove(cond))

    # -- Ascend C ----------------------------------------------------------------------------
    def cpp(self, e) -> str:
        kind = type(e).__name__
        if kind in _WRAPPING and wrapping_ctype(e.ty) and not self._exact(e):
            return self._wrapped(e, kind)
        text = self._cpp(e)
        if kind in _ARITH and rounded_back(e.ty):  # back from int or float to the TIR type
            return f"TW_CAST({ctype(str(e.ty))}, {text})"
        return text

    def _wrapped(self, e, kind: str) -> str:
        """``e``, an integer ``+``, ``-``, ``*`` or ``<<``, computed in the unsigned type of its
        width (which wraps in C++) and converted back (modulo 2**bits)."""
        wide = wrapping_ctype(e.ty)
        a = f"TW_CAST({wide}, {self.cpp(e.a)})"
        b = self.cpp(e.b) if kind == "LShift" else f"TW_CAST({wide}, {self.cpp(e.b)})"
        return f"TW_CAST({ctype(str(e.ty))}, ({a} {_WRAPPING[kind]} {b}))"

    def _exact(self, e) -> bool:
        """Whether ``e`` and every integer ``+``, ``-``, ``*``, ``<<`` and cast inside it keep
        their mathematical values: the analyzer's bounds assume they do, so then they bound
        what C++ computes. A loaded value's bound is its type's (the index only picks it)."""
        leaves = []

        def visit(x):
            if isinstance(x, tvm.ir.TensorLoad):
                return tvm_ffi.WalkResult.SKIP
            if isinstance(x, _BOUNDED) and not self._keeps_value(x):
                leaves.append(x)
            return tvm_ffi.WalkResult.ADVANCE

        tvm_ffi.structural_walk(e, visit, order="pre")
        return not leaves

    def _keeps_value(self, x) -> bool:
        """Whether the analyzer bounds the integer operation or cast ``x`` within its type."""
        span = int_range(x.ty)
        if span is None:  # a floating or bool value: the analyzer does not bound it
            return True
        if isinstance(x, tirx.Cast):
            if int_range(x.value.ty) is None:  # from a float: the analyzer takes the whole type
                return True
            x = x.value
        bound = self.analyzer.const_int_bound(x)
        return -_INFINITY < bound.min_value and bound.max_value < _INFINITY and \
            span[0] <= bound.min_value and bound.max_value <= span[1]

    def _cpp(self, e) -> str:
        if isinstance(e, bool):
            return "true" if e else "false"
        if isinstance(e, (int, float)):
            return repr(e)
        kind = type(e).__name__
        if kind == "IntImm":
            if str(e.ty) == "bool":
                return "true" if e.value else "false"
            # C++ has no literal for int64's minimum: '-9223372036854775808' negates a literal
            # no signed type holds
            return "(-9223372036854775807LL - 1)" if e.value == -2 ** 63 else str(e.value)
        if kind == "FloatImm":
            return self._float(e)
        if kind == "Var":
            return self.name(e)
        if kind == "TensorLoad":
            return self.load(e.source, self.cpp(flat_index(e.source, e.indices)))
        if kind in _C_BINARY:
            return f"({self.cpp(e.a)} {_C_BINARY[kind]} {self.cpp(e.b)})"
        if kind in _FLOOR:
            return self._floor(e, kind)
        if kind in ("Min", "Max"):  # no min/max for scalars of mixed types; loads stay lazy
            return f"TW_{kind.upper()}({self.cpp(e.a)}, {self.cpp(e.b)})"
        if kind == "Not":
            return f"(!{self.cpp(e.a)})"
        if kind == "BitwiseNot":
            return f"(~{self.cpp(e.a)})"
        if kind == "Cast":
            return f"TW_CAST({ctype(str(e.ty))}, {self.cpp(e.value)})"
        if kind == "Call" and isinstance(e.op, tvm.ir.Op) and str(e.op.name) in _C_CALLS:
            return f"{_C_CALLS[str(e.op.name)]}({self.cpp(e.args[0])})"
        if kind == "Call" and isinstance(e.op, tvm.ir.Op) and str(e.op.name) == "tirx.reinterpret":
            value = e.args[0]
            return f"TW_BITCAST({ctype(str(e.ty))}, {ctype(str(value.ty))}, {self.cpp(value)})"
        if kind == "Select" or (kind == "Call" and isinstance(e.op, tvm.ir.Op) and
                                str(e.op.name).endswith(".if_then_else")):
            cond, yes, no = (e.condition, e.true_value, e.false_value) if kind == "Select" \
                else e.args
            arms = [self.cpp(yes), self.cpp(no)]
            if str(e.ty) in ("float16", "bfloat16"):  # C++ computes half arithmetic in float:
                # both arms of ?: in the select's type (the headers' types do not mix)
                arms = [f"TW_CAST({ctype(str(e.ty))}, {a})" for a in arms]
            return f"TW_SELECT({self.cpp(cond)}, {arms[0]}, {arms[1]})"
        why = " (A2's scalar unit has no math functions: the vector unit computes them for " \
            "the element stores of T.Parallel and serial loops, on arguments of the dtypes its " \
            "instructions take)" if kind == "Call" else ""
        raise KernelError(f"backend 'ascend' has neither a vector instruction nor a scalar-unit "
                          f"form for {e}{why}")

    def _floor(self, e, kind: str) -> str:
        if not str(e.ty).startswith(("int", "uint")):
            raise KernelError(f"backend 'ascend' prints floor division and modulo of integers; "
                              f"{e} is {e.ty}")
        a, b = self.cpp(e.a), self.cpp(e.b)
        c_op, floor = _FLOOR[kind]
        if self.proves(e.a >= 0) and self.proves(e.b > 0):
            return f"({a} {c_op} {b})"
        return f"{floor}({a}, {b})"

    @staticmethod
    def _float(e) -> str:
        value = float(e.value)
        if value != value or value in (float("inf"), float("-inf")):
            text = "__builtin_nanf(\"\")" if value != value else \
                ("-" if value < 0 else "") + "__builtin_inff()"
            return f"(({ctype(str(e.ty))}){text})"
        return f"{value!r}" + ("f" if str(e.ty) != "float64" else "")

    # -- Python (grid sizes over dynamic dimensions) -------------------------------------------
    def python(self, e, known: set) -> str:
        kind = type(e).__name__
        if kind == "IntImm":
            return str(int(e.value))
        if kind == "Var" and str(e.name) in known:
            return str(e.name)
        if kind in _PY_BINARY:
            return f"({self.python(e.a, known)} {_PY_BINARY[kind]} {self.python(e.b, known)})"
        if kind in ("Min", "Max"):
            return f"{kind.lower()}({self.python(e.a, known)}, {self.python(e.b, known)})"
        raise KernelError(f"backend 'ascend' cannot compute the grid size {e} at launch "
                          f"({kind}); use tensor dimensions and + - * // % min max")
