"""The catalogue covers the portable language; capabilities decide what is unsupported."""

import dataclasses

import pytest
from tilewright.errors import PluginError
from tilewright.ir import PORTABLE_OPS
from tilewright.plugin import get_manager
from tilewright_sdk.conformance.catalogue import CATALOGUE, DTYPES, cases, covered_ops
from tilewright_sdk.conformance.runner import Unsupported, missing_capabilities, run_case


def test_every_portable_tile_op_is_covered():
    assert set(PORTABLE_OPS) <= covered_ops()


def test_dtypes_and_shape_variants():
    all_cases = cases()
    assert len({c.id for c in all_cases}) == len(all_cases)
    assert {c.dtype for c in all_cases} == set(DTYPES) == {"float32", "float16", "bfloat16"}
    variants = {c.variant for c in all_cases}
    assert variants == {"full", "partial", "dynamic"}
    assert all(k.shapes for k in CATALOGUE)
    names = {k.name for k in CATALOGUE}
    assert {"gemm", "gemm_tn", "gemm_nt", "gemm_tt", "gemm_pipelined", "gemm_dynamic",
            "softmax", "rmsnorm", "attention", "cumsum", "atomic_add"} <= names


@pytest.fixture(scope="module")
def interp():
    return get_manager().backends()["interp"]


def test_capabilities_decide_unsupported(interp):
    case = next(c for c in cases(["copy"]) if c.variant == "partial")
    assert missing_capabilities(case, interp) == []
    narrow = dataclasses.replace(interp, capabilities=dataclasses.replace(
        interp.capabilities, features=frozenset(), dtypes=frozenset({"float32"}),
        memory_scopes=frozenset({"global", "local.fragment"})))
    f16 = next(c for c in cases(["copy"]) if c.variant == "partial" and c.dtype == "float16")
    func = f16.kernel.make(f16.dtype, **f16.dims)
    assert missing_capabilities(f16, narrow, func) == [
        "dtype float16", "feature partial_tiles", "memory scope shared.dyn"]
    with pytest.raises(Unsupported, match="backend 'interp' does not declare dtype float16"):
        run_case(f16, narrow, "codegen")


def test_op_dtypes_narrow_an_op(interp):
    narrow = dataclasses.replace(interp, capabilities=dataclasses.replace(
        interp.capabilities, op_dtypes={"gemm": {"float16", "bfloat16"}}))
    by_id = {c.id: c for c in cases(["gemm"])}
    assert missing_capabilities(by_id["gemm-float16-full"], narrow) == []
    assert missing_capabilities(by_id["gemm-float32-full"], narrow) == ["op gemm on float32"]
    assert narrow.capabilities.supports("gemm", "bfloat16")
    assert not narrow.capabilities.supports("gemm", "float32")
    with pytest.raises(PluginError, match="op_dtypes names op 'nosuch', which tile_ops"):
        dataclasses.replace(interp.capabilities, op_dtypes={"nosuch": {"float32"}})


def test_unknown_mode_is_refused(interp):
    with pytest.raises(ValueError, match="unknown conformance mode 'run'; choose one of "
                                         "codegen, compile, execute"):
        run_case(cases(["copy"])[0], interp, "run")
