"""The mainline dialect (``tilewright_ascend.language.mainline``) on the ``ascend-950`` target:
the seed's versioned vector add and GEMMs through L1 and L0 (``examples/mainline_kernels.py``)
run on the emulator against torch;
buffer-version annotations, manual flags, the 950's memories; the errors for mixing the two
trees, compiling a tree for the other's target and the adapter tree's pass configs."""

import re

import pytest
import tilewright
import tilewright_ascend.language as A
import tilewright_ascend.language.mainline as T
import torch
from mainline_kernels import gemm, rmsnorm, rmsnorm_reference, softmax, vector_add
from tilewright.errors import ConfigError, KernelError
from tilewright_ascend.executor import last_run_stats
from tilewright_ascend.facts.arch import ARCHS

TARGET = "ascend-950"


def _tiles(text: str) -> dict:
    return {m[1]: int(m[2]) for m in re.finditer(r"LocalTensor<\w+> (\w+) = \w+\.GetWithOffset"
                                                  r"<\w+>\((\d+),", text)}


@pytest.mark.parametrize("body", ["simt", "simd"])
def test_vector_functions_run_on_the_950_emulator(body):
    N = 8 * 1024
    kernel = tilewright.compile(vector_add(N, body=body), out_idx=[2], target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(vector_add(N, body=body), target=TARGET).source.text
    # SIMT: one Add over the tile; SIMD: one Add per 2048-bit register (64 float32 lanes)
    add = "Add(c[((step % 2) * 1024)], a[((step % 2) * 1024)], b[((step % 2) * 1024)], 1024);" \
        if body == "simt" else "+ (g * 64))], 64);"
    assert add in text


def test_simd_softmax_and_rmsnorm_run_on_the_950_emulator():
    x = torch.randn(8, 256)
    torch.testing.assert_close(tilewright.compile(softmax(8, 256), out_idx=[1],
                                                  target=TARGET)(x), torch.softmax(x, -1))
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(softmax(8, 256), target=TARGET).source.text
    # vcmax/vcadd across the lanes, vexp, the broadcast maximum and sum read once each
    assert "WholeReduceMax(" in text and "WholeReduceSum(" in text and "Exp(" in text
    x, w = torch.randn(4, 256).half(), torch.randn(256).half()
    torch.testing.assert_close(tilewright.compile(rmsnorm(4, 256), out_idx=[2],
                                                  target=TARGET)(x, w),
                               rmsnorm_reference(x, w), rtol=1e-3, atol=1e-3)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(rmsnorm(4, 256), target=TARGET).source.text
    # unpacked loads widened, packed stores narrowed: whole vector instructions, no lane loop
    assert "RoundMode::CAST_NONE, 64);" in text and "RoundMode::CAST_RINT, 64);" in text
    assert "Sqrt(" in text and "GetValue" in text and "SetValue" not in text


def test_simd_lane_semantics():
    """vcadd/vcmax leave the result in lane 0 and zero the rest; vcvt widens the even or odd
    lanes of a float16 register (asc_half2float, asc_half2float_v2)."""
    @T.prim_func
    def main(X: T.Tensor((128,), "float16"), R: T.Tensor((128,), "float32"),
             E: T.Tensor((64,), "float32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((128,), "float16")
            r = T.alloc_shared((128,), "float32")
            e = T.alloc_shared((64,), "float32")
            o = T.alloc_shared((64,), "float32")
            T.copy(X[0:128], x)
            with T.SimdVF():
                m16, m32 = T.simd.pset(16), T.simd.pset(32)
                even = T.simd.vcvt(T.simd.vld(x[0]), "float32", m16)
                odd = T.simd.vcvt(T.simd.vld(x[0]), "float32", m16, part="odd")
                T.simd.vsts(e[0], even, m32)
                T.simd.vsts(o[0], odd, m32)
                T.simd.vsts(r[0], T.simd.vcadd(even, m32), m32)
                T.simd.vsts(r[64], T.simd.vcmax(odd, m32), m32)
            T.copy(r, R[0:128])
            T.copy(e, E[0:64])
            T.copy(o, O[0:64])

    x = torch.randn(128).half()
    r, e, o = tilewright.compile(main, out_idx=[1, 2, 3], target=TARGET)(x)
    assert last_run_stats()["races"] == 0
    torch.testing.assert_close(e, x[0::2].float())
    torch.testing.assert_close(o, x[1::2].float())
    torch.testing.assert_close(r[0], x[0::2].float().sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r[64], x[1::2].float().max())
    assert not r[1:64].any() and not r[65:].any()


def _simd(build):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), H: T.Tensor((128,), "float16")):
        with T.Kernel(1):
            a = T.alloc_shared((128,), "float32")
            h = T.alloc_shared((128,), "float16")
            T.copy(A[0:128], a)
            T.copy(H[0:128], h)
            build(a, h)
            T.copy(a, A[0:128])


def test_simd_rules():
    def outside(a, h):
        T.simd.pset(32)

    with pytest.raises(KernelError, match=r"T.simd.pset is a register instruction: use it "
                                          r"inside 'with T.SimdVF\(\):'"):
        _simd(outside)

    def wrong_mask(a, h):
        with T.SimdVF(latency=20):
            T.simd.vsts(h[0], T.simd.vld(h[0]), T.simd.pset(32))

    with pytest.raises(KernelError, match=r"the mask is for 32-bit lanes but the register holds "
                                          r"float16 .*T.simd.pset\(16\)"):
        _simd(wrong_mask)

    def past_end(a, h):
        with T.SimdVF():
            T.simd.vld(a[96])

    with pytest.raises(KernelError, match="64 lanes from element 96 run past the last "
                                          "dimension of 'a' \\(128\\)"):
        _simd(past_end)
    def convert(a, h):
        with T.SimdVF():
            T.simd.vcvt(T.simd.vld(a[0]), "int32", T.simd.pset(32))

    with pytest.raises(KernelError, match="converts float16 or bfloat16 to float32 and back, "
                                          "not float32 to int32"):
        _simd(convert)

    def unpack(a, h):
        with T.SimdVF():
            T.simd.vld(a[0], dist="unpack")

    with pytest.raises(KernelError, match=r"dist='unpack'\) loads 16-bit elements, not float32"):
        _simd(unpack)

    def pack(a, h):
        with T.SimdVF():
            T.simd.vsts(h[0], T.simd.vld(h[0]), T.simd.pset(16), dist="pack")

    with pytest.raises(KernelError, match=r"selects 32-bit slots: give it T.simd.pset\(32\)"):
        _simd(pack)

    def integer_exp(a, h):
        with T.SimdVF():
            T.simd.vexp(T.simd.vld(a[0]), T.simd.pset(32))

    # the error is at the user's line, not in the dialect's module
    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.simd.vexp: T.exp "):
        _simd(lambda a, h: integer_exp(T.alloc_shared((64,), "int32"), h))
    with pytest.raises(AttributeError, match="T.simd.vgather is not supported"):
        T.simd.vgather  # noqa: B018


def test_simt_rules():
    def threads(a, h):
        with T.SimtVF(threads=4096):
            pass

    with pytest.raises(KernelError, match="threads= is 1 to 2048, got 4096"):
        _simd(threads)

    def binding(a, h):
        with T.SimtVF(threads=64):
            T.get_thread_binding()

    with pytest.raises(KernelError, match="lowers the T.Parallel nests of T.SimtVF to vector "
                                          "instructions, which have no thread index"):
        _simd(binding)


def test_dual_copy_rules():
    def copy(src_shape, dst_shape):
        @T.prim_func
        def main(X: T.Tensor((64, 64), "float32")):
            with T.Kernel(1):
                c = T.alloc_l0c(src_shape, "float32")
                u = T.alloc_shared(dst_shape, "float32")
                T.dual_copy(c, u)

    with pytest.raises(KernelError, match=r"T.dual_copy must be used inside a mixed kernel"):
        copy((64, 32), (32, 32))  # M-split, but not in T.MixedKernel
    with pytest.raises(KernelError, match=r"extent 33 of \[33, 32\] is odd"):
        copy((33, 32), (16, 32))
    with pytest.raises(KernelError, match=r"exactly one trailing dimension .* got \[64, 32\] "
                                          r"-> \[64, 32\]"):
        copy((64, 32), (64, 32))
    with pytest.raises(KernelError, match="T.MixedKernel is not supported by backend 'ascend' "
                                          "yet"):
        @T.prim_func
        def mixed(X: T.Tensor((64, 64), "float32")):
            with T.MixedKernel(1, sids=2):
                pass


def test_versioned_vector_add_runs_on_the_950_emulator():
    N = 16 * 1024
    kernel = tilewright.compile(vector_add(N), out_idx=[2], target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)
    stats = last_run_stats()
    assert stats["races"] == 0
    assert stats["mte2_overlap"] >= 0.8, stats  # the next loads run under the current add
    text = tilewright.lower(vector_add(N), target=TARGET).source.text
    assert "(SoC 950PR, dav-3510)" in text and "pipe.InitBuffer(ub_mem, 253952);" in text
    assert _tiles(text) == {"a": 2048, "b": 2048, "c": 2048}  # 2 versions of 1024


@pytest.mark.parametrize(("spec", "stages", "elements"), [
    ((3, "iteration"), 2, 3072), ("auto", 3, 3072), (1, 2, 1024), ((4, "auto"), 1, 4096)])
def test_annotated_versions_override_the_stages(spec, stages, elements):
    text = tilewright.lower(vector_add(8 * 1024, stages=stages, versions=spec),
                            target=TARGET).source.text
    assert set(_tiles(text).values()) == {elements}


def test_three_versions_run_clean():
    N = 12 * 1024
    kernel = tilewright.compile(vector_add(N, stages=2, versions=(3, "iteration")), out_idx=[2],
                                target=TARGET)
    a, b = torch.randn(N), torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b)


