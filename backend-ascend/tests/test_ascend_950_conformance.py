"""A subset of the conformance catalogue for the target ``ascend-950`` on the emulator, in the
backend's own tests: one case (float32 with partial tiles where the family has one) of each
family whose lowering depends on the target's facts (memory sizes and plans, the cube's L0C,
vector rows, reductions, atomics, dynamic shapes). The whole catalogue runs for the 950 with
``pytest --pyargs tilewright_sdk.conformance --tilewright-backend ascend --tilewright-target
ascend-950`` (about 40 minutes on the shared 2-core machine, too long for ``make test``)."""

import pytest
from tilewright.plugin import get_manager
from tilewright_sdk.conformance.catalogue import cases
from tilewright_sdk.conformance.runner import Unsupported, run_case

FAMILIES = ("gemm", "gemm_pipelined", "gemm_8bit", "gemm_tn", "attention", "softmax", "rmsnorm",
            "reduce_sum", "reduce_max_acc", "reduce_sum_dim0", "broadcast", "cast", "copy_3d",
            "atomic_add", "cumsum", "dynamic", "persistent", "limits")


def _subset():
    """Per family, a float32 case with partial tiles where there is one."""
    def rank(case):
        return (case.variant == "partial", case.dtype == "float32")

    chosen = {}
    for case in cases():
        family = case.kernel.name
        if family in FAMILIES and (family not in chosen or rank(case) > rank(chosen[family])):
            chosen[family] = case
    return [chosen[f] for f in FAMILIES]


SUBSET = _subset()


@pytest.mark.parametrize("case", SUBSET, ids=[c.id for c in SUBSET])
def test_catalogue_case_on_the_950_emulator(case):
    backend = get_manager().backends()["ascend"]
    try:
        run_case(case, backend, "execute", "ascend-950")
    except Unsupported as exc:
        pytest.skip(str(exc))
