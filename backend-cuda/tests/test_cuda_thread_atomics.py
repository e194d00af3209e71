"""Thread-level atomics (transforms.threads.thread_atomics): an element's ``T.atomic_add``
under a condition on ``T.get_thread_binding()``, or indexed or valued from it, is one atomic of
each thread, as TileLang's ``atomic_add_elem_op``; in block code the same statement stays the
block's one atomic. Run by the host emulation (each CUDA thread a fiber) and compared
with torch; DeepSeek V3.2's radix top-k selector (TileLang's
``examples/deepseek_v32/topk_selector.py``, its block shrunk to 256 threads) against
``torch.topk``."""

import cuda_source
import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError


def histogram_kernel(n=256, bins=16, blocks=2):
    """Each thread counts its value into a shared histogram (skipping negatives); the block
    adds the histogram to global memory, and counts itself once in ``Blocks``."""

    @T.prim_func
    def histogram(X: T.Tensor((blocks, n), "int32"), H: T.Tensor((bins,), "int32"),
                  Blocks: T.Tensor((1,), "int32")):
        with T.Kernel(blocks, threads=n) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((bins,), "int32")
            T.fill(s, 0)
            if X[bx, tx] >= 0:
                T.atomic_add(s[X[bx, tx] % bins], 1)
            T.atomic_add(Blocks[0], 1)  # block code: once per block
            for i in T.Parallel(bins):
                T.atomic_add(H[i], s[i])

    return histogram


def float_sum_kernel(n=64, blocks=3, used=50):
    """The first ``used`` threads of every block add their value to one float32 in global
    memory, and take a ticket (the counter's previous value) into their own slot."""

    @T.prim_func
    def float_sum(X: T.Tensor((blocks, n), "float32"), Total: T.Tensor((1,), "float32"),
                  Counter: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks, n), "int32")):
        with T.Kernel(blocks, threads=n) as bx:
            tx = T.get_thread_binding()
            if tx < used:
                T.atomic_add(Total[0], X[bx, tx])
            Ticket[bx, tx] = T.atomic_add(Counter[0], 1, return_prev=True)

    return float_sum


def _run(func, tmp_path, *args):
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    return lowered.source.text


@pytest.mark.emulator
def test_thread_histogram_matches_bincount(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-4, 40, (2, 256), generator=g, dtype=torch.int32)
    h, blocks = torch.zeros(16, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    _run(histogram_kernel(), tmp_path, x, h, blocks)
    kept = x[x >= 0].long() % 16
    assert torch.equal(h, torch.bincount(kept, minlength=16).to(torch.int32))
    assert int(blocks) == 2


@pytest.mark.emulator
def test_thread_float32_global_atomic_and_tickets(tmp_path):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-8, 8, (3, 64), generator=g).to(torch.float32)  # exact in any order
    total, counter = torch.zeros(1), torch.tensor([5], dtype=torch.int32)
    ticket = torch.full((3, 64), -1, dtype=torch.int32)
    _run(float_sum_kernel(), tmp_path, x, total, counter, ticket)
    assert float(total) == float(x[:, :50].sum())
    assert int(counter) == 5 + 3 * 64  # every thread's own ticket, not the block's
    assert sorted(ticket.flatten().tolist()) == list(range(5, 5 + 3 * 64))


