"""Barrier insertion (transforms/sync.py): a ``T.Parallel`` nest over register accumulators,
run as a loop over each thread's registers, is one statement: one barrier before it, none
between its iterations (block-causal varlen attention's dkv kernel had one per element); a
loop whose iterations read what another thread wrote in an earlier iteration keeps its
barriers; atomics of one function need none between them (a shared histogram's loop), but a
plain access or another function's atomic after them does; neither do stores at tickets of one
counter (a compaction's loop), unless the tickets may meet or the buffer is accessed otherwise.
Checked on the lowered source and in host emulation against torch."""

import functools
import re

import cuda_source
import hostemu
import pytest
import tilewright
import tilewright.language as T
import tilewright_cuda.language as TC
import torch
from tilewright_cuda import intrinsics
from tilewright_cuda.analysis import lifetimes, tickets
from tvm import tirx

M = N = K = 64


def scaled_difference():
    """``C = ((A B^T - delta) * 0.5) V``: the difference of a register accumulator and a shared
    row vector, written to a shared tile elementwise, then the tile times V (the dkv kernel's
    ``dsT_cast[i, j] = qkT[i, j] * (dsT[i, j] - delta[j]) * sm_scale``)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             V: T.Tensor((N, K), "float16"), Delta: T.Tensor((N,), "float32"),
             C: T.Tensor((M, K), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            V_s = T.alloc_shared((N, K), "float16")
            delta = T.alloc_shared((N,), "float32")
            S = T.alloc_shared((M, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            out = T.alloc_fragment((M, K), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(V, V_s)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
            T.copy(Delta, delta)
            for i, j in T.Parallel(M, N):
                S[i, j] = acc[i, j] * (acc[i, j] - delta[j]) * 0.5
            T.gemm(S, V_s, out, clear_accum=True)
            T.copy(out, C)

    return main


def _element_stores(text: str) -> list:
    """The lines of ``text`` from the first store of S's products to the last (``* 5.0e-01``
    is the 0.5 of the nest)."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if "5.000000e-01" in line and "=" in line]
    return lines[at[0]:at[-1] + 1]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_nest_over_registers_has_no_barrier_between_its_elements(arch):
    text = tilewright.lower(scaled_difference(), f"cuda -arch={arch}").source.text
    span = _element_stores(text)
    assert sum("5.000000e-01" in line for line in span) == M * N // 128  # unrolled registers
    assert not any("__syncthreads" in line for line in span)
    kernel = text[text.index('extern "C" __global__'):]
    # the operand copies', delta's (before the nest), S's (before the second gemm)
    assert kernel.count("__syncthreads") <= 4, kernel.count("__syncthreads")


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_nest_over_registers_matches_torch(arch, tmp_path):
    torch.manual_seed(0)
    a, b, v = (torch.randn(n, K).half() for n in (M, N, N))
    delta = torch.randn(N)
    c = torch.full((M, K), float("nan"))
    lowered = tilewright.lower(scaled_difference(), f"cuda -arch={arch}")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, v, delta, c)
    qk = a.float() @ b.float().T
    s = (qk * (qk - delta[None, :]) * 0.5).half()
    torch.testing.assert_close(c, s.float() @ v.float(), rtol=2e-2, atol=2e-2)


def reversed_rows(steps=4, n=128):
    """Each step writes a shared row and reads it back reversed (another thread's element),
    then the next step overwrites it: barriers inside the loop, after the write and before the
    next step's write."""

    @T.prim_func
    def main(X: T.Tensor((steps, n), "float32"), Y: T.Tensor((steps, n), "float32")):
        with T.Kernel(1, threads=n):
            row = T.alloc_shared((n,), "float32")
            for k in T.serial(steps):
                for i in T.Parallel(n):
                    row[i] = X[k, i] * 2.0
                for i in T.Parallel(n):
                    Y[k, i] = row[n - 1 - i] + 1.0

    return main


def test_a_loop_reading_another_threads_write_keeps_its_barriers():
    text = tilewright.lower(reversed_rows(), "cuda -arch=sm_90a").source.text
    kernel = text[text.index('extern "C" __global__'):]
    loop = kernel[kernel.index("for (int k = 0;"):]
    assert len(re.findall(r"__syncthreads\(\)", loop)) == 2


