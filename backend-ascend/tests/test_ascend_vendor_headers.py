"""Every Ascend C source the backend generates compiles against the vendor's headers
(asc-devkit), as the cube core and as a vector core: the kernels of backend-ascend/examples and
examples/ retargeted to Ascend (tilewright_ascend.kit.sources), against the arch-2201 headers;
the mainline dialect's kernels and examples/ retargeted to ascend-950 against the arch-3510
headers. The conformance catalogue's sources are checked by the Ascend conformance run, where
they are generated (tilewright_ascend.kit.conformance_headers; `make conformance`); the plugin
doing it is tested here. A wrong call is a diagnostic located in our source."""

import re
from importlib.metadata import entry_points
from types import SimpleNamespace

import pytest
import tilewright
import tilewright_ascend.language as T
from tilewright.engine import events
from tilewright_ascend.facts.arch import ARCHS, NPU_ARCH
from tilewright_ascend.kit.conformance_headers import CHECKED, VendorHeaders, run_folder
from tilewright_ascend.kit.headers import CORES, check_sources
from tilewright_ascend.kit.sources import (
    conformance,
    examples,
    generated,
    mainline,
    source_set,
)

NPU_950 = ARCHS["ascend-950"].npu_arch


def test_every_generated_source_compiles_against_the_vendor_headers(asc_check):
    kernels = [k for k in source_set() if k.group != "conformance"]
    groups = {k.group for k in kernels}
    assert groups == {"seed", "examples"}, groups
    sources, _refused = generated(kernels)  # a refused kernel has no source
    findings = asc_check(sources)
    report = "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}" for f in findings)
    assert not findings, f"{len(findings)} of {len(sources) * len(CORES)} compiles:\n{report}"


@T.prim_func
def muls(A: T.Tensor((64,), "float32")):
    with T.Kernel(1, is_npu=True) as (cid, vid):
        a = T.alloc_ub((64,), "float32")
        with T.Scope("V"):
            T.copy(A[0], a)
            T.barrier_all()
            T.tile.muls(a, a, 2.0)
            T.barrier_all()
            T.copy(a, A[0])


def wrong_muls(good: str) -> str:
    """``good`` (the source of :func:`muls`) with an int scalar operand: Muls takes ``const
    T&`` of the tile's type."""
    bad = re.sub(r"Muls\((\w+), (\w+), \(float\)2\.0f, 64\)", r"Muls(\1, \2, -1, 64)", good)
    assert bad != good
    return bad


def test_the_check_finds_a_wrong_call(asc_devkit):
    """A scalar operand of another type than the tile (Muls takes ``const T&``) and a double
    passed to printf (refused by a static_assert on 2201) are diagnostics."""
    good = tilewright.lower(muls, target="ascend").source.text
    bad = wrong_muls(good)
    printf = good.replace("PipeBarrier<PIPE_ALL>();",
                          'AscendC::printf("%f\\n", (double)cid); PipeBarrier<PIPE_ALL>();', 1)
    findings = check_sources({"good": good, "muls": bad, "printf": printf}, asc_devkit)
    assert {f.name for f in findings} == {"muls", "printf"}, findings
    text = {f.name: f.text.replace("‘", "'").replace("’", "'") for f in findings}
    assert "muls.cpp" in text["muls"] and "no matching function for call to 'Muls" in text["muls"]
    assert "printf unsupport double type" in text["printf"]


def test_the_conformance_run_checks_each_case_source(asc_devkit, tmp_path_factory):
    """The Ascend conformance run's plugin (an entry point, loaded for ``--tilewright-backend
    ascend``) compiles the Ascend C each case generates (the codegen events while it runs) and
    fails the case on a diagnostic."""
    assert "tilewright_ascend.kit.pytest_plugin" in {
        e.value for e in entry_points(group="pytest11")}
    plugin = VendorHeaders(asc_devkit, NPU_ARCH)
    plugin.prepare(run_folder(tmp_path_factory))  # the folder of asc_check's 2201 headers
    good = tilewright.lower(muls, target="ascend").source.text
    case = SimpleNamespace(id="muls-float32-full")
    for text, wrong in ((good, False), (wrong_muls(good), True)):
        item = SimpleNamespace(callspec=SimpleNamespace(params={"conformance_case": case}),
                               user_properties=[])
        call = plugin.pytest_runtest_call(item)
        next(call)  # the case runs: its compile's codegen events
        events.emit("codegen", 0, language="ascendc", text=text)
        events.emit("codegen", 0, language="cpp", text="not Ascend C: not checked")
        if wrong:
            with pytest.raises(AssertionError, match="muls-float32-full does not compile "
                                                     "against the asc-devkit headers") as info:
                call.send(None)
            assert "muls-float32-full-0.cpp:" in str(info.value)  # located in the source
        else:
            with pytest.raises(StopIteration):
                call.send(None)
        assert item.user_properties == [(CHECKED, 1)]
        assert not events.active()  # the listener is gone after the case