def test_version_annotation_errors():
    with pytest.raises(KernelError, match="mode 'counter' for 'a' is not implemented"):
        tilewright.lower(vector_add(8 * 1024, versions=(2, "counter")), target=TARGET)
    with pytest.raises(KernelError, match=r"mainline_kernels.py:\d+: T.annotate_buffer_"
                                          r"versions: the mode of 'a' is one of auto, "
                                          r"iteration, counter, got 'ring'"):
        vector_add(8 * 1024, versions=(2, "ring"))
    with pytest.raises(KernelError, match="number of versions of 'a' must be a positive int"):
        vector_add(8 * 1024, versions=0)


def test_accumulator_cannot_be_versioned():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_shared((64,), "float32")
            x = T.alloc_shared((64,), "float32")
            T.annotate_buffer_versions({acc: 2})
            for i in T.Parallel(64):
                acc[i] = 0.0
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k, 0:64], x)
                for i in T.Parallel(64):
                    acc[i] = acc[i] + x[i]
            T.copy(acc, C[bx * 64 : bx * 64 + 64])

    with pytest.raises(KernelError, match="gives 'acc' 2 versions, but it cannot be versioned "
                                          "in this T.Pipelined loop: it is used outside"):
        tilewright.lower(main, target=TARGET)


def test_hand_written_stage_dimension_warns():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), C: T.Tensor((4, 64), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((2, 64), "float32")
            T.annotate_buffer_versions({x: 2})
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k + bx, 0:64], x[k % 2, 0:64])
                T.copy(x[k % 2, 0:64], C[k, 0:64])

    with pytest.warns(UserWarning, match="stage dimension of its own .* multi-buffers it twice"):
        tilewright.lower(main, target=TARGET)


