"""Every catalogue kernel, at every dtype and shape variant, on the backend under test."""

import pytest

from .known_failures import known_failure
from .outcomes import UNAVAILABLE, UNSUPPORTED
from .runner import Unavailable, Unsupported, cannot_execute, run_case


def test_kernel(conformance_case, tilewright_backend, tilewright_conformance, record_property,
                request):
    known = known_failure(tilewright_backend.name, conformance_case.id,
                          executes=not cannot_execute(tilewright_backend))
    if known is not None and known.when == "crash":
        pytest.skip(f"{known.reason()} (it crashes the process: not run)")
    if known is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=known.reason()))
    try:
        summary = run_case(conformance_case, tilewright_backend, tilewright_conformance.mode,
                           tilewright_conformance.target)
    except Unsupported as exc:
        pytest.skip(UNSUPPORTED + str(exc))
    except Unavailable as exc:
        pytest.skip(UNAVAILABLE + str(exc))
    record_property("tilewright_summary", summary)
