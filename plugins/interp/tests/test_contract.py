"""The backend contract, checked with the SDK's contract checks."""

import pytest
from tilewright.plugin import get_manager

contract = pytest.importorskip("tilewright_sdk.conformance.contract")


@pytest.fixture(scope="module")
def backend():
    backends = get_manager().backends()
    assert "interp" in backends, "backend 'interp' is not installed: pip install -e ."
    return backends["interp"]


@pytest.mark.parametrize("check", [
    "check_declarations", "check_capabilities", "check_target_claims", "check_executors",
    "check_phases_visible", "check_unsupported_message", "check_timers", "check_arch_models",
])
def test_contract(backend, check):
    getattr(contract, check)(backend)