@pytest.mark.parametrize("l0", [False, True], ids=["l1", "l0"])
def test_gemm_through_l1_and_l0(l0):
    kernel = tilewright.compile(gemm(128, 128, 256, 64, 64, 64, l0=l0), out_idx=[2],
                                target=TARGET)
    x, y = torch.randn(128, 256).half(), torch.randn(256, 128).half()
    torch.testing.assert_close(kernel(x, y), x.float() @ y.float(), rtol=1e-2, atol=5e-2)
    assert last_run_stats()["races"] == 0
    text = tilewright.lower(gemm(128, 128, 256, 64, 64, 64, l0=l0), target=TARGET).source.text
    assert ("Mmad(c, a0[" in text) == l0


def test_manual_flags_keep_their_own_synchronisation():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64 : bx * 64 + 64], x)
            T.ascend_set_flag("MTE2_MTE3", 0)
            T.ascend_wait_flag("MTE2_MTE3", 0)
            T.copy(x, C[bx * 64 : bx * 64 + 64])
            T.ascend_pipe_barrier("PIPE_ALL")

    text = tilewright.lower(main, target=TARGET).source.text
    assert text.count("SetFlag<") == 1 and "WaitFlag<HardEvent::MTE2_MTE3>(0);" in text
    assert "PipeBarrier<PIPE_ALL>();" in text
    a = torch.randn(64)
    torch.testing.assert_close(tilewright.compile(main, out_idx=[1], target=TARGET)(a), a)


