"""Lifetimes of shared buffers (``analysis.lifetimes``), which decide what may share bytes of
the pool: a run of T.ws roles is one position, a buffer an in-flight operation names lives to
the next wait (to the end without one), and inside a block-uniform loop a buffer renewed each
iteration lives over part of the body only, a pipelined or carried one over the whole loop."""

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
    assert [len(u) for u in lifetimes.program(body).positions] == [1, 3, 1]
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


def _tx():
    return tirx.Var("tx", "int32")


def _fill(buf, tx, value=0.0):
    """Each thread writes its element of ``buf`` (a tile op's nest, spread over the threads)."""
    return tirx.BufferStore(buf, tirx.const(value, "float32"), [tx % 64])


def _read(buf, out, tx, index=None):
    """Each thread reads an element of ``buf`` (another thread's) into ``out``."""
    return tirx.BufferStore(out, tirx.BufferLoad(buf, [index if index is not None
                                                       else 63 - tx % 64]), [tx % 64])


def _serial(var, body, extent=4):
    return tirx.For(var, 0, extent, tirx.ForKind.SERIAL, tirx.SeqStmt(body))


def test_buffers_used_apart_in_one_iteration_share_the_body():
    """``a`` is written then read, then ``b``: each lives over its part of the body, so the
    two may share bytes (behind barriers, ``transforms.memory``)."""
    tx, k = _tx(), tirx.Var("k", "int32")
    a, b, out = _buf("a"), _buf("b"), _buf("out")
    body = _serial(k, [_fill(a, tx), intrinsics.sync(), _read(a, out, tx),
                       _fill(b, tx), intrinsics.sync(), _read(b, out, tx)])
    ranges = lifetimes.live_ranges(body, [a, b], tx)
    assert ranges[a] == (0, 2) and ranges[b] == (3, 5)
    assert [(lp.first, lp.last) for lp in lifetimes.program(body, tx).loops] == [(0, 5)]
    # without the thread index nothing is entered: the loop is one position
    assert lifetimes.live_ranges(body, [a, b]) == {a: (0, 0), b: (0, 0)}


def test_a_value_carried_to_the_next_iteration_lives_over_the_loop():
    """``a`` is read before it is written (its value comes from the iteration before),
    ``b`` is written at an index the loop variable picks (a ping-pong buffer), ``c`` is
    written in one branch and read outside it: each lives over the whole loop."""
    tx, k = _tx(), tirx.Var("k", "int32")
    a, b, c, out = _buf("a"), _buf("b"), _buf("c"), _buf("out")
    body = _serial(k, [
        _read(a, out, tx), _fill(a, tx),
        tirx.BufferStore(b, tirx.const(1.0, "float32"), [(tx + k * 32) % 64]),
        _read(b, out, tx),
        tirx.IfThenElse(k < 2, _fill(c, tx), None), _read(c, out, tx)])
    ranges = lifetimes.live_ranges(body, [a, b, c], tx)
    assert ranges == {a: (0, 5), b: (0, 5), c: (0, 5)}


def test_pipelined_tiles_live_over_their_loop_and_in_flight_copies_to_the_full_wait():
    """A pipelined tile (two versions, cp.async ahead of the compute) lives over its loop;
    around the pipeline, in an outer loop, it is renewed each outer iteration (the prologue
    fills it first) and ``c`` after the pipeline may take its bytes. A ``wait_group<1>`` inside
    the pipelined loop leaves a group in flight: only the ``wait_group<0>`` after it ends the
    tile's life."""
    tx, k, w = _tx(), tirx.Var("k", "int32"), tirx.Var("w", "int32")
    g = tirx.decl_buffer((64,), "float32", "g")
    tile = tirx.decl_buffer((2, 64), "float32", "tile", scope="shared.dyn")
    c, out = _buf("c"), _buf("out")

    def load(version):
        return intrinsics.call("tw_cp_async16", tirx.address_of(
            tirx.BufferLoad(tile, [version, tx % 64])), tirx.address_of(
            tirx.BufferLoad(g, [tx % 64])), tirx.const(16, "int32"))

    pipelined = _serial(k, [intrinsics.cp_async_wait(1), intrinsics.sync(),
                            load((k + 1) % 2), intrinsics.cp_async_commit(),
                            tirx.BufferStore(out, tirx.BufferLoad(tile, [k % 2, 63 - tx % 64]),
                                             [tx % 64])])
    outer = _serial(w, [load(0), intrinsics.cp_async_commit(), pipelined,
                        intrinsics.cp_async_wait(0), intrinsics.sync(),
                        _fill(c, tx), intrinsics.sync(), _read(c, out, tx)])
    ranges = lifetimes.live_ranges(outer, [tile, c], tx, versions={"tile": 2})
    assert ranges[tile] == (0, 7)  # prologue, the whole pipelined loop, the full wait
    assert ranges[c] == (9, 11)
    # without a prologue the refill is the first touch: still live over its own loop
    alone = lifetimes.live_ranges(pipelined, [tile], tx, versions={"tile": 2})
    assert alone[tile] == (0, 4)
    # not known as pipelined, the tile (written at the loop variable's version) is carried
    assert lifetimes.live_ranges(outer, [tile, c], tx)[tile] == (0, 11)


