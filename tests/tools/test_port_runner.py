"""tools/port_tilelang_examples.py: the mechanical port and the host shim it installs."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "port_tilelang_examples.py"


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location("port_tilelang_examples", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EXAMPLE = '''\
import torch
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def double(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                Y[i] = X[i] * 2.0
    return main


if __name__ == "__main__":
    x = torch.randn(64, device="cuda")
    side = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    with torch.cuda.stream(side):
        y = double(64)(x)
    torch.cuda.default_stream().wait_stream(side)
    end.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) >= 0
    torch.testing.assert_close(y, x * 2)
    print("All checks passed")
'''


def test_port_renames_imports_and_devices(runner):
    ported = runner.port_source(EXAMPLE)
    assert "import tilewright as tilelang" in ported
    assert "import tilewright.language as T" in ported
    assert 'device="cpu"' in ported and '"cuda"' not in ported


def test_port_maps_a_cuda_target_dict_to_the_host(runner):
    ported = runner.port_source('k = tilelang.compile(f, target={"kind": "cuda", "arch": "sm_90"})')
    assert ported == 'k = tilelang.compile(f, target="auto")'


def test_an_example_using_streams_and_events_runs_on_the_host(runner, tmp_path):
    examples = tmp_path / "tilelang" / "examples" / "demo"
    examples.mkdir(parents=True)
    (examples / "example_streams.py").write_text(EXAMPLE)
    out = tmp_path / "out.json"
    rc = runner.main(["--checkout", str(tmp_path / "tilelang"), "--target", "cpu",
                      "--timeout", "300", "--json", str(out)])
    rows = json.loads(out.read_text())
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert [(r["example"], r["result"]) for r in rows] == \
        [("demo/example_streams.py", "verified")], rows
    assert rc == 0


PRODUCTS = '''\
import torch

torch.manual_seed(0)
a, b = torch.randn(64, 96), torch.randn(96, 32)
for dtype in (torch.float16, torch.bfloat16):
    x, y = a.to(dtype), b.to(dtype)
    want = (x.float() @ y.float()).to(dtype)  # the device: float32 accumulation, one rounding
    for got in (x @ y, torch.matmul(x, y), torch.mm(x, y), x.matmul(y),
                torch.einsum("ik,kj->ij", x, y), torch.nn.functional.linear(x, y.T),
                torch.bmm(x[None], y[None])[0]):
        assert got.dtype == dtype and torch.equal(got, want), dtype
# mixed types stay torch's own error
try:
    a.half() @ b
except RuntimeError:
    pass
else:
    raise AssertionError("a float16 x float32 product must fail as in torch")
# float8 with row and column scales, against torch's own (slow) host kernel
fa = (a[:, :64] * 4).to(torch.float8_e4m3fn)
fb = (b[:64, :].T.contiguous() * 4).to(torch.float8_e4m3fn).T
sa, sb = torch.rand(64, 1) + 0.5, torch.rand(1, 32) + 0.5
got = torch._scaled_mm(fa, fb, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
ref = torch._scaled_mm.__wrapped__(fa, fb, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)
# a floating tensor divided by a number: times its reciprocal in the compute type, as torch's
# CUDA kernel does; the host's true division differs in the last bit for some values
amax = torch.rand(4096) * 8
inv = (torch.ones(()) / torch.tensor(448.0)).item()
for got in (amax / 448.0, amax.div(448.0), torch.div(amax, 448.0), amax.true_divide(448)):
    assert torch.equal(got, amax * inv)
assert not torch.equal(amax / 448.0, torch.Tensor.__truediv__.__wrapped__(amax, 448.0))
halved = amax.clone()
halved /= 448.0
assert torch.equal(halved, amax * inv)
assert torch.equal(amax.half() / 3, (amax.half().float() * (1 / torch.tensor(3.0)).item()).half())
assert torch.equal(amax / torch.full((4096,), 448.0), torch.Tensor.__truediv__.__wrapped__(
    amax, torch.full((4096,), 448.0)))  # a tensor divisor: torch's division
assert torch.equal(torch.arange(6) / 4, torch.arange(6).float() / 4)
# torch.compile's inductor registers torch.mm, torch.bmm ... by their names: one each
assert (torch.mm.__name__, torch.bmm.__name__, torch.div.__name__) == ("mm", "bmm", "div")
import torch._inductor.select_algorithm  # noqa: E402,F401  (it asserted on a duplicate name)
print("products as the device computes them")
'''


def test_the_shim_computes_as_the_device(runner, tmp_path):
    """float16 / bfloat16 products accumulate in float32 and round once; float8 _scaled_mm
    agrees with torch's own host kernel; division by a number is a multiplication by its
    reciprocal."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(runner.SHIM)
    (tmp_path / "products.py").write_text(PRODUCTS)
    env = dict(os.environ, PYTHONPATH=str(shim))
    done = subprocess.run([sys.executable, str(tmp_path / "products.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "as the device computes them" in done.stdout


TWO_KERNELS = '''\
import torch
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def copy_through(n, staged):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((staged,), "float32")
            T.copy(X[0:n], S[0:n])
            T.copy(S[0:n], Y[0:n])
    return main


if __name__ == "__main__":
    x = torch.randn(256, device="cuda")
    torch.testing.assert_close(copy_through(256, 256)(x), x)
    torch.testing.assert_close(copy_through(256, 256)(x), x)  # the same kernel: built once
    # 256 KiB of shared memory: the host runs it, the CUDA backend refuses it (over sm_80's)
    torch.testing.assert_close(copy_through(256, 65536)(x), x)
'''


def test_also_compile_builds_each_kernel_for_cuda(runner, tmp_path):
    """--also-compile: every distinct kernel the example compiles is built for the CUDA target
    too, and recorded as built or refused; the example's own run is unchanged."""
    examples = tmp_path / "tilelang" / "examples" / "demo"
    examples.mkdir(parents=True)
    (examples / "example_two.py").write_text(TWO_KERNELS)
    out = tmp_path / "out.json"
    runner.main(["--checkout", str(tmp_path / "tilelang"), "--target", "cpu", "--timeout",
                 "300", "--json", str(out), "--also-compile", "cuda -arch=sm_80"])
    [row] = json.loads(out.read_text())
    assert row["result"] == "verified", row
    outcomes = [(c["kernel"], c["target"], c["status"]) for c in row["compiled"]]
    assert outcomes == [("copy_through", "cuda -arch=sm_80", "built"),
                        ("copy_through", "cuda -arch=sm_80", "refused")], row["compiled"]
    assert "shared memory" in row["compiled"][1]["error"], row["compiled"][1]
    table = runner.compile_table([runner.Result(**row)], ["cuda -arch=sm_80"])
    assert "kernels: built 1, refused 1, crashed 0" in table, table


HOPPER = '''\
import torch
import tilelang
import tilelang.language as T
from tilelang.contrib import nvcc

# the target's compute capability (TileLang's examples check for Hopper this way)
assert nvcc.get_target_compute_version() == "9.0", nvcc.get_target_compute_version()


@tilelang.jit(out_idx=[-1])
def fenced_copy(n, staged):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((staged,), "float32")
            T.copy(X[0:n], S[0:n])
            T.fence_proxy_async()
            T.copy(S[0:n], Y[0:n])
    return main


if __name__ == "__main__":
    x = torch.randn(256, device="cuda")
    kernel = fenced_copy(256, STAGED)
    y = kernel(x)
    raise SystemExit("the example went on past its first kernel call")
'''

UNKNOWN = '''\
import tilelang
import tilelang.language as T


@tilelang.jit
def uses_unknown(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            T.ptx_not_a_name(X.data)
            T.mma_neither()
    return main


if __name__ == "__main__":
    uses_unknown(64)
'''

BLACKWELL = '''\
import tilelang
import tilelang.language as T

if __name__ == "__main__":
    T.tcgen05_gemm
'''


def test_dialect_compile_only_builds_hopper_examples(runner, tmp_path):
    """--dialect cuda --compile-only: an example not portable only for a GPU-only API is ported
    to tilewright_cuda.language; its kernels are built with NVRTC for the target and it stops
    at its first kernel call (built), at a kernel the backend refuses (refused), or before any
    kernel when it uses a name the dialect lacks (frontend error naming each); a tcgen05
    example is left out, saying why."""
    examples = tmp_path / "tilelang" / "examples" / "hopper"
    examples.mkdir(parents=True)
    (examples / "example_fenced.py").write_text(HOPPER.replace("STAGED", "256"))
    # 256 KiB of shared memory: over sm_90a's 227 KiB, refused at the user's line
    (examples / "example_huge.py").write_text(HOPPER.replace("STAGED", "65536"))
    (examples / "example_unknown.py").write_text(UNKNOWN)
    (examples / "example_tcgen05.py").write_text(BLACKWELL)
    (examples / "example_portable.py").write_text(BLACKWELL.replace("T.tcgen05_gemm", "pass"))
    out = tmp_path / "out.json"
    runner.main(["--checkout", str(tmp_path / "tilelang"), "--dialect", "cuda",
                 "--compile-only", "cuda -arch=sm_90a", "--timeout", "300", "--json",
                 str(out)])
    rows = {r["example"]: r for r in json.loads(out.read_text())}
    assert "hopper/example_portable.py" not in rows  # the plain mode runs it
    fenced = rows["hopper/example_fenced.py"]
    assert (fenced["result"], fenced["detail"]) == \
        ("built", "stopped at the first kernel call"), fenced
    assert [(c["kernel"], c["status"]) for c in fenced["compiled"]] == \
        [("fenced_copy", "built")], fenced
    huge = rows["hopper/example_huge.py"]
    assert huge["result"] == "refused" and "shared memory" in huge["detail"], huge
    unknown = rows["hopper/example_unknown.py"]
    assert unknown["result"] == "frontend error", unknown
    assert unknown["missing"] == ["ptx_not_a_name", "mma_neither"], unknown
    assert unknown["detail"].startswith("missing T.ptx_not_a_name, T.mma_neither;"), unknown
    blackwell = rows["hopper/example_tcgen05.py"]
    assert blackwell["result"] == "not portable" and "sm_100" in blackwell["detail"], blackwell
    table = runner.compile_only_table([runner.Result(**r) for r in rows.values()],
                                      ["cuda -arch=sm_90a"])
    assert "examples: built 1, refused 1, frontend error 1, not portable 1" in table, table
    assert "missing names (examples using them): T.mma_neither 1, T.ptx_not_a_name 1" in table


def test_dialect_port_renames_the_language(runner):
    ported = runner.port_source("import tilelang\nimport tilelang.language as T\n"
                                "from tilelang.language import Kernel\n"
                                "from tilelang import language as L\n", dialect="cuda")
    assert ported.splitlines() == ["import tilewright as tilelang",
                                   "import tilewright_cuda.language as T",
                                   "from tilewright_cuda.language import Kernel",
                                   "from tilewright_cuda import language as L"]
    ported = runner.port_source("from tilelang import DataType\n"
                                "from tilelang.transform import simplify_prim_func\n")
    namespace: dict = {}
    exec(ported, namespace)  # noqa: S102 - the ported lines themselves
    assert namespace["DataType"]("float16").bits == 16
    assert namespace["simplify_prim_func"](len) is len
    source = "from tilelang import language as L\nL.ws(1)\nL.ptx_x()\nB.T.to(1)\nL.ptx_x()\n"
    assert runner.missing_names(source, {"ws"}) == ["ptx_x"]


def test_an_example_killed_by_a_signal_is_named_by_it(runner):
    output = "  correctness: PASS  (M=4096)\n  latency: 107.3 ms\n"
    result, detail = runner.classify(-9, output, True)
    assert result == "runtime error"
    assert detail == ("killed by SIGKILL (the host's memory ran out?) after:   latency: "
                      "107.3 ms")
    assert runner.classify(-11, "Traceback (most recent call last):\nValueError: x\n",
                           True)[1] == "ValueError: x"  # an exception still names itself