def test_manual_flag_names_checked():
    def bad(event):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1):
                T.ascend_set_flag(event, 0)

    with pytest.raises(KernelError, match="unknown pipe 'VEC' in 'MTE2_VEC'"):
        bad("MTE2_VEC")
    with pytest.raises(KernelError, match="takes a HardEvent name 'SRC_DST'"):
        bad("MTE2")


def _ub_tile(T_, alloc):
    @T_.prim_func
    def main(A: T_.Tensor((2 * 56 * 1024,), "float32"), C: T_.Tensor((2 * 56 * 1024,),
                                                                      "float32")):
        with T_.Kernel(2) as bx:
            x = alloc((56 * 1024,), "float32")  # 224 KiB: more than A2's UB, less than 950's
            T_.copy(A[bx * 56 * 1024 : (bx + 1) * 56 * 1024], x)
            T_.copy(x, C[bx * 56 * 1024 : (bx + 1) * 56 * 1024])

    return main


def test_950_memories_are_its_own():
    a = torch.randn(2 * 56 * 1024)
    kernel = tilewright.compile(_ub_tile(T, T.alloc_shared), out_idx=[1], target=TARGET)
    torch.testing.assert_close(kernel(a), a)
    import tilewright.language as P

    with pytest.raises(KernelError, match="needs 229376 bytes of UB at offset 0, but UB holds "
                                          "196608 bytes"):
        tilewright.lower(_ub_tile(P, P.alloc_shared), target="ascend")


def test_950_facts_follow_the_vendor_headers(asc_devkit):
    text = (asc_devkit / "include" / "utils" / "base" / "sys_constants.h").read_text()
    block = text[text.index("(__NPU_ARCH__ == 3510)"):]
    block = block[:block.index("#el")]
    sizes = {m[1]: eval(m[2].split("+ __")[0]) for m in  # noqa: S307 - the header's products
             re.finditer(r"ASC_(\w+)_SIZE = ([^;]+);", block)}
    memories = {m.short: m.capacity for m in ARCHS[TARGET].memories.values()}
    assert {k: sizes[k] for k in ("UB", "L1", "L0A", "L0B", "L0C")} == memories
    constants = (asc_devkit / "impl" / "basic_api" / "utils" /
                 "kernel_utils_constants.h").read_text()
    arch = constants[constants.index("#elif (__NPU_ARCH__ == 3510)"):]
    width = int(re.search(r"VECTOR_REG_WIDTH = (\d+);", arch)[1])
    assert width * 8 == ARCHS[TARGET].vector_bits
    aiv = re.search(r"__NPU_ARCH__ == 3510\).*?\n\s*const uint16_t AIV_CORE_NUM = (\d+);",
                    constants, re.S)
    assert all(s.aiv == int(aiv[1]) for s in ARCHS[TARGET].socs.values())


