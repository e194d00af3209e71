"""Language gaps TileLang's examples hit: several T.Kernel blocks in one function and the
global workspaces they share (T.alloc_global); both backends that execute here."""

import pytest
import tilewright
import tilewright.language as T
import torch
import tvm_ffi
from source_lines import Markers
from tilewright.errors import KernelError
from tvm import tirx


def split_then_gather(n=64):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        W = T.alloc_global((n,), "float32")
        with T.Kernel(2) as bx:  # first launch: two blocks fill the workspace
            for i in T.Parallel(n // 2):
                W[bx * (n // 2) + i] = A[bx * (n // 2) + i] * 2.0
        with T.Kernel(1):  # second launch reads what every block of the first wrote
            for i in T.Parallel(n):
                C[i] = W[n - 1 - i] + 1.0

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_kernel_blocks_run_in_order_and_share_a_global_workspace(target):
    kernel = tilewright.compile(split_then_gather(), out_idx=[1], target=target)
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a), 2 * a.flip(0) + 1)


def per_block_workspace(n=16, m=64):
    """A workspace each block writes and reads back at its own row, in one launch."""

    @T.prim_func
    def main(X: T.Tensor((n, m), "float32"), Y: T.Tensor((n, m), "float32")):
        W = T.alloc_global((n, m), "float32")
        with T.Kernel(n) as bx:
            for j in T.Parallel(m):
                W[bx, j] = X[bx, j] * 2.0
            for j in T.Parallel(m):
                Y[bx, j] = W[bx, j] + 1.0

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_workspace_indexed_by_the_block(target):
    """The CPU's build stopped in TVM ('Buffer block is used before its definition'): TVM's
    buffer compaction sized the workspace by the block index a worker claims (see the CPU's
    SKIPPED_TVM_PASSES). TileLang's gqa_decode example hit it."""
    kernel = tilewright.compile(per_block_workspace(), out_idx=[1], target=target)
    x = torch.randn(16, 64)
    torch.testing.assert_close(kernel(x), 2 * x + 1)


def test_kernel_blocks_cannot_nest_and_workspaces_come_first():
    def nested():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1), T.Kernel(1):
                A[0] = 1.0

        return main

    with pytest.raises(KernelError, match="cannot be nested"):
        nested()

    def late():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1):
                T.alloc_global((8,), "float32")

        return main

    with pytest.raises(KernelError, match="call it before 'with T.Kernel'"):
        late()


