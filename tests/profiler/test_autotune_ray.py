"""executor="ray" on a local Ray cluster (the session's, from ``tests/conftest.py``)."""

import tilewright
from profiler_kernels import scaled_copy
from tilewright.autotuner import tuner


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

