"""Debug-tool tests: no tool stays enabled after a test."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _tools_off():
    yield
    from tilewright.tools import lower_trace, pass_timing

    lower_trace.disable()
    pass_timing.disable()
