"""Plain ``cuda`` resolves to one architecture (visible GPU, ``$TILEWRIGHT_CUDA_ARCH``, else
sm_90a) when the target is resolved, so the disk cache keys kernels by the architecture they
were built for; ``tilewright doctor`` says which one and why."""

import json

import pytest
import tilewright
import tilewright.language as T
from tilewright.engine.target import resolve_target
from tilewright.jit.cache import DiskCache
from tilewright_cuda import arch

needs_no_gpu = pytest.mark.skipif(arch.visible_gpu_arch() is not None,
                                  reason="a visible GPU decides what plain 'cuda' means")


@T.prim_func
def add_one(X: T.Tensor((256,), "float32"), Y: T.Tensor((256,), "float32")):
    with T.Kernel(2, threads=128) as bx:
        for i in T.Parallel(128):
            Y[bx * 128 + i] = X[bx * 128 + i] + 1.0


@needs_no_gpu
def test_plain_cuda_resolves_to_the_environment_arch(monkeypatch):
    assert str(resolve_target("cuda")[0]) == "cuda -arch=sm_90a"
    monkeypatch.setenv(arch.ENV, "sm_80")
    assert str(resolve_target("cuda")[0]) == "cuda -arch=sm_80"
    # an explicit arch wins over the environment
    assert str(resolve_target("cuda -arch=sm_86")[0]) == "cuda -arch=sm_86"


@needs_no_gpu
@pytest.mark.nvrtc
def test_cache_entries_differ_by_arch(monkeypatch, cache_dir):
    entries = {}
    for name in ("sm_80", "sm_90a", "sm_80"):
        monkeypatch.setenv(arch.ENV, name)
        kernel = tilewright.compile(add_one, target="cuda")
        assert str(kernel.target) == f"cuda -arch={name}"
        launch = json.loads(open(f"{kernel.artifact_dir}/launch.json").read())
        assert launch["arch"] == name
        entries.setdefault(name, set()).add(str(kernel.artifact_dir))
    assert len(entries["sm_80"]) == 1  # the second sm_80 compile is served from the cache
    assert entries["sm_80"].isdisjoint(entries["sm_90a"])
    assert len(DiskCache(cache_dir).entries()) == 2


def test_doctor_says_what_plain_cuda_compiles_for(monkeypatch, capsys):
    from tilewright.cli.main import main

    monkeypatch.setenv(arch.ENV, "sm_80")
    main(["doctor"])
    out = capsys.readouterr().out
    gpu = arch.visible_gpu_arch()
    if gpu:
        assert f"GPU visible; 'cuda' compiles for {gpu}" in out
    else:
        assert "'cuda' compiles for sm_80 from $TILEWRIGHT_CUDA_ARCH" in out
        monkeypatch.delenv(arch.ENV)
        main(["doctor"])
        assert "'cuda' compiles for sm_90a from the default" in capsys.readouterr().out
