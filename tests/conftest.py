"""Shared fixtures: every test compiles into its own disk cache."""

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "tw-cache"
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    return path
