"""The intrinsics table (tilewright_cuda/intrinsics.py) is where the analyses learn what a
device function call does: barrier insertion counts a 16-byte copy's source as read and its
destination as written, a cp.async destination as in flight until a wait, an atomic's element
as updated atomically by its function (still a write to the other analyses), and a name the
table does not know is an error rather than a guess."""

import dataclasses

import pytest
from tilewright_cuda import intrinsics
from tilewright_cuda.analysis import ir
from tilewright_cuda.analysis.accesses import Access, atomics_conflict, conflict
from tvm import tirx

ZERO = tirx.const(0, "int32")


def _copy(name, dst, src):
    return tirx.Evaluate(tirx.call_extern(
        "int32", name, tirx.address_of(tirx.BufferLoad(dst, [ZERO])),
        tirx.address_of(tirx.BufferLoad(src, [ZERO])), tirx.const(16, "int32")))


def test_copy_effects_come_from_the_table():
    smem = tirx.decl_buffer((64,), "float16", "S", scope="shared.dyn")
    other = tirx.decl_buffer((64,), "float16", "O", scope="shared.dyn")
    access = Access(_copy("tw_copy16", smem, other), {})
    assert [b.name for b, _ in access.writes] == ["S"]
    assert [b.name for b, _ in access.reads] == ["O"]
    issued = Access(_copy("tw_cp_async16", smem, other), {})
    assert [b.name for b, _ in issued.issued] == ["S"] and not issued.writes
    assert Access(intrinsics.cp_async_wait(0), {}).lands


def test_atomic_effects_come_from_the_table():
    smem = tirx.decl_buffer((64,), "int32", "S", scope="shared.dyn")
    add, max_ = (Access(tirx.Evaluate(intrinsics.atomic(kind, tirx.BufferLoad(smem, [ZERO]),
                                                        tirx.const(1, "int32"))), {})
                 for kind in ("add", "max"))
    assert [(b.name, f) for b, _, f in add.atomics] == [("S", "tw_atomic_add")]
    assert not add.reads and not add.writes and not add.issued
    assert conflict(add.atomics, max_.atomics)  # the same memory
    assert atomics_conflict(add.atomics, max_.atomics)  # updated by different functions
    assert not atomics_conflict(add.atomics, add.atomics)
    assert ir.writes(tirx.Evaluate(intrinsics.atomic("add", tirx.BufferLoad(smem, [ZERO]),
                                                     tirx.const(1, "int32"))), [smem])


def test_template_arguments_do_not_change_the_entry():
    assert intrinsics.named("tw_gemm_mma<64, 64, 32, false, false, 128, 2, 2>").role == "gemm"
    assert intrinsics.named("tw_cp_async_wait<2>").lands


def test_an_unknown_function_is_an_error():
    with pytest.raises(KeyError, match="intrinsics table has no 'tw_mystery'"):
        intrinsics.named("tw_mystery<3>")
    assert intrinsics.lookup("exp2f") is None


def test_a_wgmma_gemm_name_reads_back_as_its_arguments():
    # rules/gemm spells the call, codegen/wgmma and the pipeline's held metadata registers
    # read it back: one value type knows the header's template order
    sparse = intrinsics.WgmmaGemm("tw_gemm_wgmma_sp", 256, 128, 256, "TW_WGMMA_F16", True,
                                  (128, 64, 128, 128, 16))
    assert sparse.name == "tw_gemm_wgmma_sp<256, 128, 256, TW_WGMMA_F16, true, 128, 64, 128, " \
                          "128, 16>"
    assert intrinsics.WgmmaGemm.parse(sparse.name) == sparse and sparse.metadata_steps == 4
    register_a = intrinsics.WgmmaGemm("tw_gemm_wgmma_rs", 8, 64, 8, "TW_WGMMA_BF16", False,
                                      (8, 128))
    assert intrinsics.WgmmaGemm.parse(register_a.name) == register_a
    assert intrinsics.named(register_a.name).role == "wgmma"
    assert intrinsics.WgmmaGemm.parse("tw_wgmma_wait<1>") is None
    assert intrinsics.WgmmaGemm.parse("tw_gemm_wgmma") is None
    held = intrinsics.hold_sparse_metadata(
        tirx.call_extern("void", sparse.name, *[ZERO] * 5),
        *(tirx.decl_buffer((4,), "uint32", n, scope="local") for n in ("even", "odd")), ZERO)
    assert intrinsics.WgmmaGemm.parse(intrinsics.extern_name(held)) == \
        dataclasses.replace(sparse, form="tw_gemm_wgmma_sp_kept")


def test_a_wait_says_what_it_leaves_in_flight():
    assert intrinsics.groups_left(intrinsics.wgmma_wait(1)) == 1
    assert intrinsics.groups_left(intrinsics.cp_async_wait(0)) == 0
    assert intrinsics.waits_all(intrinsics.wgmma_wait(0), "wgmma_wait")
    assert not intrinsics.waits_all(intrinsics.cp_async_wait(0), "wgmma_wait")
    assert not intrinsics.waits_all(intrinsics.wgmma_wait(2))
    assert intrinsics.groups_left(intrinsics.cp_async_commit()) is None  # not a wait
