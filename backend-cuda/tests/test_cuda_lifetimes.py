"""Lifetimes of shared buffers (``analysis.lifetimes``), which decide what may share bytes of
the pool: a run of T.ws roles is one unit, a buffer an in-flight operation names lives to the
next wait (to the end without one)."""

from __future__ import annotations

from tilewright_cuda import intrinsics, keys
from tilewright_cuda.analysis import lifetimes
from tvm import tirx


def _buf(name):
    return tirx.decl_buffer((64,), "float32", name, scope="shared.dyn")


def _touch(buf, value=0.0):
    return tirx.BufferStore(buf, tirx.const(value, "float32"), [tirx.const(0, "int32")])


def _role(first, body):
    return tirx.For(tirx.Var("t", "int32"), 0, 128, tirx.ForKind.SERIAL, body,
                    annotations={keys.ROLE: first})


def _cp_async(dst, src):
    return intrinsics.call("tw_cp_async16", tirx.address_of(tirx.BufferLoad(dst, [0])),
                           tirx.address_of(tirx.BufferLoad(src, [0])), tirx.const(16, "int32"))


def test_roles_run_at_once_so_they_are_one_unit():
    a, b, c = _buf("a"), _buf("b"), _buf("c")
    body = tirx.SeqStmt([_touch(c), _role(0, _touch(a)), _touch(c), _role(128, _touch(b)),
                         _touch(c)])
    assert [len(u) for u in lifetimes.units(body)] == [1, 3, 1]
    ranges = lifetimes.live_ranges(body, [a, b, c])
    assert ranges[a] == ranges[b] == (1, 1)  # never apart: they cannot share bytes


def test_in_flight_copies_live_to_the_next_wait_or_the_end():
    a, b, g, later = _buf("a"), _buf("b"), _buf("g"), _buf("later")
    body = tirx.SeqStmt([_cp_async(a, g), _touch(later), intrinsics.cp_async_wait(0),
                         _touch(later), _cp_async(b, g), _touch(later)])
    ranges = lifetimes.live_ranges(body, [a, b, later])
    assert ranges[a] == (0, 2)  # lands at the wait
    assert ranges[b] == (4, 5)  # no wait follows: to the end
    assert ranges[later] == (1, 5)