def bf16_add_kernel():
    @T.prim_func
    def bf16_add(X: T.Tensor((64,), "bfloat16"), S: T.Tensor((1,), "bfloat16")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx < 32:
                T.atomic_add(S[0], X[tx])

    return bf16_add


def test_thread_bfloat16_add_needs_sm80():
    bf16_add = bf16_add_kernel()
    assert "tw_atomic_add" in tilewright.lower(bf16_add, "cuda -arch=sm_80").source.text
    with pytest.raises(KernelError, match=r"T.atomic_add on bfloat16 needs sm_80 or newer.*"
                                          r"the target is sm_75") as err:
        tilewright.lower(bf16_add, "cuda -arch=sm_75")
    assert "test_cuda_thread_atomics.py" in str(err.value)
    assert "T.atomic_add(S[0], X[tx])" in str(err.value)


@pytest.mark.nvrtc
def test_thread_atomics_build_with_nvrtc():
    """The shared histogram and a bfloat16 atomicAdd (sm_80's) build to cubins."""
    for func in (histogram_kernel(), bf16_add_kernel()):
        kernel = tilewright.compile(func, target="cuda -arch=sm_80")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"


def test_block_atomic_refuses_an_element_type_without_atomics():
    @T.prim_func
    def float8_add(S: T.Tensor((1,), "float8_e4m3fn")):
        with T.Kernel(1, threads=32):
            T.atomic_add(S[0], T.float8_e4m3fn(1.0))

    with pytest.raises(KernelError, match=r"T.atomic_add on float8_e4m3fn is not supported by "
                                          r"backend 'cuda' \(supported: int32, "):
        tilewright.lower(float8_add, "cuda -arch=sm_90a")


def _uint16_key(x):
    bits = T.reinterpret(T.cast(x, "float16"), "uint16")
    bits = T.if_then_else(x < 0, ~bits & 0xFFFF, bits | 0x8000)
    return bits >> 8


def _uint32_key(x):
    bits = T.reinterpret(x, "uint32")
    return T.if_then_else(x < 0, ~bits & T.cast(0xFFFFFFFF, "uint32"),
                          bits | T.cast(0x80000000, "uint32"))


def topk_kernel(batch, seq_len, topk, block=256):
    """TileLang's topk_selector.py kernel, as ported (its 1024-thread block is ``block``):
    an 8-bit radix histogram of float16 keys, then up to four 8-bit passes over the float32
    bits of the threshold bin's candidates."""
    radix, smem_input = 256, 4096

    @T.prim_func
    def topk_sel(input: T.Tensor((batch, seq_len), "float32"),  # noqa: A002 - TileLang's
                 index: T.Tensor((batch, topk), "int32"), starts: T.Tensor((batch,), "int32"),
                 ends: T.Tensor((batch,), "int32")):
        with T.Kernel(batch, threads=block) as bx:
            tx = T.get_thread_binding()
            s_threshold_bin_id = T.alloc_shared([1], "int32")
            s_histogram = T.alloc_shared([radix + 1], "int32")
            s_num_input = T.alloc_shared([2], "int32")
            s_input_idx = T.alloc_shared([2, smem_input], "int32")
            l_threshold_bin_id = T.alloc_var("int32")
            l_new_topk = T.alloc_var("int32")
            l_num_input = T.alloc_var("int32")
            l_bin_id32 = T.alloc_var("int32")
            l_val = T.alloc_var("int32")
            l_start_pos = T.alloc_var("int32")
            l_start_idx = T.alloc_var("int32")
            l_end_idx = T.alloc_var("int32")
            l_out_pos = T.alloc_var("int32")
            pos = T.alloc_var("int32")
            l_new_topk = topk
            l_start_idx = starts[bx]
            l_end_idx = ends[bx]
            T.fill(s_histogram, 0)
            T.fill(s_num_input[0], 0)
            T.fill(s_threshold_bin_id, 0)
            T.sync_threads()
            for s in T.serial(T.ceildiv(seq_len, block * 4)):
                input_base = s * block * 4 + tx * 4
                for j in T.serial(4):
                    input_idx = input_base + j
                    if input_idx < l_end_idx and input_idx >= l_start_idx and \
                            input_idx < seq_len:
                        T.atomic_add(s_histogram[_uint16_key(input[bx, input_idx])], 1)
            T.sync_threads()
            if tx < radix:
                for i in T.serial(8):
                    offset = 1 << i
                    T.sync_threads(3, radix)
                    if tx < radix - offset:
                        l_val = s_histogram[tx] + s_histogram[tx + offset]
                    T.sync_threads(3, radix)
                    if tx < radix - offset:
                        s_histogram[tx] = l_val
                T.sync_threads(3, radix)
                if s_histogram[tx] >= l_new_topk and s_histogram[tx + 1] < l_new_topk:
                    s_threshold_bin_id[0] = tx
            T.sync_threads()
            l_threshold_bin_id = s_threshold_bin_id[0]
            l_new_topk = l_new_topk - s_histogram[l_threshold_bin_id + 1]
            T.sync_threads()
            for s in T.serial(T.ceildiv(seq_len, block * 4)):
                T.sync_threads()
                input_base = s * block * 4 + tx * 4
                for j in T.serial(4):
                    input_idx = input_base + j
                    if input_idx < l_end_idx and input_idx >= l_start_idx and \
                            input_idx < seq_len:
                        l_bin_id32 = T.cast(_uint16_key(input[bx, input_idx]), "int32")
                        if l_bin_id32 > l_threshold_bin_id:
                            pos = T.atomic_add(s_histogram[l_bin_id32 + 1], 1, return_prev=True)
                            index[bx, pos] = input_idx
                        elif l_bin_id32 == l_threshold_bin_id and l_new_topk > 0:
                            pos = T.atomic_add(s_num_input[0], 1, return_prev=True)
                            s_input_idx[0, pos] = input_idx
            for rnd in T.serial(4):
                if l_new_topk <= 0:
                    break
                r_idx = rnd % 2
                l_start_pos = topk - l_new_topk
                T.sync_threads()
                T.fill(s_histogram, 0)
                if tx == 0:
                    s_num_input[r_idx ^ 1] = 0
                T.sync_threads()
                l_num_input = s_num_input[r_idx]
                for s in T.serial(T.ceildiv(l_num_input, block)):
                    if s * block + tx < l_num_input:
                        l_bin_id32 = T.cast(((_uint32_key(
                            input[bx, s_input_idx[r_idx, s * block + tx]]) >> (24 - rnd * 8))
                            & 0xFF), "int32")
                        T.atomic_add(s_histogram[l_bin_id32], 1)
                T.sync_threads()
                if tx < radix:
                    for i in T.serial(8):
                        offset = 1 << i
                        T.sync_threads(3, radix)
                        if tx < radix - offset:
                            l_val = s_histogram[tx] + s_histogram[tx + offset]
                        T.sync_threads(3, radix)
                        if tx < radix - offset:
                            s_histogram[tx] = l_val
                    T.sync_threads(3, radix)
                    if s_histogram[tx] >= l_new_topk and s_histogram[tx + 1] < l_new_topk:
                        s_threshold_bin_id[0] = tx
                T.sync_threads()
                l_threshold_bin_id = s_threshold_bin_id[0]
                l_new_topk = l_new_topk - s_histogram[l_threshold_bin_id + 1]
                T.sync_threads()
                for s in T.serial(T.ceildiv(l_num_input, block)):
                    T.sync_threads()
                    if s * block + tx < l_num_input:
                        l_bin_id32 = T.cast(((_uint32_key(
                            input[bx, s_input_idx[r_idx, s * block + tx]]) >> (24 - rnd * 8))
                            & 0xFF), "int32")
                        if l_bin_id32 > l_threshold_bin_id:
                            pos = T.atomic_add(s_histogram[l_bin_id32 + 1], 1,
                                               return_prev=True) + l_start_pos
                            index[bx, pos] = s_input_idx[r_idx, s * block + tx]
                        elif l_bin_id32 == l_threshold_bin_id and l_new_topk > 0:
                            if rnd == 3:
                                l_out_pos = T.atomic_add(s_histogram[l_bin_id32 + 1], 1,
                                                         return_prev=True) + l_start_pos
                                if l_out_pos < topk:
                                    index[bx, l_out_pos] = s_input_idx[r_idx, s * block + tx]
                            else:
                                pos = T.atomic_add(s_num_input[r_idx ^ 1], 1, return_prev=True)
                                s_input_idx[r_idx ^ 1, pos] = s_input_idx[r_idx, s * block + tx]

    return topk_sel


@pytest.mark.emulator
def test_topk_selector_matches_torch_topk(tmp_path):
    batch, seq_len, topk = 2, 2048, 64
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq_len, generator=g)
    starts = torch.zeros(batch, dtype=torch.int32)
    ends = torch.full((batch,), seq_len, dtype=torch.int32)
    index = torch.full((batch, topk), -1, dtype=torch.int32)
    text = _run(topk_kernel(batch, seq_len, topk), tmp_path, x, index, starts, ends)
    kernel = cuda_source.kernel(text)
    for var in ("s", "s_2"):  # the histograms' loops: atomics of one function, no barrier
        start, end = cuda_source.loop_span(kernel, var)
        assert "tw_atomic_add" in kernel[start:end]
        assert "__syncthreads" not in kernel[start:end], kernel[start:end]
    # the first pass's second loop: the shared stores are at tickets of s_num_input[0], but
    # the global index[bx, pos] stores take tickets of each thread's own bin counter
    # (s_histogram[bin + 1]), distinct only by the prefix sums the counters start from, which
    # barrier insertion cannot see: a barrier before the loop over j and one inside it
    start, end = cuda_source.loop_span(kernel, "s_1")
    assert "tw_atomic_add" in kernel[start:end]
    assert kernel[start:end].count("__syncthreads") == 2, kernel[start:end]
    # 16 when an atomic was a plain write, 13 when a store at a ticket was, 11 with shared
    # stores at tickets; those 2 more order the global index[bx, pos] stores
    assert kernel.count("__syncthreads();") == 13
    want = torch.topk(x, topk, dim=-1).indices
    for b in range(batch):
        assert sorted(index[b].tolist()) == sorted(want[b].tolist())


