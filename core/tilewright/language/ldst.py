"""TileLang's explicit loads and stores: ``T.__ldg`` (a read of a global tensor through the
read-only data cache) and the word accesses ``T.ldg32`` / ``T.stg32`` (global memory) and
``T.lds32`` / ``T.sts32`` (shared memory), with their 64-, 128- and 256-bit forms (``T.ldg64``,
``T.stg128``, ``T.lds64`` ...; 256 bits for global memory only, as TileLang has them).

A 32-bit access moves the bits of one to four consecutive elements along a buffer's last
dimension (one float32, two float16, four int8 ...) as one ``uint32``, the first element in
its low bits (the little-endian memory order of every backend); a wider one moves 2, 4 or 8
such words as a vector ``uint32x2`` / ``uint32x4`` / ``uint32x8``, the first word in lane 0
(``T.reinterpret`` reads it as ``float32x2`` ...; ``T.extract_lane`` takes a lane). The
language writes each as the element accesses and bit operations it stands for, so every
backend with vector dtypes computes it; CUDA compiles a word of 32-bit elements to one 32-bit
access and narrower elements to one access each.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import KernelTypeError, kernel_error, user_location
from ..ir import READ_ONLY_LOAD
from . import builder as B
from .buffer import BufferSlice, TileBuffer, as_int, dtype_of, to_expr
from .builder import seq

SHARED = ("shared", "shared.dyn")
WORD_BITS = 32


def read_only_load(load_or_buffer, index=None):
    """TileLang's ``T.__ldg(x[i])`` (or ``T.__ldg(x, i)``): the element ``x[i]`` of a global
    tensor, read through the read-only data cache on CUDA (``__ldg(&x[i])``; a plain load for
    element types ``__ldg`` does not take: bool, float8, float4). The kernel must not write
    ``x`` while it runs: the cache is not kept coherent with such writes. Other backends read
    the element plainly."""
    if isinstance(load_or_buffer, TileBuffer):
        if index is None:
            raise KernelTypeError("T.__ldg(buffer, index) needs the index of the element",
                                  user_location())
        index = list(index) if isinstance(index, (tuple, list)) else [index]
        load = load_or_buffer[tuple(index)]
    else:
        load = load_or_buffer
    if not isinstance(load, tvm.ir.TensorLoad):
        raise KernelTypeError(f"T.__ldg takes an element of a global tensor (x[i]) or a tensor "
                              f"and an index, got {type(load).__name__}", user_location())
    if str(load.source.scope()) != "global":
        raise kernel_error(f"T.__ldg reads a global tensor through the read-only cache; "
                           f"{load.source.name!r} is in {load.source.scope()} memory: read "
                           "its element directly")
    return tirx.call_intrin(str(load.ty), READ_ONLY_LOAD, load)


read_only_load.__name__ = "__ldg"


def _word(value, what: str, scopes: tuple, memory: str, words: int = 1):
    """(buffer, indices of the first element, elements per 32-bit word) of the operand
    ``value`` of an access of ``words`` words: an element (the access starts there), a slice
    along the last dimension of exactly those elements, or a buffer holding them."""
    if isinstance(value, TileBuffer):
        buffer, starts, extents = value.buffer, [0] * value.ndim, list(value.shape)
    elif isinstance(value, BufferSlice):
        buffer, starts, extents = value.buffer, list(value.starts), list(value.extents)
    elif isinstance(value, tvm.ir.TensorLoad):
        buffer, starts, extents = value.source, list(value.indices), None
    else:
        raise KernelTypeError(f"T.{what} expects a buffer, a slice or an element, got "
                              f"{type(value).__name__}", user_location())
    if str(buffer.scope()) not in scopes:
        raise kernel_error(f"T.{what} accesses {memory}; {buffer.name!r} is in "
                           f"{buffer.scope()} memory")
    dtype = str(buffer.dtype)
    bits = tvm.runtime.DataType(dtype).bits
    if dtype == "bool" or bits not in (8, 16, 32) or dtype.startswith("float4"):
        raise kernel_error(f"T.{what} moves whole 8-, 16- or 32-bit elements; {buffer.name!r} "
                           f"holds {dtype}")
    count = WORD_BITS // bits
    if extents is not None:
        sizes = [as_int(e) for e in extents]
        inner_only = all(s == 1 for s in sizes[:-1])
        if not inner_only or sizes[-1] != count * words:
            size = "a 32-bit word is" if words == 1 else f"{words * WORD_BITS} bits are"
            raise kernel_error(f"T.{what}: {size} {count * words} {dtype} element(s) along the "
                               f"last dimension; the region of {buffer.name!r} has shape "
                               f"{tuple(sizes)}")
    return buffer, [to_expr(s) for s in starts], count


def _at(buffer, first, k):
    return tirx.BufferLoad(buffer, [*first[:-1], first[-1] + k]) if k else \
        tirx.BufferLoad(buffer, first)


def _load_word(value, what: str, scopes: tuple, memory: str, pred=None, words: int = 1):
    buffer, first, count = _word(value, what, scopes, memory, words)
    dtype = str(buffer.dtype)
    bits = WORD_BITS // count
    unsigned = f"uint{bits}"
    loaded = []
    for w in range(words):
        word = None
        for k in range(count):
            element = _at(buffer, first, w * count + k)
            field = element if dtype == unsigned else tirx.reinterpret(unsigned, element)
            field = field if bits == WORD_BITS else tirx.Cast("uint32", field)
            part = field if k == 0 else tirx.shift_left(field, tirx.const(k * bits, "uint32"))
            word = part if word is None else tirx.bitwise_or(word, part)
        loaded.append(word)
    value = loaded[0] if words == 1 else \
        tirx.Shuffle(loaded, [tirx.const(w, "int32") for w in range(words)])
    if pred is None:
        return value
    zero = tirx.const(0, "uint32")
    return tirx.if_then_else(to_expr(pred), value,
                             zero if words == 1 else tirx.Broadcast(zero, words))


def _store_word(dst, value, what: str, scopes: tuple, memory: str, pred=None,
                words: int = 1) -> None:
    builder = B.require_kernel(f"T.{what}")
    buffer, first, count = _word(dst, what, scopes, memory, words)
    word = to_expr(value)
    kind = dtype_of(word)
    lanes = tvm.runtime.DataType(kind).lanes
    width = tvm.runtime.DataType(kind).bits * lanes
    stored = "uint32" if words == 1 else f"uint32x{words}"
    if width != WORD_BITS * words or kind == "bool":
        size = "a 32-bit word" if words == 1 else f"{WORD_BITS * words} bits"
        raise KernelTypeError(f"T.{what} stores {size} ({stored}, as "
                              f"T.{what.replace('st', 'ld', 1)} returns); got a {kind} value",
                              user_location())
    if kind != stored:
        word = tirx.reinterpret(stored, word)
    span = B.here()
    body = []
    if words > 1:  # the vector once, its lanes' words from the name
        vector = tirx.Var("words", stored)
        body.append(tirx.Bind(vector, word, span=span))
        word = vector
    dtype = str(buffer.dtype)
    bits = WORD_BITS // count
    unsigned = f"uint{bits}"
    for w in range(words):
        lane = word if words == 1 else tirx.Shuffle([word], [tirx.const(w, "int32")])
        for k in range(count):
            field = lane if k == 0 else tirx.shift_right(lane, tirx.const(k * bits, "uint32"))
            if bits != WORD_BITS:
                field = tirx.Cast(unsigned, tirx.bitwise_and(
                    field, tirx.const((1 << bits) - 1, "uint32")))
            element = field if dtype == unsigned else tirx.reinterpret(dtype, field)
            offset = w * count + k
            index = [*first[:-1], first[-1] + offset] if offset else first
            body.append(tirx.BufferStore(buffer, element, index, span=span))
    body = seq(body)
    builder.emit(body if pred is None else tirx.IfThenElse(to_expr(pred), body, None,
                                                            span=span))


def ldg32(src, pred=None):
    """TileLang's ``T.ldg32(x[i])`` (or ``x[i:i + 2]`` of 16-bit, ``x[i:i + 4]`` of 8-bit
    elements): the 32-bit word those elements of a global tensor make, as a ``uint32`` (the
    first element in the low bits; ``T.reinterpret`` gives it another 32-bit type). With
    ``pred``, the word where ``pred`` holds and 0 where it does not (nothing is read)."""
    return _load_word(src, "ldg32", ("global",), "global memory", pred)


def lds32(src):
    """TileLang's ``T.lds32(s[i])``: :func:`ldg32` of a shared tile."""
    return _load_word(src, "lds32", SHARED, "shared memory")