def test_a_buffer_renewed_in_two_loops_lives_over_each_apart():
    """``a`` is written then read in each of two loops, at the same elements: it lives over
    each loop's part apart, and ``b`` between them may take its bytes. Written at other
    elements in the second loop (a read there of an element it does not write would see the
    first loop's value), read before written, or touched between the loops too, it lives from
    the first loop to the second."""
    tx, k, m = _tx(), tirx.Var("k", "int32"), tirx.Var("m", "int32")
    a, b, out = _buf("a"), _buf("b"), _buf("out")

    def twice(second_write, between=()):
        return tirx.SeqStmt([
            _serial(k, [_fill(a, tx), intrinsics.sync(), _read(a, out, tx)]),
            intrinsics.sync(), *between, _fill(b, tx), intrinsics.sync(), _read(b, out, tx),
            _serial(m, [second_write, intrinsics.sync(), _read(a, out, tx)])])

    body = twice(_fill(a, tx, 1.0))
    segments = lifetimes.live_segments(body, [a, b], tx)
    assert segments[a] == ((0, 2), (7, 9)) and segments[b] == ((4, 6),)
    assert lifetimes.live_ranges(body, [a, b], tx)[a] == (0, 9)
    other = tirx.BufferStore(a, tirx.const(1.0, "float32"), [tx % 32])
    assert lifetimes.live_segments(twice(other), [a, b], tx)[a] == ((0, 9),)
    carried = tirx.SeqStmt([_read(a, out, tx), _fill(a, tx)])
    assert lifetimes.live_segments(twice(carried), [a, b], tx)[a] == ((0, 10),)
    touched = twice(_fill(a, tx), between=[_read(a, out, tx)])
    assert lifetimes.live_segments(touched, [a, b], tx)[a] == ((0, 10),)


def test_a_write_in_a_loop_of_constant_bounds_still_renews():
    """A fragment written element by element in an inner loop with a barrier in it (an
    entered loop of constant bounds, which runs whole) and read after it is renewed each
    iteration of the outer loop; read inside such a loop too, it is not."""
    tx, k, r = _tx(), tirx.Var("k", "int32"), tirx.Var("r", "int32")
    a, out = _buf("a"), _buf("out")
    write = tirx.For(r, 0, 2, tirx.ForKind.SERIAL, tirx.SeqStmt([
        intrinsics.sync(), tirx.BufferStore(a, tirx.const(0.0, "float32"), [tx % 32 + r * 32])]))
    body = _serial(k, [_fill(out, tx), write, intrinsics.sync(), _read(a, out, tx),
                       _fill(out, tx)])
    assert lifetimes.live_ranges(body, [a], tx)[a] == (1, 4)
    both = tirx.For(r, 0, 2, tirx.ForKind.SERIAL, tirx.SeqStmt([
        intrinsics.sync(), tirx.BufferStore(a, tirx.const(0.0, "float32"), [tx % 32 + r * 32]),
        _read(a, out, tx)]))
    body = _serial(k, [_fill(out, tx), both, intrinsics.sync(), _fill(out, tx)])
    assert lifetimes.live_ranges(body, [a], tx)[a] == (0, 5)
