"""Shared fixtures: every test compiles into its own disk cache; a local Ray cluster."""

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "tw-cache"
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    """A local Ray cluster for the session (skipped without Ray). One worker process: it
    imports TVM and torch once, and the tests stay short."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install "
                                            "'tilewright[ray]')")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()