# -- T.Parallel race check: TileLang's layernorm-backward accumulation ---------------------------
def row_accumulate(rows, width, par_rows):
    @T.prim_func
    def main(X: T.Tensor((rows, width), "float32"), G: T.Tensor((width,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((par_rows, width), "float32")
            acc = T.alloc_fragment((width,), "float32")
            T.clear(acc)
            for k in T.serial(rows // par_rows):
                T.copy(X[k * par_rows, 0], x)
                for i, j in T.Parallel(par_rows, width):
                    acc[j] += x[i, j] * 2.0  # accumulate
            T.copy(acc, G)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_parallel_axis_of_extent_one_accumulates_without_a_race(target):
    # for i, j in T.Parallel(1, D): acc[j] += ...  -- one iteration of i, so no two
    # iterations write acc[j]
    kernel = tilewright.compile(row_accumulate(8, 16, 1), out_idx=[1], target=target)
    x = torch.randn(8, 16)
    torch.testing.assert_close(kernel(x), 2 * x.sum(0), rtol=1e-5, atol=1e-5)


def test_parallel_axis_of_extent_two_accumulating_one_element_is_still_a_race():
    with pytest.raises(KernelError, match="T.Parallel race: every iteration of i writes"):
        row_accumulate(8, 16, 2)


# -- fragments take the extents of the T.Parallel loop that indexes them (TileLang's layout) -----
def sink_like(n=16, heads=2, shift=0):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), S: T.Tensor((heads,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            sinks = T.alloc_fragment((heads,), "float32")
            for i in T.Parallel(n):
                sinks[i + shift] = S[1]  # widened
            for i in T.Parallel(n):
                C[i] = X[i] + sinks[i]

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_fragment_indexed_by_a_parallel_loop_takes_its_extent(target, caplog):
    # TileLang's attention-sink backward writes block_M values into alloc_fragment([heads]):
    # on a GPU the fragment takes the loop's layout, so each iteration has its own element
    with caplog.at_level("WARNING", logger="tilewright"):
        kernel = tilewright.compile(sink_like(), out_idx=[2], target=target)
    assert "fragment sinks is declared with shape (2,)" in caplog.text
    assert f"test_tilelang_gaps.py:{Markers(__file__).line_of('widened')}" in caplog.text
    assert "over (16,)" in caplog.text
    x, s = torch.randn(16), torch.randn(2)
    torch.testing.assert_close(kernel(x, s), x + s[1])


def test_fragment_indexed_past_its_end_otherwise_is_still_an_error():
    with pytest.raises(KernelError, match="leaves tile sinks"):
        tilewright.compile(sink_like(shift=1), out_idx=[2], target="cpu")


# -- while with a run-time condition --------------------------------------------------------------
def collatz_steps(n=10):
    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), C: T.Tensor((n,), "int32")):
        with T.Kernel(n) as bx:
            x = T.alloc_var("int32", init=A[bx])
            steps = T.alloc_var("int32", init=0)
            while x != 1:
                if x % 2 == 0:
                    x = x // 2
                else:
                    x = 3 * x + 1
                steps = steps + 1
            C[bx] = steps

    return main


def stream_k_like(n=64, chunk=16):
    # tile ops and a pipelined loop inside a run-time while, as in TileLang's stream-K GEMM
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), L: T.Tensor((1,), "int32"),
             C: T.Tensor((chunk,), "float32")):
        with T.Kernel(1):
            start = T.alloc_fragment((1,), "int32", "local")
            s = T.alloc_shared((chunk,), "float32")
            acc = T.alloc_fragment((chunk,), "float32")
            T.clear(acc)
            start[0] = 0
            while start[0] < L[0]:
                for k in T.Pipelined(1, num_stages=1):
                    T.copy(A[start[0] + k * chunk], s)
                for i in T.Parallel(chunk):
                    acc[i] += s[i]
                start[0] = start[0] + chunk
            T.copy(acc, C)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_while_with_a_runtime_condition(target):
    steps = tilewright.compile(collatz_steps(), out_idx=[1], target=target)
    a = torch.arange(1, 11, dtype=torch.int32)
    assert steps(a).tolist() == [0, 1, 7, 2, 5, 8, 16, 3, 19, 6]
    sums = tilewright.compile(stream_k_like(), out_idx=[2], target=target)
    a = torch.randn(64)
    torch.testing.assert_close(sums(a, torch.tensor([48], dtype=torch.int32)),
                               a[:48].reshape(3, 16).sum(0), rtol=1e-5, atol=1e-5)


# -- outputs the JIT allocates ----------------------------------------------------------------
def first_rows(n, rows):
    @T.prim_func
    def main(A: T.Tensor((n, 4), "float32"), L: T.Tensor((1,), "int32"),
             B: T.Tensor((n, 4), "float32")):
        with T.Kernel(1):
            for i, j in T.Parallel(n, 4):
                if i < L[0]:
                    B[i, j] = A[i, j]

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_output_elements_a_kernel_leaves_unwritten_are_zero(target):
    # TileLang's varlen examples write only rows below each sequence's length and read the
    # rest later under a mask: garbage there (a NaN) would poison the masked products
    kernel = tilewright.compile(first_rows(64, 3), out_idx=[2], target=target)
    for _ in range(3):  # a fresh allocation every call, whatever the allocator hands back
        a = torch.randn(64, 4)
        b = kernel(a, torch.tensor([5], dtype=torch.int32))
        torch.testing.assert_close(b[:5], a[:5])
        assert not b[5:].any()


# -- bounds: a loop over a length read at run time -------------------------------------------
def running_max_per_block(n, block, blocks):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), L: T.Tensor((1,), "int32"),
             S: T.Tensor((blocks,), "float32")):
        with T.Kernel(1):
            tile = T.alloc_fragment((block,), "float32")
            m = T.alloc_fragment((1,), "float32")
            seen = T.alloc_shared((1, blocks), "float32")
            T.fill(seen, 0.0)
            for k in T.serial(T.ceildiv(L[0], block)):  # in range only because L[0] <= n
                T.copy(X[k * block:(k + 1) * block], tile)
                T.reduce_max(tile, m, dim=0)
                T.copy(m, seen[:, k])
            T.copy(seen[0, :], S)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_tile_region_indexed_by_a_loop_over_a_run_time_length(target):
    # TileLang's varlen decoding writes S_shared[:, k] for k below a length read from a tensor:
    # the analysis cannot bound k (only its type's range), so it is no compile-time error
    kernel = tilewright.compile(running_max_per_block(64, 16, 4), out_idx=[2], target=target)
    x = torch.randn(64)
    s = kernel(x, torch.tensor([40], dtype=torch.int32))
    torch.testing.assert_close(s[:3], x[:48].view(3, 16).max(1).values)
    assert not s[3:].any()


