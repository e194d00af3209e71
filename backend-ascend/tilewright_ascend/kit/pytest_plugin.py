"""The pytest plugin of tilewright-ascend (entry point ``pytest11``): in a conformance run of
the Ascend backend (``pytest --pyargs tilewright_sdk.conformance --tilewright-backend
ascend``) it loads :mod:`.conformance_headers`, which checks each case's generated Ascend C
against the vendor's headers. Any other session only reads one option here."""

from __future__ import annotations

import pytest

BACKEND_NAME = "ascend"


@pytest.hookimpl(trylast=True)  # after the conformance plugin has resolved the backend
def pytest_configure(config):
    if config.getoption("--tilewright-backend", default=None) == BACKEND_NAME:
        config.pluginmanager.import_plugin("tilewright_ascend.kit.conformance_headers")
