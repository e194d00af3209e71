"""Every catalogue kernel, at every dtype and shape variant, on the backend under test."""

import pytest

from .plugin import UNAVAILABLE, UNSUPPORTED
from .runner import Unavailable, Unsupported, run_case


def test_kernel(conformance_case, tilewright_backend, tilewright_conformance, record_property):
    try:
        summary = run_case(conformance_case, tilewright_backend, tilewright_conformance.mode)
    except Unsupported as exc:
        pytest.skip(UNSUPPORTED + str(exc))
    except Unavailable as exc:
        pytest.skip(UNAVAILABLE + str(exc))
    record_property("tilewright_summary", summary)
