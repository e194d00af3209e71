"""Random numbers in a kernel: ``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``.

TileLang's names, with cuRAND's device semantics for its default generator
(``curandStatePhilox4_32_10_t``): ``T.rng_init(seed, seq, off)`` is ``curand_init(seed,
subsequence, offset, &state)``, ``T.rng_rand()`` is ``curand(&state)``,
``T.rng_rand_float(32 | 64, "uniform" | "normal")`` is ``curand_uniform`` /
``curand_uniform_double`` / ``curand_normal`` / ``curand_normal_double``. The generator
is written here as plain integer and floating-point code (the facts below follow the vendor
headers ``curand_philox4x32_x.h``, ``curand_kernel.h``, ``curand_uniform.h`` and
``curand_normal.h`` of cuRAND 10.4, named per function), so every backend draws the same
numbers: the integers and uniform values bit for bit, the normal values up to the rounding
of the backend's ``log``, ``sin`` and ``cos`` (cuRAND's device code uses ``__sincosf``).
``tests/language/test_random.py`` checks them against the vendor's own code built for the
host.

The state is per thread, as CUDA's: a ``local`` array of the kernel, so thread-level code
(``tx = T.get_thread_binding()``) draws from its thread's state. A ``T.Parallel`` loop that
draws runs its iterations in order, which is the meaning TileLang's code has on a block of
one thread; on a block of more threads which thread draws which element would depend on how
a backend splits the loop, so it is refused.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import tirx

from ..errors import kernel_error
from . import builder as B
from .buffer import declare, to_expr
from .frames import IN_ORDER, get_block_binding
from .threads import get_thread_binding

# TileLang accepts three cuRAND generators; the other two skip ahead with cuRAND's
# precomputed matrices (curand_precalc.h), which are not written here
PHILOX = "curandStatePhilox4_32_10_t"
GENERATORS = ("curandStateMRG32k3a_t", PHILOX, "curandStateXORWOW_t")

# curand_philox4x32_x.h: the round multipliers and the Weyl key increments
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
PHILOX_ROUNDS = 10
# curand_globals.h: CURAND_2POW32_INV (a float equal to 2**-32), CURAND_2POW32_INV_2PI (the
# float product 2.3283064e-10f * 6.2831855f), CURAND_2POW32_INV_DOUBLE (2**-32),
# CURAND_2POW53_INV_DOUBLE, CURAND_PI_DOUBLE
INV_2POW32 = float(np.float32(2.3283064e-10))
INV_2POW32_DOUBLE = 2.3283064365386963e-10
INV_2POW32_2PI = float(np.float32(np.float32(2.3283064e-10) * np.float32(6.2831855)))
INV_2POW53 = 1.1102230246251565e-16
PI = 3.1415926535897931

# the uint32 state array: curandStatePhilox4_32_10's ctr, key, STATE (the next output word),
# output, and the Box-Muller flags of curand_normal and curand_normal_double
CTR, KEY, POS, OUT, FLAG32, FLAG64 = 0, 4, 6, 7, 11, 12
STATE_WORDS = 13
RNG = "rng"  # the kernel frame's info key: the state's buffers


def _u32(value) -> tirx.PrimExpr:
    return tirx.const(int(value) & 0xFFFFFFFF, "uint32")


def _u64(expr) -> tirx.PrimExpr:
    return tirx.Cast("uint64", expr)


def _u64c(value: int) -> tirx.PrimExpr:
    return tirx.const(value, "uint64")


class _Emitter:
    """The statements of one call (at the user's line) on a kernel's generator state, and
    fresh names for their values."""

    def __init__(self, state):
        self.state = state
        self.span = B.here()

    def word(self, index: int) -> tirx.PrimExpr:
        return tirx.BufferLoad(self.state.words, [tirx.const(index, "int32")])

    def set_word(self, index: int, value) -> tirx.Stmt:
        return tirx.BufferStore(self.state.words, value, [tirx.const(index, "int32")],
                                span=self.span)

    def bind(self, name: str, value, out: list) -> tirx.Var:
        var = tirx.Var(name, value.ty)
        out.append(tirx.Bind(var, value, span=self.span))
        return var

    def refill(self, out: list) -> None:
        """``state->output = curand_Philox4x32_10(state->ctr, state->key)``: ten rounds of
        _philox4x32round, the key bumped by the Weyl increments between them. Each round
        reads the words the last one stored (the first round, the counter): names bound to
        names of earlier rounds would make TVM's analyses of the compiled code grow as 4 to
        the power of the rounds."""
        source = CTR
        for r in range(PHILOX_ROUNDS):
            c = [self.bind("rng_c", self.word(source + i), out) for i in range(4)]
            k0 = self.word(KEY) + _u32(r * PHILOX_W[0]) if r else self.word(KEY)
            k1 = self.word(KEY + 1) + _u32(r * PHILOX_W[1]) if r else self.word(KEY + 1)
            p0 = self.bind("rng_p", _u64(_u32(PHILOX_M[0])) * _u64(c[0]), out)
            p1 = self.bind("rng_p", _u64(_u32(PHILOX_M[1])) * _u64(c[2]), out)
            words = (tirx.Cast("uint32", p1 >> _u64c(32)) ^ c[1] ^ k0, tirx.Cast("uint32", p1),
                     tirx.Cast("uint32", p0 >> _u64c(32)) ^ c[3] ^ k1, tirx.Cast("uint32", p0))
            out.extend(self.set_word(OUT + i, w) for i, w in enumerate(words))
            source = OUT

    def increment(self) -> tirx.Stmt:
        """Philox_State_Incr(state): the 128-bit counter plus one (a word that wraps to 0
        carries into the next)."""
        stmt = self.set_word(CTR + 3, self.word(CTR + 3) + _u32(1))
        for i in (2, 1, 0):
            stmt = tirx.SeqStmt([self.set_word(CTR + i, self.word(CTR + i) + _u32(1)),
                                 tirx.IfThenElse(self.word(CTR + i) == _u32(0), stmt, None,
                                                 span=self.span)])
        return stmt

    def next_block(self, out: list) -> None:
        """The counter plus one and the output of the new counter."""
        out.append(self.increment())
        self.refill(out)


def _pick(values: list, index) -> tirx.PrimExpr:
    """``values[index]`` of a value ``index`` in ``0 .. len(values) - 1``, as a selection."""
    expr = values[-1]
    for k in range(len(values) - 2, -1, -1):
        expr = tirx.Select(index == _u32(k), values[k], expr)
    return expr


class _State:
    """A kernel's generator: the uint32 state array, and the arrays of the normal pairs'
    second values (made when a kernel first draws a normal float of that width)."""

    def __init__(self, kernel, words):
        self.kernel, self.words, self.normals = kernel, words, {}

    def allocate(self, buffer) -> None:
        """At the top of the kernel, as TileLang declares cuRAND's state at function scope
        (a generator set up in one branch is drawn from after it)."""
        self.kernel.stmts.insert(0, tirx.AllocBuffer(buffer, span=B.here()))

    def normal_buffer(self, bit: int):
        """``[value, second value]`` of the Box-Muller pairs of ``bit``-bit floats."""
        if bit not in self.normals:
            self.normals[bit] = declare(f"{self.words.name}_normal{bit}", (2,),
                                        f"float{bit}", "local")
            self.allocate(self.normals[bit])
        return self.normals[bit]


def _split64(value, what: str) -> tuple:
    """The low and high 32 bits of ``value`` as C's conversion to ``unsigned long long``
    makes them."""
    if isinstance(value, bool) or isinstance(value, float):
        raise kernel_error(f"T.rng_init's {what} is an integer, got {value!r}")
    if isinstance(value, int):
        value &= (1 << 64) - 1
        return _u32(value), _u32(value >> 32)
    expr = to_expr(value)
    if not str(expr.ty).startswith(("int", "uint")):
        raise kernel_error(f"T.rng_init's {what} is an integer, got a {expr.ty} value")
    wide = _u64(expr)
    return tirx.Cast("uint32", wide), tirx.Cast("uint32", wide >> _u64c(32))


def _state(builder, what: str) -> _State:
    state = builder.enclosing("kernel").info.get(RNG)
    if state is None:
        raise kernel_error(f"{what} draws from the generator T.rng_init(seed, ...) sets up; "
                           "call T.rng_init earlier in the kernel")
    return state


def rng_init(seed, seq=None, off=0, generator: str = PHILOX):
    """``T.rng_init(seed, seq, off)``: set up this thread's generator as
    ``curand_init(seed, seq, off, &state)`` does: Philox-4x32-10 keyed by the 64-bit
    ``seed``, at subsequence ``seq`` (each 2**66 numbers long; default: the thread's index
    in the grid, ``tx + bx * threads``) and ``off`` numbers into it. Later
    ``T.rng_rand()`` / ``T.rng_rand_float()`` calls draw from it in program order."""
    builder = B.require_kernel("T.rng_init")
    if generator not in GENERATORS:
        raise kernel_error(f"T.rng_init: unknown generator {generator!r}; TileLang names "
                           f"{', '.join(GENERATORS)}")
    if generator != PHILOX:
        raise kernel_error(f"T.rng_init: generator {generator!r} is not provided (its skip-"
                           f"ahead uses cuRAND's precomputed tables); use {PHILOX!r}, the "
                           "default")
    if builder.enclosing("parallel") is not None:
        raise kernel_error("T.rng_init cannot be inside a T.Parallel loop: a block has one "
                           "generator per thread; set it up before the loop")
    if seq is None:
        seq = get_thread_binding(0) + get_block_binding(0) * builder.threads[0]
    kernel = builder.enclosing("kernel")
    state = kernel.info.get(RNG)
    if state is None:
        n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
        state = _State(kernel, declare(f"rng_state_{n}", (STATE_WORDS,), "uint32", "local"))
        state.allocate(state.words)
        kernel.info[RNG] = state
    emit = _Emitter(state)
    out: list = []
    key = _split64(seed, "seed")
    sub = _split64(seq, "subsequence")
    # curand_init: ctr = 0, key = seed, STATE = 0; skipahead_sequence(seq) adds seq to the
    # counter's high half; skipahead(off) adds off // 4 to its low half and sets STATE to
    # off % 4 (from a zero counter neither addition carries)
    if isinstance(off, int) and not isinstance(off, bool):
        block, pos = _split64(off >> 2, "offset"), _u32(off & 3)
    else:
        lo, _ = _split64(off, "offset")
        wide = _u64(to_expr(off))
        block = (tirx.Cast("uint32", wide >> _u64c(2)), tirx.Cast("uint32", wide >> _u64c(34)))
        pos = lo & _u32(3)
    for index, value in ((CTR, block[0]), (CTR + 1, block[1]), (CTR + 2, sub[0]),
                         (CTR + 3, sub[1]), (KEY, key[0]), (KEY + 1, key[1]), (POS, pos),
                         (FLAG32, _u32(0)), (FLAG64, _u32(0))):
        out.append(emit.set_word(index, value))
    emit.refill(out)
    for stmt in out:
        builder.emit(stmt)


def _drawing(what: str):
    builder = B.require_kernel(what)
    parallel = [f for f in builder.frames if f.kind == "parallel"]
    if parallel:
        threads = math.prod(builder.threads)
        if threads != 1:
            raise kernel_error(f"{what} in a T.Parallel loop of a block of {threads} threads: "
                               "which thread draws which element depends on how the loop is "
                               "split between threads; draw in a T.Parallel loop of a block "
                               "of threads=1, or in a T.serial loop of each thread "
                               "(tx = T.get_thread_binding())")
        for frame in parallel:
            frame.info[IN_ORDER] = what
    return builder, _state(builder, what)


def _draw(emit: _Emitter, out: list) -> tirx.Var:
    """curand(&state): the output word at STATE, then STATE + 1, past the block's fourth
    word the next counter's block."""
    pos = emit.word(POS)
    value = emit.bind("rng_u", _pick([emit.word(OUT + i) for i in range(4)], pos), out)
    out.append(emit.set_word(POS, pos + _u32(1)))
    refill: list = []
    emit.next_block(refill)
    refill.append(emit.set_word(POS, _u32(0)))
    out.append(tirx.IfThenElse(emit.word(POS) == _u32(4), tirx.SeqStmt(refill), None,
                               span=emit.span))
    return value


def _draw4(emit: _Emitter, out: list) -> list:
    """curand4(&state): the four words from STATE on, through the next counter's block; the
    counter moves one block and STATE stays."""
    old = [emit.bind("rng_o", emit.word(OUT + i), out) for i in range(4)]
    emit.next_block(out)
    new = [emit.word(OUT + i) for i in range(4)]
    pos = emit.bind("rng_s", emit.word(POS), out)
    return [emit.bind("rng_u", _pick(old[k:] + new[:k], pos), out) for k in range(4)]


def rng_rand():
    """``T.rng_rand()``: the next uint32 of this thread's generator (``curand``)."""
    builder, state = _drawing("T.rng_rand()")
    emit, out = _Emitter(state), []
    value = _draw(emit, out)
    for stmt in out:
        builder.emit(stmt)
    return value


def _box_muller32(x, y):
    """_curand_box_muller's pair: sqrt(-2 log u) * (sin v, cos v)."""
    u = tirx.Cast("float32", x) * tirx.const(INV_2POW32, "float32") + \
        tirx.const(INV_2POW32 / 2, "float32")
    v = tirx.Cast("float32", y) * tirx.const(INV_2POW32_2PI, "float32") + \
        tirx.const(np.float32(INV_2POW32_2PI) / np.float32(2), "float32")
    s = tirx.sqrt(tirx.const(-2.0, "float32") * tirx.log(u))
    return tirx.sin(v) * s, tirx.cos(v) * s


def _hq53(lo, hi):
    """The 53-bit integer ``lo ^ (hi << 21)`` of _curand_box_muller_double."""
    return tirx.Cast("float64", _u64(lo) ^ (_u64(hi) << _u64c(21)))


def _box_muller64(x0, x1, y0, y1):
    """_curand_box_muller_double's pair (the host form: sin and cos of v * pi)."""
    u = _hq53(x0, x1) * tirx.const(INV_2POW53, "float64") + \
        tirx.const(INV_2POW53 / 2, "float64")
    v = _hq53(y0, y1) * tirx.const(INV_2POW53 * 2, "float64") + \
        tirx.const(INV_2POW53, "float64")
    s = tirx.sqrt(tirx.const(-2.0, "float64") * tirx.log(u))
    angle = v * tirx.const(PI, "float64")
    return tirx.sin(angle) * s, tirx.cos(angle) * s


def rng_rand_float(bit: int = 32, dist: str = "uniform"):
    """``T.rng_rand_float(bit=32, dist="uniform")``: the next float of this thread's
    generator: ``"uniform"`` in (0, 1] (``curand_uniform``: one uint32 scaled by 2**-32 plus
    half of that; 64 bits, ``curand_uniform_double``: the uint32 plus one, scaled by 2**-32),
    ``"normal"`` of mean 0 and deviation 1 (``curand_normal`` / ``curand_normal_double``:
    a Box-Muller pair from two / four uint32, the second value kept for the next call)."""
    if bit not in (32, 64) or isinstance(bit, bool):
        raise kernel_error(f"T.rng_rand_float draws 32- or 64-bit floats, got bit={bit!r}")
    if dist not in ("uniform", "normal"):
        raise kernel_error(f"T.rng_rand_float draws from the 'uniform' or 'normal' "
                           f"distribution, got dist={dist!r}")
    builder, state = _drawing("T.rng_rand_float()")
    emit, out = _Emitter(state), []
    dtype = f"float{bit}"
    if dist == "uniform":
        u = _draw(emit, out)
        if bit == 32:
            value = tirx.Cast(dtype, u) * tirx.const(INV_2POW32, dtype) + \
                tirx.const(INV_2POW32 / 2, dtype)
        else:
            value = tirx.Cast(dtype, u) * tirx.const(INV_2POW32_DOUBLE, dtype) + \
                tirx.const(INV_2POW32_DOUBLE, dtype)
        result = emit.bind("rng_f", value, out)
    else:
        buf, flag = state.normal_buffer(bit), FLAG32 if bit == 32 else FLAG64
        fresh: list = []
        if bit == 32:
            pair = _box_muller32(_draw(emit, fresh), _draw(emit, fresh))
        else:
            pair = _box_muller64(*_draw4(emit, fresh))
        fresh += [tirx.BufferStore(buf, pair[0], [tirx.const(0, "int32")], span=emit.span),
                  tirx.BufferStore(buf, pair[1], [tirx.const(1, "int32")], span=emit.span),
                  emit.set_word(flag, _u32(1))]
        kept = [tirx.BufferStore(buf, tirx.BufferLoad(buf, [tirx.const(1, "int32")]),
                                 [tirx.const(0, "int32")], span=emit.span),
                emit.set_word(flag, _u32(0))]
        out.append(tirx.IfThenElse(emit.word(flag) != _u32(1), tirx.SeqStmt(fresh),
                                   tirx.SeqStmt(kept), span=emit.span))
        result = emit.bind("rng_f", tirx.BufferLoad(buf, [tirx.const(0, "int32")]), out)
    for stmt in out:
        builder.emit(stmt)
    return result