def stg32(dst, value, pred=None) -> None:
    """TileLang's ``T.stg32(y[i], word)``: the 32-bit ``word`` (a ``uint32``, or another 32-bit
    value taken bit for bit) written to the element(s) of a global tensor it spans
    (:func:`ldg32` read backwards). With ``pred``, written only where ``pred`` holds."""
    _store_word(dst, value, "stg32", ("global",), "global memory", pred)


def sts32(dst, value) -> None:
    """TileLang's ``T.sts32(s[i], word)``: :func:`stg32` into a shared tile."""
    _store_word(dst, value, "sts32", SHARED, "shared memory")


def _wide(kind: str, words: int):
    """TileLang's ``T.<kind><32 * words>``: :func:`ldg32` / :func:`lds32` / :func:`stg32` /
    :func:`sts32` of ``words`` consecutive words, a ``uint32x<words>`` value."""
    name = f"{kind}{WORD_BITS * words}"
    scopes, memory = (("global",), "global memory") if kind[-1] == "g" else \
        (SHARED, "shared memory")
    if kind.startswith("ld"):
        def access(src, pred=None):
            return _load_word(src, name, scopes, memory, pred, words)
        verb = f"the {WORD_BITS * words} bits those elements make, a uint32x{words} vector"
    else:
        def access(dst, value, pred=None) -> None:
            _store_word(dst, value, name, scopes, memory, pred, words)
        verb = f"a uint32x{words} value (or any {WORD_BITS * words}-bit one) written to them"
    access.__name__, access.__qualname__ = name, f"T.{name}"
    access.__doc__ = (f"TileLang's ``T.{name}(x[i:i + n])`` of {memory}: {verb} (word 0 in "
                      f"lane 0, each word as :func:`{kind}32` has it); ``pred`` as there.")
    return access


WIDE = {f"{kind}{WORD_BITS * words}": _wide(kind, words)
        for kind, widths in (("ldg", (2, 4, 8)), ("stg", (2, 4, 8)), ("lds", (2, 4)),
                             ("sts", (2, 4))) for words in widths}

# the language's names, T.__ldg among them (a name with leading underscores: exported through
# this table rather than imported by name)
LDST = {"__ldg": read_only_load, "ldg32": ldg32, "lds32": lds32, "stg32": stg32,
        "sts32": sts32, **WIDE}

__all__ = ["LDST", "WIDE", "ldg32", "lds32", "read_only_load", "stg32", "sts32"]