# -- a T.alloc_var as a region start ---------------------------------------------------------
def pick_row(rows, n):
    @T.prim_func
    def main(A: T.Tensor((rows, n), "float32"), I: T.Tensor((1,), "int32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            row = T.alloc_var("int32")
            row = I[0]
            s = T.alloc_shared((1, n), "float32")
            T.copy(A[row, 0:n], s)  # TileLang's grouped GEMM picks its batch so
            T.copy(s[0, :], C)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_alloc_var_as_a_region_start(target):
    kernel = tilewright.compile(pick_row(5, 16), out_idx=[2], target=target)
    a = torch.randn(5, 16)
    torch.testing.assert_close(kernel(a, torch.tensor([3], dtype=torch.int32)), a[3])


def relu_gate(m=8, n=16):
    """A scalar per T.Parallel iteration (TileLang's indexer backward: ``d = T.alloc_var``
    in the loop body, set in both arms of an ``if``), in a 2-D nest and in a 1-D loop with a
    start and a serial loop inside."""
    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), W: T.Tensor((n,), "float32"),
             C: T.Tensor((m, n), "float32"), R: T.Tensor((m,), "float32")):
        with T.Kernel(1):
            for i, j in T.Parallel(m, n):
                gate = T.alloc_var("float32")
                if A[i, j] > 0:
                    gate = 1.0
                else:
                    gate = 0.0
                C[i, j] = A[i, j] * gate * W[j]
            for i in T.parallel(2, m):
                total = T.alloc_var("float32", init=0.0)
                for j in T.serial(n):
                    total += A[i, j]
                R[i] = total
            for i in T.Parallel(2):
                R[i] = -1.0

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_alloc_var_inside_parallel_is_a_scalar_per_iteration(target):
    kernel = tilewright.compile(relu_gate(), out_idx=[2, 3], target=target)
    a, w = torch.randn(8, 16), torch.randn(16)
    c, r = kernel(a, w)
    torch.testing.assert_close(c, torch.relu(a) * w)
    torch.testing.assert_close(r[2:], a[2:].sum(dim=1))
    assert r[:2].tolist() == [-1.0, -1.0]


def nibble_sum(n=16):
    """A helper annotated and checked with TileLang's TVM names (``tirx.PrimExpr``,
    ``val.dtype``), a workspace from ``T.alloc_buffer`` (scope "global") and a shared tile
    from it (TileLang's dequantize GEMM examples)."""
    from tvm import tirx

    def low_nibble(val: tirx.PrimExpr) -> tirx.PrimExpr:
        assert val.dtype == T.uint8 and isinstance(val, tirx.PrimExpr)
        return val & tirx.const(15, T.uint8)

    @T.prim_func
    def main(A: T.Tensor((n,), "uint8"), C: T.Tensor((n,), "int32")):
        W = T.alloc_buffer((n,), "int32")
        with T.Kernel(1):
            S = T.alloc_buffer((n,), "uint8", scope="shared")
            T.copy(A, S)
            for i in T.Parallel(n):
                W[i] = T.Cast("int32", low_nibble(S[i])) + 1
        with T.Kernel(1):
            for i in T.Parallel(n):
                C[i] = W[i] * 2

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_tilelang_tvm_names_and_alloc_buffer(target):
    kernel = tilewright.compile(nibble_sum(), out_idx=[1], target=target)
    a = torch.randint(0, 256, (16,), dtype=torch.uint8)
    assert torch.equal(kernel(a), ((a.int() & 15) + 1) * 2)


