"""Test setup of tilewright-interp: a private kernel cache per test. Gate hardware here, in one
place, with one skip reason."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