# -- the two trees ---------------------------------------------------------------------------
def test_adapter_names_in_the_mainline_module_say_which_tree():
    with pytest.raises(AttributeError, match=r"T\.alloc_L1 belongs to the tilelang-ascend "
                                             r"adapter tree .*use T\.alloc_l1"):
        T.alloc_L1  # noqa: B018
    with pytest.raises(AttributeError, match=r"T\.alloc_l0c belongs to TileLang mainline.*"
                                             r"use T\.alloc_L0C"):
        A.alloc_l0c  # noqa: B018


def test_mixing_trees_in_one_kernel_names_both():
    def mainline_then_adapter():
        @T.prim_func
        def main(X: T.Tensor((64,), "float32")):
            with T.Kernel(1):
                T.alloc_shared((64,), "float32")
                A.alloc_L1((16, 16), "float16")

    with pytest.raises(KernelError, match=r"test_ascend_mainline.py:\d+: T.alloc_L1 is a name of "
                                          r"the tilelang-ascend adapter tree for A2/A3 "
                                          r"\(tilewright_ascend.language, target 'ascend'\), but "
                                          r"this kernel is written in TileLang mainline's .*"
                                          r"target 'ascend-950'.*instead of T.alloc_L1, "
                                          r"use T.alloc_l1"):
        mainline_then_adapter()

    def adapter_then_mainline():
        @A.prim_func
        def main(X: A.Tensor((64,), "float32")):
            with A.Kernel(1, is_npu=True) as (cid, vid):
                T.alloc_l1((16, 16), "float16")

    with pytest.raises(KernelError, match=r"T.alloc_l1 is a name of TileLang mainline's Ascend "
                                          r"dialect .* instead of T.alloc_l1, use T.alloc_L1"):
        adapter_then_mainline()


def test_a_tree_compiles_for_its_own_target_only():
    with pytest.raises(KernelError, match=r"written in TileLang mainline's Ascend dialect .*"
                                          r"target 'ascend' \(Ascend A2/A3, dav-2201\) compiles "
                                          r"kernels of the tilelang-ascend adapter tree .* "
                                          r"compile it for target 'ascend-950'"):
        tilewright.lower(vector_add(8 * 1024), target="ascend")

    @A.prim_func
    def adapter(X: A.Tensor((64,), "float32")):
        with A.Kernel(1, is_npu=True) as (cid, vid):
            x = A.alloc_ub((64,), "float32")
            with A.Scope("V"):
                A.copy(X[0:64], x)

    with pytest.raises(KernelError, match=r"written in the tilelang-ascend adapter tree .* "
                                          r"compile it for target 'ascend'"):
        tilewright.lower(adapter, target=TARGET)


def test_adapter_pass_configs_with_the_mainline_dialect_explain():
    with pytest.raises(ConfigError, match=r"pass configs 'ascend.auto_sync' "
                                          r"\(TL_ASCEND_AUTO_SYNC\), 'ascend.exception_dump' "
                                          r"\(TL_ASCEND_EXCEPTION_DUMP\) exist only in the "
                                          r"tilelang-ascend adapter tree .* always synchronises"):
        tilewright.lower(vector_add(8 * 1024), target=TARGET,
                         pass_configs={"tl.ascend_auto_sync": True,
                                       "tl.ascend_exception_dump": False})


def test_kernel_is_one_dimensional_with_compiler_cores():
    with pytest.raises(KernelError, match=r"is_npu=True\) as \(cid, vid\) is the adapter "
                                          r"tree's kernel"):
        @T.prim_func
        def main(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, is_npu=True):
                pass
