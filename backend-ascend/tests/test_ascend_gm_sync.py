"""A GM tensor that a kernel both stores to and reads back (a scalar read-modify-write of an
element) is ordered by the synchronisation pass: the store (MTE3) before the read (MTE2),
where their regions may overlap. Was reported as a race by the emulator
(/work/findings/dialect2-ascend-gm-read-modify-write.py); deleting the flag is still one."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source

N, BN = 20, 8


def read_modify_write():
    @T.prim_func
    def rmw(X: T.Tensor((N, 4), "int8"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, BN), threads=128) as bx:
            for i in T.serial(BN):
                g = bx * BN + i
                if g < N:
                    Y[g] = 5
                    Y[g] = Y[g] + T.cast(X[g, 0], "int32")

    return rmw


def store_then_read():
    """No loop: the flag between the store and the read is a plain pair."""

    @T.prim_func
    def main(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(8):
                Y[i] = X[i] * 2
            for i in T.Parallel(8):
                Y[i] = Y[i] + 1

    return main


def store_only(M=16, BM=4):
    """Each iteration stores its own rows of ``Y``: nothing to order between them."""

    @T.prim_func
    def main(X: T.Tensor((M, 8), "float32"), Y: T.Tensor((M, 8), "float32")):
        with T.Kernel(1, threads=128) as _:
            for k in T.serial(M // BM):
                for i, j in T.Parallel(BM, 8):
                    Y[k * BM + i, j] = X[k * BM + i, j] + 1

    return main


def test_a_read_modify_write_of_a_global_element_is_ordered():
    kernel = tilewright.compile(read_modify_write(), out_idx=[-1], target="ascend")
    assert "WaitFlag<HardEvent::MTE3_MTE2>" in kernel.get_kernel_source()
    x = torch.randint(-9, 9, (N, 4), dtype=torch.int8,
                      generator=torch.Generator().manual_seed(16))
    torch.testing.assert_close(kernel(x), x[:, 0].int() + 5)


def test_deleting_the_store_to_read_flag_is_a_race(tmp_path):
    low = tilewright.lower(store_then_read(), target="ascend")
    lines = low.source.text.splitlines()
    x = torch.randn(8)
    torch.testing.assert_close(
        tilewright.compile(store_then_read(), out_idx=[-1], target="ascend")(x), x * 2 + 1)
    sets = [i for i, line in enumerate(lines) if "SetFlag<HardEvent::MTE3_MTE2>" in line]
    assert sets, low.source.text
    s = sets[0]
    eid = re.search(r"\((\d+)\);", lines[s])[1]
    w = next(k for k in range(s + 1, len(lines))
             if f"WaitFlag<HardEvent::MTE3_MTE2>({eid});" in lines[k])
    text = "\n".join(line for i, line in enumerate(lines) if i not in (s, w))
    with pytest.raises(EmulatorError, match=r"race \(.*GM buffer 'Y'"):
        compile_and_run_source(text, low.source.payload, (x, torch.empty(8)), tmp_path)


def test_stores_to_distinct_rows_of_a_tensor_get_no_flag():
    text = tilewright.lower(store_only(), target="ascend").source.text
    assert "MTE3_MTE2" not in text and "PipeBarrier<PIPE_MTE3>" not in text


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    kernels = {"rmw": read_modify_write(), "store_then_read": store_then_read()}
    sources = {name: tilewright.lower(f, target="ascend").source.text
               for name, f in kernels.items()}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
