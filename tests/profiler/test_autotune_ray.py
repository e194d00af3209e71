"""executor="ray" on a local Ray cluster started by the test."""

import pytest
import tilewright
from profiler_kernels import scaled_copy
from tilewright.autotuner import tuner

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tilewright[ray]')")


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    # one worker process: it imports TVM and torch once, and the test stays short
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    ray.shutdown()


def test_search_on_a_local_ray_cluster(local_cluster, capsys):
    tuner._MEMORY.clear()
    configs = [{"block": 32}, {"fail": True}, {"scale": 2.0}]
    tuned = tilewright.autotune(configs=configs, executor="ray", warmup=1, rep=2,
                                reference=lambda x: x.clone())(scaled_copy)
    kernel = tuned(300)
    result = kernel.autotune_result
    assert [r["status"] for r in result.rows] == ["ok", "compile failed", "check failed"]
    assert result.best_config == configs[0]
    assert "compiling: 3/3 done" in capsys.readouterr().err
    import torch

    x = torch.randn(300)
    assert (kernel(x) == x).all()


@tilewright.jit(out_idx=[-1], target="cpu")
def copy_unless(N, block=64, mode="copy"):
    """Y = X, unless ``mode`` makes compiling the config crash or hang."""
    import os
    import signal
    import time

    import tilewright.language as T

    if mode == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        time.sleep(600)

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i]

    return main


def test_ray_tasks_that_crash_or_hang_fail_alone(local_cluster):
    tuner._MEMORY.clear()
    configs = [{"mode": "segfault"}, {"block": 32}, {"mode": "hang"}, {"block": 64}]
    tuned = tilewright.autotune(configs=configs, executor="ray", warmup=1, rep=2, timeout=8,
                                progress=False, reference=lambda x: x.clone())(copy_unless)
    kernel = tuned(300)
    rows = kernel.autotune_result.rows
    assert [(r["status"], r["error"]) for r in rows] == [
        ("compile failed", "killed by SIGSEGV"), ("ok", ""),
        ("compile failed", "timed out after 8 s"), ("ok", "")]
    assert kernel.autotune_result.best_config in (configs[1], configs[3])