def element_and_region_kernel(n=128):
    """Every thread names ``X[tx]``: ``Y[0:1]`` is a one-element tile op, the block's (made
    once, by thread 0, with its value); ``Y[1]`` an element, each thread's."""

    @T.prim_func
    def element_and_region(X: T.Tensor((n,), "int32"), Y: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            T.atomic_add(Y[0:1], X[tx])
            T.atomic_add(Y[1], X[tx])

    return element_and_region


@pytest.mark.emulator
def test_a_one_element_region_is_the_blocks_atomic_an_element_each_threads(tmp_path):
    x = torch.randint(1, 100, (128,), generator=torch.Generator().manual_seed(2),
                      dtype=torch.int32)
    y = torch.zeros(2, dtype=torch.int32)
    _run(element_and_region_kernel(), tmp_path, x, y)
    assert y.tolist() == [int(x[0]), int(x.sum())]


def test_a_one_element_region_under_whole_warps_is_the_roles_atomic_else_refused():
    def guarded(part):
        @T.prim_func
        def main(Y: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=128):
                tx = T.get_thread_binding()
                if tx < part:
                    T.atomic_add(Y[0:1], 1)

        return main

    # whole warps are a role (threads.thread_ranges_as_roles): the role's one atomic
    text = cuda_source.kernel(tilewright.lower(guarded(64), "cuda -arch=sm_90a").source.text)
    assert text.count("tw_atomic_add(") == 1 and "if (((int)threadIdx.x) == 0)" in text
    with pytest.raises(KernelError, match=r"T.atomic_add under a condition on the thread "
                                          r"index") as err:
        tilewright.lower(guarded(40), "cuda -arch=sm_90a")
    assert "if tx < part:" in str(err.value)  # the condition's line
