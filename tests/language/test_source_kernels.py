"""``T.CUDASourceCodeKernel`` in the language: where it may stand, how its source is found
(TileLang's rules), the launch it records, and its refusal, at the user's line, by the
backends without the feature ``cuda_source_kernels`` (cpu, interp, ascend). The CUDA backend's side
is backend-cuda/tests/test_cuda_source_kernels.py."""

from pathlib import Path

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.engine import pick_executor, resolve_target
from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.ir import SOURCE_KERNEL, SOURCE_KERNELS
from tilewright.jit.kernel import cache_key
from tilewright.plugin import get_manager
from tvm import tirx

CUDA_SOURCE = """
extern "C" __global__ void external_copy(float* A, float* B, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        B[i] = A[i];
    }
}
"""
TEXT = Path(__file__).read_text().splitlines()


def line_of(marker: str) -> int:
    return next(n for n, line in enumerate(TEXT, 1) if line.endswith(marker))


def source_kernel(source=CUDA_SOURCE, **options):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        T.CUDASourceCodeKernel(T.ceildiv(N, 128), source_code_or_path=source,  # the launch
                               entry_name="external_copy", **options)

    return main


def launch(func):
    """(block loops, the marker call) of ``func``."""
    loops, stmt = [], func.body
    while isinstance(stmt, tirx.For):
        loops.append(stmt)
        stmt = stmt.body
    assert isinstance(stmt, tirx.Evaluate) and stmt.value.op.name == SOURCE_KERNEL
    return loops, stmt.value


def test_records_the_launch():
    loops, call = launch(source_kernel(threads=(64, 2), cluster_dims=2))
    assert [str(loop.thread_binding.thread_tag) for loop in loops] == ["blockIdx.x"]
    assert [int(t) for t in loops[0].annotations["tw.threads"]] == [64, 2, 1]
    source, entry, *dims = call.args
    assert source.value == CUDA_SOURCE and entry.value == "external_copy"
    assert [int(d) for d in dims] == [64, 2, 1, 2, 1, 1]


def test_threads_default_to_128_and_prelude_goes_first():
    prelude = "#define SCALE 2.0f"
    _, call = launch(source_kernel(prelude=prelude))
    assert [int(d) for d in call.args[2:]] == [128, 1, 1, 1, 1, 1]
    assert call.args[0].value == prelude + "\n" + CUDA_SOURCE


@pytest.mark.parametrize("target", ["cpu", "interp", "ascend"])
def test_refused_without_the_feature_at_the_users_line(target):
    if target not in get_manager().backends():
        pytest.skip(f"backend {target!r} is not installed")
    with pytest.raises(UnsupportedOpError) as info:
        tilewright.lower(source_kernel(), target)
    assert info.value.location.line == line_of("# the launch")
    assert str(info.value.location.filename) == __file__
    assert f"is not supported by backend '{target}'" in str(info.value)
    assert f"does not declare the feature '{SOURCE_KERNELS}'" in str(info.value)
    assert str(info.value).startswith(f"{__file__}:{line_of('# the launch')}: "
                                      "T.CUDASourceCodeKernel")


@tilewright.jit(target="cpu")
def eager_copy(A, B):
    N = T.dynamic("N")
    A: T.Tensor[[N], T.float32]
    B: T.Tensor[[N], T.float32]
    T.CUDASourceCodeKernel(T.ceildiv(N, 128), threads=128, source_code_or_path=CUDA_SOURCE,
                           entry_name="external_copy")  # the eager launch


def test_eager_kernel_is_refused_on_cpu_at_its_line():
    with pytest.raises(UnsupportedOpError, match="does not declare the feature") as info:
        eager_copy(torch.zeros(4), torch.zeros(4))
    assert info.value.location.line == line_of("# the eager launch") - 1


def test_not_inside_a_kernel():
    with pytest.raises(KernelError, match="cannot be used inside 'with T.Kernel") as info:
        @T.prim_func
        def main(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                T.CUDASourceCodeKernel(1, source_code_or_path=CUDA_SOURCE)  # nested
    assert info.value.location.line == line_of("# nested")


def test_the_functions_only_launch():
    with pytest.raises(KernelError, match="has no other kernel launch") as info:
        @T.prim_func
        def after(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                A[0] = 1.0
            T.CUDASourceCodeKernel(1, source_code_or_path=CUDA_SOURCE)  # after a kernel
    assert info.value.location.line == line_of("# after a kernel")
    with pytest.raises(KernelError, match="has no other kernel launch") as info:
        @T.prim_func
        def before(A: T.Tensor((128,), T.float32)):
            T.CUDASourceCodeKernel(1, source_code_or_path=CUDA_SOURCE)
            with T.Kernel(1, threads=128):  # a kernel after
                A[0] = 1.0
    assert info.value.location.line == line_of("# a kernel after")


def test_source_from_a_file(tmp_path):
    path = tmp_path / "copy.cu"
    path.write_text(CUDA_SOURCE)
    for given in (path, str(path)):
        assert launch(source_kernel(given))[1].args[0].value == CUDA_SOURCE


@pytest.mark.parametrize("given", ["kernels/missing_copy.cu", "missing_copy.cu",
                                   Path("missing_copy")])
def test_a_missing_file_is_named(given):
    with pytest.raises(FileNotFoundError, match=f"CUDA source file not found: {given}") as info:
        source_kernel(given)
    assert isinstance(info.value, KernelError)
    assert info.value.location.line == line_of("# the launch")


def test_an_empty_source_is_a_value_error():
    with pytest.raises(ValueError, match="non-empty CUDA source text"):
        source_kernel("  ")


def test_text_that_is_no_path_is_the_source():
    assert launch(source_kernel("external_copy"))[1].args[0].value == "external_copy"


@pytest.mark.parametrize(("options", "match"), [
    ({"threads": 0}, "threads must be a positive int"),
    ({"threads": (32, 32, 2)}, "2048 threads per block; CUDA allows at most 1024"),
    ({"threads": (1, 2, 3, 4)}, "threads must be a positive int or 1 to 3"),
    ({"cluster_dims": (2, 0)}, "cluster_dims must be a positive int"),
    ({"prelude": 3}, "prelude must be CUDA source text"),
])
def test_launch_checked_at_the_users_line(options, match):
    with pytest.raises(KernelError, match=match) as info:
        source_kernel(**options)
    assert info.value.location.line == line_of("# the launch")


def test_grid_and_entry_checked():
    with pytest.raises(KernelError, match="takes 1 to 3 grid dimensions, got 4"):
        @T.prim_func
        def grid4(A: T.Tensor((128,), T.float32)):
            T.CUDASourceCodeKernel(1, 1, 1, 1, source_code_or_path=CUDA_SOURCE)
    with pytest.raises(KernelError, match="entry_name must name a __global__ function"):
        @T.prim_func
        def unnamed(A: T.Tensor((128,), T.float32)):
            T.CUDASourceCodeKernel(1, source_code_or_path=CUDA_SOURCE, entry_name="a b")


def test_the_source_is_in_the_cache_key():
    """TVM's printer leaves a string holding a newline out of a program's text; the cache
    key's text holds it, so two sources differing in one line are two binaries."""
    target, backend = resolve_target("cpu")
    executor = pick_executor(backend)
    keys = {cache_key(source_kernel(source), target, backend, executor, {}, [])
            for source in (CUDA_SOURCE, CUDA_SOURCE.replace("B[i] = A[i];", "B[i] = -A[i];"))}
    assert len(keys) == 2
