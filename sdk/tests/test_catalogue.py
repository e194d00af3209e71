"""The catalogue covers the language; capabilities decide what is unsupported."""

import dataclasses
from fnmatch import fnmatchcase

import pytest
import tilewright.language as T
import torch
from tilewright.errors import PluginError
from tilewright.ir import PORTABLE_OPS
from tilewright.plugin import get_manager
from tilewright.testing import ToleranceError
from tilewright_sdk.conformance.catalogue import (
    ALL_DTYPES,
    CATALOGUE,
    NOT_COMPUTING,
    cases,
    covered_ops,
    uncovered_names,
)
from tilewright_sdk.conformance.known_failures import KNOWN_FAILURES, known_failure
from tilewright_sdk.conformance.runner import (
    Unsupported,
    dtypes_used,
    execute,
    missing_capabilities,
    run_case,
)


def test_every_computing_export_of_the_language_has_a_case():
    assert uncovered_names() == []
    assert set(NOT_COMPUTING) <= set(T.__all__), "an exemption names no export"


def test_every_portable_tile_op_is_covered():
    assert set(PORTABLE_OPS) <= covered_ops()


def test_rows_are_unique_and_name_real_exports():
    all_cases = cases()
    assert len({c.id for c in all_cases}) == len(all_cases)
    assert len({k.name for k in CATALOGUE}) == len(CATALOGUE)
    for kernel in CATALOGUE:
        assert set(kernel.names) <= set(T.__all__), kernel.name
        assert kernel.shapes and kernel.dtypes, kernel.name
    assert {c.variant for c in all_cases} == {"full", "partial", "dynamic"}
    assert {c.dtype for c in all_cases} == set(ALL_DTYPES)


def test_every_reference_runs_on_its_inputs():
    """References of rows no installed backend runs (float8 casts) are still exercised."""
    for case in cases():
        gen = torch.Generator().manual_seed(0)
        inputs = case.kernel.inputs(torch, gen, case.dtype, **case.dims)
        expected = case.reference(inputs)
        assert isinstance(expected, list) and expected, case.id


def test_cast_targets_narrow_to_the_declared_dtypes():
    case = next(c for c in cases(["cast"]) if c.dtype == "int8")
    narrowed = case.narrowed({"int8", "float32", "bfloat16"})
    assert narrowed.dims["targets"] == ("int8", "bfloat16", "float32")
    func = narrowed.kernel.make(narrowed.dtype, **narrowed.dims)
    assert dtypes_used(func) == {"int8", "bfloat16", "float32"}


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


def test_known_failures_name_real_cases():
    ids = [c.id for c in cases()]
    for row in KNOWN_FAILURES:
        assert row.when in ("build", "run", "crash")
        assert any(known_failure(row.backend, i, executes=True) is row for i in ids), row
    # a wrong result shows only where the backend runs kernels; a build failure everywhere
    for row in KNOWN_FAILURES:
        case_id = next(i for i in ids if fnmatchcase(i, row.cases))
        assert (known_failure(row.backend, case_id, executes=False) is row) == \
            (row.when == "build"), row
        assert known_failure("no-such-backend", case_id, executes=True) is None


def test_an_exact_row_refuses_a_one_code_difference(interp):
    # float8_casts compares bit for bit: one probe encoded to its neighbour code fails
    case, = (c for c in cases(["float8_casts"]) if c.dtype == "float8_e4m3fn")
    assert execute(case, case.kernel.make(case.dtype, **case.dims), "interp").startswith(
        "max relative error 0")
    real = case.kernel.reference

    def off_by_one(*args, **kw):
        out = real(*args, **kw)
        bits = out[3].view(torch.uint8).clone()
        bits[5] += 1
        return [*out[:3], bits.view(out[3].dtype), *out[4:]]

    wrong = dataclasses.replace(case, kernel=dataclasses.replace(case.kernel,
                                                                 reference=off_by_one))
    with pytest.raises(ToleranceError, match="output 3"):
        execute(wrong, case.kernel.make(case.dtype, **case.dims), "interp")