def test_950_sources_compile_against_the_arch_3510_headers(asc_check):
    """The mainline kernels and the examples for ascend-950 (the conformance catalogue for it
    is ``python -m tilewright_ascend.kit.headers --target ascend-950``)."""
    # and one conformance case of the vector Cast with a rounding mode (Reg::Truncate calls the
    # builtin vtrc, which the 3510 stubs lacked: 3 unary_math sources failed the full check)
    rounding = [k for k in conformance("ascend-950")
                if k.name == "conformance/unary_math-float32-partial"]
    assert rounding, "the unary_math case is in the 950 source set"
    sources, refused = generated([*mainline(), *examples(target="ascend-950"), *rounding])
    # the fp8 GEMM example (the cube computes no float8, refused at the gemm's line), the
    # 2:4 sparse one (no T.gemm_sp on Ascend) and the block-sparse one (its mask may skip the
    # GEMM that clears L0C) only
    assert sorted(r.split(":")[0] for r in refused) == [
        "examples/block_sparse_gemm.block_sparse_matmul",
        "examples/gemm_fp8_scaled.fp8_gemm_scaled", "examples/gemm_sp.gemm_sp_kernel"]
    assert any("float8_e4m3fn operands" in r for r in refused), refused
    assert "(SoC 950PR, dav-3510)" in sources["seed__vector_add"]
    # the T.SimdVF examples are register-API vector functions (Reg::, asc_vf_call)
    for name in ("seed__vector_add_simd", "seed__softmax_simd", "seed__rmsnorm_simd"):
        assert "__simd_vf__ inline void" in sources[name] and "asc_vf_call<" in sources[name]
        assert "Reg::LoadAlign" in sources[name] and "Reg::StoreAlign" in sources[name]
    # the SIMT vector functions: the vendor's launch, thread index and barrier
    simt = [name for name, text in sources.items() if "__simt_vf__ inline void" in text]
    assert {"seed__vector_add_simt", "seed__gemm_relu_m_split", "seed__simt_transpose",
            "seed__simt_softmax"} <= \
        set(simt), simt
    transpose = sources["seed__simt_transpose"]
    assert "asc_vf_call<main_simt>(dim3{64, 1, 1}" in transpose
    assert "threadIdx.x" in transpose and "asc_syncthreads();" in transpose
    findings = asc_check(sources, NPU_950)
    report = "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}" for f in findings)
    assert not findings, f"{len(findings)} of {len(sources) * len(CORES)} compiles:\n{report}"


def test_the_950_check_finds_a_wrong_simt_call(asc_check):
    """A SIMT barrier called with an argument, and a UB pointer of the wrong element type
    passed to a SIMT vector function, are both found."""
    good = generated([k for k in mainline() if k.name == "seed/simt_transpose"])[0][
        "seed__simt_transpose"]
    barrier = good.replace("asc_syncthreads();", "asc_syncthreads(1);", 1)
    pointer = good.replace("TW_UB_ARG(float, s,", "TW_UB_ARG(half, s,", 1)
    assert barrier != good and pointer != good
    findings = asc_check({"good": good, "barrier": barrier, "pointer": pointer}, NPU_950)
    assert {f.name for f in findings} == {"barrier", "pointer"}, findings


def test_the_950_check_finds_a_wrong_register_call(asc_check):
    """A register instruction missing an operand, and a store distribution StoreAlign does not
    take (the vendor's static_assert in dav_3510's DataCopyImpl), are diagnostics."""
    good = generated(mainline()[5:6])[0]["seed__rmsnorm_simd"]
    missing = re.sub(r"Reg::Mul\((\w+), (\w+), (\w+), ", r"Reg::Mul(\1, \2, ", good, count=1)
    dist = good.replace("StoreDist::DIST_PACK_B32", "StoreDist::DIST_INTLV_B16", 1)
    assert missing != good and dist != good
    findings = asc_check({"good": good, "missing": missing, "dist": dist}, NPU_950)
    text = {f.name: f.text for f in findings if f.core == "AIV"}
    assert {f.name for f in findings} == {"missing", "dist"}, findings
    assert "no matching function for call to" in text["missing"]
    assert "StoreAlign not support this dist" in text["dist"]


def test_the_950_check_finds_a_wrong_call(asc_check):
    good = generated(mainline()[:1])[0]["seed__vector_add"]
    bad = good.replace("Add(c[", "Add(1.5f, c[", 1)
    assert bad != good
    findings = asc_check({"good": good, "add": bad}, NPU_950)
    assert {f.name for f in findings} == {"add"}, findings  # as both cores: both parse it
    assert all("no matching function for call to" in f.text for f in findings)