@pytest.mark.emulator
def test_a_loop_reading_another_threads_write_matches_torch(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 128)
    y = torch.full((4, 128), float("nan"))
    lowered = tilewright.lower(reversed_rows(), "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, x.flip(1) * 2.0 + 1.0)


def row_vector_per_step(steps=2):
    """``C = sum_k (A_k B^T - delta_k) V``: each step loads its ``delta`` row into shared memory
    and reads it only in a nest over the register accumulator (block-causal varlen's ``lse`` and
    ``delta``)."""

    @T.prim_func
    def main(A: T.Tensor((steps * M, K), "float16"), B: T.Tensor((N, K), "float16"),
             V: T.Tensor((N, K), "float16"), Delta: T.Tensor((steps, N), "float32"),
             C: T.Tensor((M, K), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            V_s = T.alloc_shared((N, K), "float16")
            delta = T.alloc_shared((N,), "float32")
            S = T.alloc_shared((M, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            out = T.alloc_fragment((M, K), "float32")
            T.copy(V, V_s)
            T.clear(out)
            for k in T.serial(steps):
                T.copy(A[k * M:(k + 1) * M, :], A_s)
                T.copy(B, B_s)
                T.copy(Delta[k, :], delta)
                T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(M, N):
                    S[i, j] = acc[i, j] - delta[j]
                T.gemm(S, V_s, out)
            T.copy(out, C)

    return main


# five blocks per SM leave a block 32563 bytes on sm_80, below the 33024 the tiles take apart
FIVE_BLOCKS = {"cuda.blocks_per_sm": 5}


def test_a_vector_read_only_in_a_nest_over_registers_is_renewed_each_step(monkeypatch):
    """``delta``'s reads sit in the nest, one statement: it lives from its copy to the nest in
    each step, not over the whole loop as ``V_s`` (read in every step) does."""
    seen = {}
    original = lifetimes.live_segments

    def recorded(thread_body, buffers, *args, **kwargs):
        out = original(thread_body, buffers, *args, **kwargs)
        seen.update({str(b.name): s for b, s in out.items()})
        return out

    monkeypatch.setattr(lifetimes, "live_segments", recorded)
    tilewright.lower(row_vector_per_step(), "cuda -arch=sm_80", FIVE_BLOCKS)
    assert len(seen["delta"]) == 1 and len(seen["V_s"]) == 1
    assert seen["delta"][0][1] < seen["V_s"][0][1], seen


@pytest.mark.emulator
def test_a_vector_renewed_each_step_matches_torch(tmp_path):
    torch.manual_seed(0)
    a, b, v = torch.randn(2 * M, K).half(), torch.randn(N, K).half(), torch.randn(N, K).half()
    delta = torch.randn(2, N)
    c = torch.full((M, K), float("nan"))
    lowered = tilewright.lower(row_vector_per_step(), "cuda -arch=sm_80", FIVE_BLOCKS)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, v, delta, c)
    ref = sum(((a[k * M:(k + 1) * M].float() @ b.float().T - delta[k][None, :]).half().float()
               @ v.float()) for k in range(2))
    torch.testing.assert_close(c, ref, rtol=2e-2, atol=5e-2)


BINS = 16


def block_histogram(n=1024, threads=128):
    """Block code: a shared histogram zeroed, every element's bin counted with ``T.atomic_add``
    in a ``T.Parallel`` nest of a serial loop, then read back."""

    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), H: T.Tensor((BINS,), "int32")):
        with T.Kernel(1, threads=threads):
            hist = T.alloc_shared((BINS,), "int32")
            T.fill(hist, 0)
            for k in T.serial(n // threads):
                for i in T.Parallel(threads):
                    T.atomic_add(hist[X[k * threads + i] % BINS], 1)
            for i in T.Parallel(BINS):
                H[i] = hist[i]

    return main


def thread_histogram(n=1024, threads=128):
    """Thread-level code (``T.get_thread_binding()``): each thread counts its elements of
    ``X`` (in [0, 1)) into 16 equal bins of a shared histogram (``torch.histc``), each atomic
    its own; the histogram is zeroed before and read after."""

    @TC.prim_func
    def main(X: TC.Tensor((n,), "float32"), H: TC.Tensor((BINS,), "int32")):
        with TC.Kernel(1, threads=threads):
            tx = TC.get_thread_binding()
            hist = TC.alloc_shared((BINS,), "int32")
            TC.fill(hist, 0)
            for k in TC.serial(n // threads):
                TC.atomic_add(hist[TC.min(TC.cast(X[k * threads + tx] * BINS, "int32"),
                                          BINS - 1)], 1)
            for i in TC.Parallel(BINS):
                H[i] = hist[i]

    return main


@functools.cache
def _kernel_text(make) -> str:
    return cuda_source.kernel(tilewright.lower(make(), "cuda -arch=sm_80").source.text)


@pytest.mark.parametrize("make", [block_histogram, thread_histogram])
def test_a_histogram_loop_has_no_barrier_between_its_atomics(make):
    kernel = _kernel_text(make)
    start, end = cuda_source.loop_span(kernel, "k")
    assert "tw_atomic_add" in kernel[start:end]
    assert "__syncthreads" not in kernel[start:end], kernel[start:end]
    zeroed = kernel.index("] = 0;")
    assert "__syncthreads();" in kernel[zeroed:start]  # the zeroing before the atomics
    assert "__syncthreads();" in kernel[end:kernel.index("H_ptr[")]  # the atomics before reads
    assert kernel.count("__syncthreads") == 2


@pytest.mark.emulator
def test_block_histogram_matches_bincount(tmp_path):
    x = torch.randint(0, 1000, (1024,), generator=torch.Generator().manual_seed(0),
                      dtype=torch.int32)
    h = torch.full((BINS,), -1, dtype=torch.int32)
    lowered = tilewright.lower(block_histogram(), "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, h)
    assert torch.equal(h, torch.bincount(x.long() % BINS, minlength=BINS).int())


@pytest.mark.emulator
def test_thread_histogram_matches_histc(tmp_path):
    x = torch.rand(1024, generator=torch.Generator().manual_seed(0))
    h = torch.full((BINS,), -1, dtype=torch.int32)
    lowered = tilewright.lower(thread_histogram(), "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, h)
    assert torch.equal(h, torch.histc(x, BINS, 0.0, 1.0).int())


def atomics_then_read(n=128):
    """Each thread adds 1 to one of four shared counters, then takes its maximum with its
    value, then reads the next counter: ``max(n / 4, largest value of the counter's threads)``
    if every add comes before every max and every max before every read."""

    @TC.prim_func
    def main(V: TC.Tensor((n,), "int32"), Y: TC.Tensor((n,), "int32")):
        with TC.Kernel(1, threads=n):
            tx = TC.get_thread_binding()
            s = TC.alloc_shared((4,), "int32")
            TC.fill(s, 0)
            TC.atomic_add(s[tx % 4], 1)
            TC.atomic_max(s[tx % 4], V[tx])
            Y[tx] = s[(tx + 1) % 4]

    return main


def test_an_atomic_before_a_read_or_another_atomic_function_keeps_its_barrier():
    kernel = _kernel_text(atomics_then_read)
    order = [kernel.index(s) for s in ("] = 0;", "tw_atomic_add(", "tw_atomic_max(", "Y_ptr[")]
    assert order == sorted(order)
    for a, b in zip(order, order[1:]):
        assert kernel[a:b].count("__syncthreads();") == 1, kernel[a:b]


@pytest.mark.emulator
def test_an_atomic_before_a_read_matches_torch(tmp_path):
    v = torch.zeros(128, dtype=torch.int32)
    v[:4] = torch.tensor([100, 7, 50, 20], dtype=torch.int32)  # first in the emulation's order
    y = torch.full((128,), -1, dtype=torch.int32)
    lowered = tilewright.lower(atomics_then_read(), "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, v, y)
    counters = torch.maximum(torch.full((4,), 32, dtype=torch.int32), v.view(32, 4).amax(0))
    assert torch.equal(y, counters[(torch.arange(128) + 1) % 4])


def compaction(variant="ticket", n=512, threads=128, threshold=0.5):
    """Thread-level stream compaction: each thread keeps its values of ``X`` above
    ``threshold`` in a shared list, each at a ticket of a shared counter
    (``pos = TC.atomic_add(cnt[0], 1, return_prev=True); kept[pos] = v``), then the block
    writes the list (zeros past its length) and the count. Other variants change one thing,
    for barrier placement only: ``inline`` stores at the atomic itself, ``global counter``
    takes the tickets from ``Count`` (which nothing else writes); the others break the
    tickets' guarantee or add an access of the list or the counter."""

    @TC.prim_func
    def main(X: TC.Tensor((n,), "float32"), Out: TC.Tensor((n,), "float32"),
             Count: TC.Tensor((1,), "int32")):
        with TC.Kernel(1, threads=threads):
            tx = TC.get_thread_binding()
            cnt = TC.alloc_shared((2,), "int32")
            kept = TC.alloc_shared((n,), "float32")
            pos = TC.alloc_var("int32")
            TC.fill(cnt, 0)
            if variant == "global counter written" and tx == 0:
                Count[0] = 0
            for k in TC.serial(n // threads):
                v = X[k * threads + tx]
                if v > threshold:
                    if variant == "ticket":
                        pos = TC.atomic_add(cnt[0], 1, return_prev=True)
                        kept[pos] = v
                    elif variant == "inline":
                        kept[TC.atomic_add(cnt[0], 1, return_prev=True)] = v
                    elif variant == "two counters":  # tickets of cnt[0] and cnt[1] overlap
                        if tx % 2 == 0:
                            pos = TC.atomic_add(cnt[0], 1, return_prev=True)
                            kept[pos] = v
                        else:
                            pos = TC.atomic_add(cnt[1], 1, return_prev=True)
                            kept[pos] = v
                    elif variant in ("global counter", "global counter written"):
                        pos = TC.atomic_add(Count[0], 1, return_prev=True)
                        kept[pos] = v
                    elif variant == "counter per iteration":  # cnt[k % 2]: two counters
                        pos = TC.atomic_add(cnt[k % 2], 1, return_prev=True)
                        kept[pos] = v
                    elif variant == "zero step":  # every thread the same value
                        pos = TC.atomic_add(cnt[0], 0, return_prev=True)
                        kept[pos] = v
                    elif variant == "variable step":  # not a constant: may be zero
                        pos = TC.atomic_add(cnt[0], k % 2, return_prev=True)
                        kept[pos] = v
                    else:
                        pos = TC.atomic_add(cnt[0], 1, return_prev=True)
                        kept[pos] = v
                if variant == "plain write" and tx == 0:
                    kept[n - 1] = 0.0
                if variant == "reset" and tx == 0:
                    cnt[0] = 0
                if variant == "another add" and tx == 0:
                    TC.atomic_add(cnt[0], -1)
            for i in TC.Parallel(n):
                Out[i] = TC.if_then_else(i < cnt[0], kept[i], 0.0)
            if not variant.startswith("global"):
                Count[0] = cnt[0]

    return main


@functools.cache
def _compaction_text(variant: str) -> str:
    return cuda_source.kernel(tilewright.lower(compaction(variant), "cuda -arch=sm_80")
                              .source.text)


@pytest.mark.parametrize("variant", ["ticket", "inline", "global counter"])
def test_stores_at_tickets_of_one_counter_need_no_barrier_between_them(variant):
    kernel = _compaction_text(variant)
    start, end = cuda_source.loop_span(kernel, "k")
    assert "tw_atomic_add" in kernel[start:end]
    assert "__syncthreads" not in kernel[start:end], kernel[start:end]
    assert "__syncthreads();" in kernel[end:kernel.index("Out_ptr[")]  # the list's reads
    if variant != "global counter":  # the zeroing of the shared counter before its steps
        assert "__syncthreads();" in kernel[kernel.index("] = 0;"):start]
    assert kernel.count("__syncthreads") == (1 if variant == "global counter" else 2)


@pytest.mark.parametrize("variant, barriers", [
    ("two counters", 1), ("counter per iteration", 1), ("zero step", 1), ("variable step", 1),
    ("global counter written", 1),  # one before the stores: plain writes of one another
    ("plain write", 2), ("reset", 2), ("another add", 2),  # and one before the other access
])
def test_stores_at_tickets_keep_their_barrier_where_tickets_may_meet(variant, barriers):
    kernel = _compaction_text(variant)
    start, end = cuda_source.loop_span(kernel, "k")
    assert kernel[start:end].count("__syncthreads();") == barriers, kernel[start:end]


@pytest.mark.emulator
def test_compaction_at_tickets_matches_torch(tmp_path):
    x = torch.rand(512, generator=torch.Generator().manual_seed(3))
    out, count = torch.full((512,), -1.0), torch.full((1,), -1, dtype=torch.int32)
    lowered = tilewright.lower(compaction(), "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, out, count)
    want = x[x > 0.5]
    assert int(count) == want.numel()
    assert torch.equal(out[:want.numel()].sort().values, want.sort().values)
    assert torch.equal(out[want.numel():], torch.zeros(512 - want.numel()))


def test_a_ticket_bound_to_a_variable_and_where_it_stops():
    """``p = <step>; buf[p + 1] = tx`` is a ticket store; a plain write of the counter between
    the step and the store, or a thread-dependent offset, makes it a plain one."""
    tx, p = tirx.Var("tx", "int32"), tirx.Var("p", "int32")
    cnt = tirx.decl_buffer((1,), "int32", "cnt", scope="shared.dyn")
    buf = tirx.decl_buffer((64,), "int32", "buf", scope="shared.dyn")
    take = tirx.Bind(p, intrinsics.atomic("add", tirx.BufferLoad(cnt, [0]),
                                          tirx.IntImm("int32", 1)))
    store = tirx.BufferStore(buf, tx, [p + 1])
    found = tickets.find(tirx.SeqStmt([take, store]), tx).of(store)
    assert found is not None and found.counter.source.same_as(cnt) and found.dim == 0
    reset = tirx.BufferStore(cnt, tirx.IntImm("int32", 0), [0])
    assert tickets.find(tirx.SeqStmt([take, reset, store]), tx).of(store) is None
    spread = tirx.BufferStore(buf, tx, [p + tx])
    assert tickets.find(tirx.SeqStmt([take, spread]), tx).of(spread) is None