def test_alloc_buffer_of_an_unknown_scope():
    with pytest.raises(KernelError, match="unknown scope 'texture'"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                T.alloc_buffer((4,), "float32", scope="texture")


# -- `x = buf[i]` names the value at that line (a let binding, as in TileLang) ----------------
def bitonic_sort(n=32, guard="lt"):
    steps = n.bit_length() - 1

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"),
             I: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n):
            val = T.alloc_shared((n,), "float32")
            idx = T.alloc_shared((n,), "int32")
            T.copy(X, val)
            for i in T.Parallel(n):
                idx[i] = i
            for s in T.serial(steps):
                for t in T.serial(s + 1):
                    for i in T.Parallel(n):
                        up = (i & (1 << (s + 1))) != 0
                        p = i ^ (1 << (s - t))
                        first = i < p if guard == "lt" else i <= p
                        if first and ((up and val[i] > val[p]) or (not up and val[i] < val[p])):
                            v = val[i]  # the old value: the next line overwrites val[i]
                            val[i] = val[p]
                            val[p] = v
                            k = idx[i]
                            idx[i] = idx[p]
                            idx[p] = k
                    T.sync_threads()
            T.copy(val, Y)
            T.copy(idx, I)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_named_load_keeps_its_value_when_the_buffer_is_overwritten(target):
    # a compare-and-swap through `v = val[i]`: before names were bound, `v` re-read val[i]
    # after it was overwritten and the sort duplicated values
    kernel = tilewright.compile(bitonic_sort(), target=target)
    x = torch.randn(32)
    y, i = torch.empty(32), torch.empty(32, dtype=torch.int32)
    kernel(x, y, i)
    want = torch.sort(x, descending=True)
    torch.testing.assert_close(y, want.values, rtol=0, atol=0)
    torch.testing.assert_close(x[i.long()], want.values, rtol=0, atol=0)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_named_element_is_its_value_at_the_line_that_names_it(target):
    @T.prim_func
    def swap_ends(X: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            first = X[0]
            X[0] = X[3]
            X[3] = first

    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    tilewright.compile(swap_ends, target=target)(x)
    assert x.tolist() == [4.0, 2.0, 3.0, 1.0]


def test_a_named_load_is_bound_only_where_its_buffer_changes_before_its_use():
    def binds(func):
        found = []
        tvm_ffi.structural_walk(func.body, (tirx.Bind, lambda b: found.append(str(b.var))))
        return found

    assert sorted(binds(bitonic_sort())) == ["k", "v"]

    @T.prim_func
    def scale(X: T.Tensor((16,), "float32"), Y: T.Tensor((16,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(16):
                x = X[i] * 2.0  # nothing writes X before the use: the expression stays inline
                Y[i] = x + 1.0

    assert binds(scale) == []


def test_the_compare_and_swap_guard_must_be_a_strict_order_of_the_pair():
    # `i <= p` holds for both iterations of a pair when the mask is 0 ... and is not the
    # pattern: both would write each other's element
    with pytest.raises(KernelError, match="T.Parallel race: iterations write val"):
        bitonic_sort(guard="le")


def test_sync_threads_between_loops_is_accepted_and_refused_inside_one():
    with pytest.raises(KernelError, match="T.sync_threads inside a T.Parallel loop"):
        @T.prim_func
        def inside(X: T.Tensor((16,), "float32")):
            with T.Kernel(1):
                for i in T.Parallel(16):
                    X[i] = X[i] + 1.0
                    T.sync_threads()


def offset_store(shift_by_i=True):
    @T.prim_func
    def main(X: T.Tensor((16,), "float32"), Y: T.Tensor((32,), "float32"),
             O: T.Tensor((1,), "int32")):
        with T.Kernel(1):
            offset = T.alloc_var("int32")
            offset = O[0]
            for i in T.Parallel(16):
                j = offset + i if shift_by_i else offset  # a name bound to a loaded value
                Y[j] = X[i] * 2.0

    return main


def test_the_race_check_sees_a_bound_index_as_its_value():
    x, y, o = torch.randn(16), torch.zeros(32), torch.tensor([5], dtype=torch.int32)
    tilewright.compile(offset_store(), target="cpu")(x, y, o)
    torch.testing.assert_close(y[5:21], 2 * x)
    assert not y[:5].any() and not y[21:].any()
    with pytest.raises(KernelError, match="every iteration of i writes the same element"):
        offset_store(shift_by_i=False)


def test_a_variable_on_the_right_of_an_expression_is_its_value():
    """``i + 1 < end`` with ``end`` a T.alloc_var (TileLang's deepseek_v32/topk_selector.py:
    ``input_idx < l_end_idx``, the eager tracer's variable): TVM's operator takes the
    variable's value, as ``end > i + 1`` does."""

    @T.prim_func
    def main(E: T.Tensor((4,), "int32"), O: T.Tensor((4, 8), "int32")):
        with T.Kernel(4, threads=32) as bx:
            end = T.alloc_var("int32", init=E[bx])
            for i in T.serial(8):
                O[bx, i] = T.if_then_else(i + 1 < end, i * end, -1)

    ends = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    out = tilewright.compile(main, out_idx=[1], target="cpu")(ends)
    i = torch.arange(8).view(1, 8)
    want = torch.where(i + 1 < ends.view(4, 1), i * ends.view(4, 1), -1).to(torch.int32)
    torch.testing.assert_close(out, want)
