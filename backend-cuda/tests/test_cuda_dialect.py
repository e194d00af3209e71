"""The CUDA dialect (``tilewright_cuda.language``): TMA with compiler-built descriptors,
mbarriers, warp-specialised roles, register budgets and clusters. Kernels compile to sm_90a
cubins whose machine code has the Hopper instructions and are refused with the op's name on
other backends and on older architectures (test_cuda_dialect_emulate.py runs them)."""

import json
import re

import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch
from dialect_cases import (
    WIDEN_SOURCE,
    carried_group_gemm,
    cluster_scale,
    extern_call,
    hand_wgmma,
    head_copy,
    pipelined_gemm,
    thread_allreduce,
    thread_index,
    tma_gemm,
    tma_gemm_swizzled,
    warp_shuffle,
    ws_gemm,
    ws_store,
)
from tilewright.errors import KernelError
from tilewright.runtime.cuda import tensor_map_layout
from tilewright_cuda import arch, executor


def _lower(func, target="cuda -arch=sm_90a"):
    lowered = tilewright.lower(func, target)
    return lowered.source.text, lowered.source.payload


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _maps(launch) -> list:
    return [p for p in launch["params"] if p["kind"] == "tensormap"]


# -- descriptors, roles, clusters in the generated code --------------------------------------
def test_descriptors_are_deduplicated_and_passed_with_the_launch():
    text, launch = _lower(tma_gemm())
    maps = _maps(launch)
    # A and B: one descriptor each, shared by every stage and iteration; the stages the gemm
    # reads ([s, :, :]) are swizzled, so B's 128 columns are two boxes of one 128-byte block
    assert [(m["tensor"], m["box"], m["swizzle"]) for m in maps] == \
        [("A", [64, 128], 128), ("B", [64, 64], 128)]
    assert [m["param"] for m in maps] == [0, 1]
    kernel = _kernel(text)
    assert kernel.count("const __grid_constant__ tw_tensormap tw_tmap_1") == 2  # proto + def
    assert kernel.count("tw_tma_load_2d(") == 3 and "TW_TMAP(0)" in kernel
    # the load raises the expected bytes of the stage's full barrier, from one thread
    assert "tw_mbar_expect_tx(" in kernel and "(uint)16384" in kernel
    assert "if (((int)threadIdx.x) == 0)" in kernel
    json.dumps(launch)  # the launch description (launch.json, bundles) stays plain JSON


def test_descriptors_of_higher_rank_and_symbolic_tensors():
    text, launch = _lower(head_copy())
    # K[bz, by, s:s+32, :]: rank 4, box innermost first; the sequence length is read at launch
    assert [(m["tensor"], m["rank"], m["box"]) for m in _maps(launch)] == \
        [("K", 4, [64, 32, 1, 1]), ("O", 4, [64, 32, 1, 1])]
    assert "tw_tma_load_4d(" in text and "tw_tma_store_4d(" in text
    assert launch["grid"][0] == "(((S + 32) - 1) // 32)"


def test_swizzled_tiles_take_column_block_boxes():
    _, launch = _lower(tma_gemm_swizzled())
    # A_s [128, 64] fp16: one 128-byte block; B_s [64, 128]: two blocks through one descriptor
    assert [(m["tensor"], m["box"], m["swizzle"]) for m in _maps(launch)] == \
        [("A", [64, 128], 128), ("B", [64, 64], 128)]


def test_warp_specialised_roles_become_thread_range_branches():
    text, launch = _lower(ws_gemm())
    kernel = _kernel(text)
    assert "if (128 <= ((int)threadIdx.x))" in kernel and "if (((int)threadIdx.x) < 128)" in kernel
    assert "tw_setmaxnreg_dec<40>()" in kernel and "tw_setmaxnreg_inc<232>()" in kernel
    assert "__launch_bounds__(256, 1)" in kernel  # setmaxnreg needs a known entry budget
    # the loader role's first thread issues the TMA
    assert "if (((int)threadIdx.x) == 128)" in kernel
    loop = kernel.split("for (int ko = 0;", 1)[1].split("\n  }\n", 1)[0]
    assert "__syncthreads()" not in loop  # roles hand over through mbarriers only
    assert launch["block"] == [256, 1, 1]


def test_barriers_inside_a_role_are_named_barriers_of_its_threads():
    kernel = _kernel(_lower(ws_store())[0])
    role0 = kernel.split("if (((int)threadIdx.x) < 128) {", 1)[1]
    assert role0.count("tw_named_barrier_sync(1, 128)") == 2  # before the store, after wait
    assert "__syncthreads()" not in role0
    assert "tw_fence_proxy_async();" in role0 and "tw_tma_store_wait<0>();" in role0


def test_cluster_kernel_declares_cluster_dims():
    text, launch = _lower(cluster_scale())
    assert "__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)" in text
    assert launch["cluster_dims"] == [2, 1, 1]


@pytest.mark.nvrtc
def test_bundles_carry_what_the_launcher_needs(tmp_path):
    from tilewright.jit import compile as tw_compile

    kernel = tw_compile(cluster_scale(), target="cuda -arch=sm_90a")
    launch = json.loads((kernel.export(tmp_path / "b") / "launch.json").read_text())
    assert launch["cluster_dims"] == [2, 1, 1]
    assert [(m["param"], m["dtype"], m["box"], m["swizzle"]) for m in _maps(launch)] == \
        [(0, "float16", [64, 64], 0), (1, "float16", [64, 64], 0)]


def test_thread_binding_is_the_block_thread_index_split_by_dimension():
    text = _lower(thread_index())[0]
    assert "thread_x_0_ptr[0] = (((int)threadIdx.x) & 31);" in text
    assert "thread_y_1_ptr[0] = (((int)threadIdx.x) >> 5);" in text


def test_tile_ops_under_a_thread_index_condition_are_refused_at_the_if():
    @T.prim_func
    def parallel_in_branch(A: T.Tensor((96,), "float32")):
        with T.Kernel(1, threads=96):
            if T.get_thread_binding() < 40:  # part of a warp (whole warps are a role)
                for i in T.Parallel(40):
                    A[i] = 1.0

    with pytest.raises(KernelError, match=r"a T\.Parallel loop under a condition on the thread "
                                          r"index .* T\.ws role") as info:
        tilewright.lower(parallel_in_branch, "cuda -arch=sm_80")
    assert "test_cuda_dialect.py" in str(info.value)  # at the user's 'if'

    @T.prim_func
    def fill_through_a_value(A: T.Tensor((96,), "float32")):
        with T.Kernel(1, threads=96):
            tx = T.get_thread_binding()
            lane = tx % 32
            if lane == 0:
                T.fill(A, 0.0)

    with pytest.raises(KernelError, match=r"T\.fill under a condition on the thread index"):
        tilewright.lower(fill_through_a_value, "cuda -arch=sm_80")


def test_warpgroup_ranges_of_the_thread_index_become_roles():
    @T.prim_func
    def main(A: T.Tensor((3, 256), "float32")):
        with T.Kernel(1, threads=384):
            tx = T.get_thread_binding()
            if tx < 128:
                T.fill(A[0, :], 1.0)
            elif tx >= 128 and tx < 256:
                for i in T.Parallel(256):
                    A[1, i] = 2.0
            else:
                T.fill(A[2, :], 3.0)

    kernel = _kernel(_lower(main)[0])
    # each branch is a role: its tile op spread over its 128 threads, 2 elements each
    assert "if (((int)threadIdx.x) < 128)" in kernel
    assert "if ((128 <= ((int)threadIdx.x)) && (((int)threadIdx.x) < 256))" in kernel
    assert "if (256 <= ((int)threadIdx.x))" in kernel
    # role 2 (threads 256..383) fills row 2 (offset 512): element it * 128 + (tx - 256)
    last = kernel.split("if (256 <= ((int)threadIdx.x)) {", 1)[1]
    assert "A_ptr[(((it_2 * 128) + ((int)threadIdx.x)) + 256)] = 0x1.8p+1f" in last


def test_tilelang_barrier_names_lower_as_the_mbarrier_ops():
    assert _kernel(_lower(ws_store(tilelang_names=True))[0]) == _kernel(_lower(ws_store())[0])


def test_no_set_max_nreg_keeps_the_producer_warpgroup_without_register_moves():
    def body(text):  # the kernel's definition (the header defines tw_setmaxnreg_*)
        return text[text.rindex('extern "C" __global__'):]

    text, launch = _lower(pipelined_gemm(keep_registers=False))
    assert "tw_setmaxnreg_dec<40>();" in body(text) and launch["block"] == [384, 1, 1]
    text, launch = _lower(pipelined_gemm())
    assert "tw_setmaxnreg" not in body(text) and "tw_tma_load_2d(" in body(text)
    assert launch["block"] == [384, 1, 1]  # the producer warpgroup is still there
    with pytest.raises(KernelError, match=r"T\.no_set_max_nreg is an op of the 'cuda' dialect"):
        tilewright.lower(pipelined_gemm(), "cpu")

    @T.prim_func
    def tilelang_name(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            T.disable_warp_group_reg_alloc()
            T.fill(A, 1.0)

    assert "tw_setmaxnreg" not in body(_lower(tilelang_name)[0])


@pytest.mark.nvrtc
@pytest.mark.sass
def test_thread_binding_and_barrier_names_build_with_nvrtc():
    code, _, log = _sass(thread_index())
    assert "S2R" in code and "SR_TID.X" in code
    code, _, _ = _sass(ws_store(tilelang_names=True))
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in code and "UTMASTG" in code
    code, _, log = _sass(pipelined_gemm())
    assert "USETMAXREG" not in code and "UTMALDG" in code and "ignored" not in log


def test_imported_source_is_placed_once_before_the_kernels():
    text, launch = _lower(extern_call())
    # a macro that imports it, used in two kernels: one copy, before the first kernel
    assert text.count(WIDEN_SOURCE.strip()) == 1
    assert text.index("tw_test_widen(") < text.index('extern "C" __global__')
    kernels = _kernel(text)
    # TVM's order (a local array's pointers) and the dtype= order (a global element's)
    assert "  tw_test_widen((&(src_ptr[0])), (&(dst_ptr[0])), 4, 1);" in kernels
    assert "(&(P_ptr[" in kernels and "), 4, 2);" in kernels
    assert "tw.cuda.import_source" not in json.dumps(launch)


def test_a_kernels_prelude_is_imported_source():
    @T.prim_func
    def main(A: T.Tensor((128,), "int8"), O: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128, prelude=WIDEN_SOURCE):  # TileLang's T.import_source
            tx = T.get_thread_binding()
            T.call_extern("handle", "tw_test_widen", T.access_ptr(A[tx], "r", 1),
                          T.access_ptr(O[tx], "w", 1), 1, 3)

    text, _ = _lower(main, "cuda -arch=sm_80")
    assert text.count(WIDEN_SOURCE.strip()) == 1
    assert text.index("tw_test_widen(") < text.index('extern "C" __global__')


def test_the_same_source_and_call_work_on_older_architectures():
    text, _ = _lower(extern_call(), "cuda -arch=sm_80")
    assert text.count("__device__ void tw_test_widen(") == 1


def test_a_pointer_into_a_shared_tile_follows_the_tile_and_its_writers():
    @T.prim_func
    def main(A: T.Tensor((512,), "int8"), O: T.Tensor((512,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((512,), "int8")
            T.copy(A, S)
            T.import_source(WIDEN_SOURCE)
            tx = T.get_thread_binding()
            T.call_extern("handle", "tw_test_widen", T.access_ptr(S[tx * 4], "r", 4),
                          T.access_ptr(O[tx * 4], "w", 4), 4, 3)

    kernel = _kernel(_lower(main)[0])
    # the tile's place in the shared pool, after the barrier that orders the copy into it
    call = kernel.index("tw_test_widen((&(((signed char*)tw_smem_ptr)[")
    assert kernel.rindex("__syncthreads();", 0, call) > kernel.index("tw_cp_async_wait<0>();")


@pytest.mark.nvrtc
def test_imported_source_builds_with_nvrtc():
    text, _ = _lower(extern_call())
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    assert cubin


@pytest.mark.nvrtc
def test_thread_allreduce_is_xor_shuffles_within_the_group_and_builds():
    text, _ = _lower(thread_allreduce())
    kernel = _kernel(text)
    # 8 threads along x: offsets 4, 2, 1 for the sum and the max
    assert kernel.count("__shfl_xor_sync(") == 6 and ", 4, 32)" in kernel and ", 1, 32)" in kernel
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_80"), ".")
    assert cubin


@pytest.mark.parametrize("threads, axis, offsets", [
    ((64, 2), "x", [16, 8, 4, 2, 1]),
    ((8, 16), "y", [16, 8]),
])
def test_thread_allreduce_beyond_a_warp_combines_the_warps_in_shared_memory(threads, axis,
                                                                             offsets):
    """A group of more than a warp shuffles within each warp, then combines the warps'
    totals through shared slots after the block's barrier (test_cuda_thread_allreduce.py runs
    them)."""
    @T.prim_func
    def main(A: T.Tensor((threads[1], threads[0]), "float32"),
             S: T.Tensor((threads[1], threads[0]), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_local((1,), "float32")
            out = T.alloc_local((1,), "float32")
            x = T.thread_binding(0, threads[0], thread="threadIdx.x")
            y = T.thread_binding(0, threads[1], thread="threadIdx.y")
            acc[0] = A[y, x]
            with T.attr(T.comm_reducer(lambda a, b: a + b, [0.0]), "reduce_scope", 0):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0],
                                                  x if axis == "x" else y))
            S[y, x] = out[0]

    kernel = _kernel(_lower(main)[0])
    assert [int(o) for o in re.findall(r"__shfl_xor_sync\([^;]*, (\d+), 32\)", kernel)] == \
        offsets
    assert kernel.count("__syncthreads();") == 1


# -- machine code ----------------------------------------------------------------------------
def _sass(func) -> tuple[str, bytes, str]:
    text, _ = _lower(func)
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    return sass.dump(cubin), cubin, log


@pytest.mark.nvrtc
@pytest.mark.sass
def test_tma_pipeline_sass_has_tma_loads_and_mbarriers():
    code, _, log = _sass(tma_gemm())
    assert code.count("UTMALDG.2D") == 3  # A, and B's two column blocks
    assert "SYNCS.ARRIVE.TRANS64" in code and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in code
    assert "SYNCS.EXCH.64" in code  # mbarrier.init
    assert "0 bytes spill stores" in log


@pytest.mark.nvrtc
@pytest.mark.sass
def test_warp_specialised_sass_has_register_handover_and_tma():
    code, _, log = _sass(ws_gemm())
    assert "USETMAXREG.DEALLOC" in code and "USETMAXREG.TRY" in code
    assert "UTMALDG" in code and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in code
    assert "ignored" not in log  # ptxas honoured setmaxnreg


@pytest.mark.nvrtc
@pytest.mark.sass
def test_cluster_and_tma_store_machine_code():
    code, cubin, _ = _sass(cluster_scale())
    assert "UTMASTG" in code and "UTMALDG" in code
    elf = sass.dump(cubin, "-elf")
    assert "EIATTR_CTA_PER_CLUSTER" in elf and "0x2 0x1 0x1" in elf
    code, _, log = _sass(ws_store())
    assert "UTMASTG" in code and "used 2 barriers" in log  # __syncthreads + role 0's


# -- hand-issued cp.async and wgmma groups ---------------------------------------------------
def test_hand_issued_wgmma_groups_stay_in_flight_until_the_users_wait():
    kernel = _kernel(_lower(hand_wgmma())[0])
    consumer = kernel.split("if (((int)threadIdx.x) < 128) {", 1)[1]
    issue = consumer.split("tw_wgmma_wait<1>();", 1)[0]
    # two groups issued back to back (no wait between them), then the user's waits
    assert issue.count("tw_gemm_wgmma<64, 32, 64, TW_WGMMA_F16, false,") == 2  # N, K, NC
    assert "tw_wgmma_wait<0>" not in issue
    assert consumer.index("tw_wgmma_wait<1>();") < consumer.index("tw_wgmma_wait<0>();") < \
        consumer.index("tw_mbar_arrive(")
    producer = kernel.split("if (128 <= ((int)threadIdx.x)) {", 1)[1].split("\n  }\n", 1)[0]
    assert producer.count("tw_cp_async_bytes<16>(") == 4
    assert "tw_cp_async_mbar_arrive_noinc(" in producer
    assert "tw_cp_async_commit" not in kernel and "tw_cp_async_wait" not in kernel


@pytest.mark.nvrtc
@pytest.mark.sass
def test_hand_issued_wgmma_and_cp_async_machine_code():
    code, _, log = _sass(hand_wgmma())
    # 4 K steps (the loop unrolled) x 2 groups x 2 k16 instructions
    assert code.count("HGMMA.64x64x16.F32") == 16
    assert "LDGSTS.E.BYPASS.128" in code  # cp.async.cg of 16 bytes
    assert "ARRIVES.LDGSTSBAR.64" in code  # cp.async.mbarrier.arrive.noinc
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in code and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in code
    assert "0 bytes spill stores" in log


def test_reading_the_accumulator_of_a_group_in_flight_is_refused_at_the_users_line():
    with pytest.raises(KernelError, match=r"touches 'C_l' while the wgmma group of "
                                          r"T\.wgmma_gemm \(line \d+\) that holds it is in "
                                          r"flight: retire the group first with "
                                          r"T\.wait_wgmma\(0\)") as info:
        tilewright.lower(hand_wgmma(wait_late=True), "cuda -arch=sm_90a")
    assert info.value.location is not None and \
        info.value.location.filename.endswith("dialect_cases.py")


def _one_wgmma(wait=True, clear_in_flight=False, copies=False):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            if copies:
                T.ptx_cp_async(T.access_ptr(B_s[0, 0], "w", 8), T.access_ptr(B[0, 0], "r", 8),
                               8)
            else:
                T.copy(B, B_s)
            T.clear(C_l)
            T.wgmma_gemm(A_s, B_s, C_l, transpose_B=True)
            T.wgmma_gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=clear_in_flight)
            if wait:
                T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


def test_a_wait_leaving_more_groups_than_are_in_flight_keeps_them_all():
    """T.wait_wgmma(4) with three groups in flight retires none: a read of the older one's
    accumulator is refused (the check once kept only the newest when n exceeded the groups)."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C1 = T.alloc_fragment((64, 64), "float32")
            C2 = T.alloc_fragment((64, 64), "float32")
            C3 = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(C1)
            T.clear(C2)
            T.clear(C3)
            T.wgmma_gemm(A_s, B_s, C1, transpose_B=True)
            T.wgmma_gemm(A_s, B_s, C2, transpose_B=True)
            T.wgmma_gemm(A_s, B_s, C3, transpose_B=True)
            T.wait_wgmma(4)
            T.copy(C1, C)

    with pytest.raises(KernelError, match=r"touches 'C1' while the wgmma group"):
        tilewright.lower(main, "cuda -arch=sm_90a")


def _wait_only():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.wait_wgmma(0)
            for i in T.Parallel(128):
                A[i] = 1.0

    return main


def test_wgmma_and_cp_async_are_refused_where_they_do_not_exist():
    with pytest.raises(KernelError, match=r"T\.wgmma_gemm is an op of the 'cuda' dialect.*"
                                          r"backend 'cpu' cannot lower it"):
        tilewright.lower(_one_wgmma(), "cpu")
    with pytest.raises(KernelError, match=r"T\.wgmma_gemm \(a gemm left in flight, "
                                          r"wg_wait=-1\) is one asynchronous wgmma group, but "
                                          r"wgmma needs sm_90a"):
        tilewright.lower(_one_wgmma(), "cuda -arch=sm_80")
    for target in ("cuda -arch=sm_90", "cuda -arch=sm_100a"):
        with pytest.raises(KernelError, match=r"T\.wait_wgmma needs sm_90a"):
            tilewright.lower(_wait_only(), target)
    with pytest.raises(KernelError, match=r"T\.ptx_cp_async is an op of the 'cuda' dialect"):
        tilewright.lower(_one_wgmma(copies=True), "cpu")


def test_hand_issued_groups_without_their_wait_are_refused():
    with pytest.raises(KernelError, match=r"T\.copy touches 'C_l' while the wgmma group"):
        tilewright.lower(_one_wgmma(wait=False), "cuda -arch=sm_90a")
    # a gemm clearing an accumulator still in flight writes it under the tensor cores
    with pytest.raises(KernelError, match=r"T\.wgmma_gemm touches 'C_l' while"):
        tilewright.lower(_one_wgmma(clear_in_flight=True), "cuda -arch=sm_90a")
    with pytest.raises(KernelError, match=r"T\.ptx_cp_async: nothing waits for this kernel's "
                                          r"copies"):
        tilewright.lower(_one_wgmma(copies=True), "cuda -arch=sm_90a")


@pytest.mark.parametrize("call, message", [
    (lambda S, G: T.ptx_cp_async(T.access_ptr(S[0, 0], "w"), T.access_ptr(G[0, 0], "r"), 3),
     r"3 elements of float16 are 6 bytes; cp\.async copies 4, 8, 16 bytes"),
    (lambda S, G: T.ptx_cp_async(T.access_ptr(G[0, 0], "w"), T.access_ptr(S[0, 0], "r"), 8),
     r"T\.ptx_cp_async destination must be in shared memory; 'G' is in global"),
    (lambda S, G: T.ptx_cp_async(S[0, 0], T.access_ptr(G[0, 0], "r"), 8),
     r"T\.ptx_cp_async destination takes a pointer from T\.access_ptr"),
    (lambda S, G: T.wait_wgmma(-1), r"T\.wait_wgmma takes the number of groups left in "
                                    r"flight, 0\.\.7"),
    (lambda S, G: T.wgmma_gemm(S, S[0:32, :], S), r"T\.wgmma_gemm shape mismatch"),
])
def test_bad_hand_issued_use_is_a_clear_error_at_the_users_line(call, message):
    with pytest.raises(KernelError, match=message) as info:
        @T.prim_func
        def main(G: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float16")
                call(S, G)

    assert info.value.location is not None and \
        info.value.location.filename.endswith("test_cuda_dialect.py")


@pytest.mark.nvrtc
@pytest.mark.sass
def test_warp_shuffle_is_shfl_sync_and_builds_on_older_architectures():
    text, _ = _lower(warp_shuffle(), "cuda -arch=sm_80")
    assert "__shfl_sync((uint)4294967295, v_ptr[0], ((thread_x_0_ptr[0] & 7) + 1), 8)" in text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_80"), ".")
    assert sass.dump(cubin).count("SHFL.IDX") == 2


def test_warp_shuffle_is_refused_by_the_cpu_backend_at_its_line():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                B[i] = T.tvm_warp_shuffle(0xFFFFFFFF, A[i], 0, 32, 32)

    with pytest.raises(KernelError, match=r"T\.tvm_warp_shuffle is not supported by backend "
                                          r"'cpu'") as info:
        tilewright.lower(main, "cpu")
    assert "test_cuda_dialect.py" in str(info.value)


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel, op", [(tma_gemm, "alloc_barrier"), (ws_gemm, "alloc_barrier"),
                                        (cluster_scale, "ClusterKernel"),
                                        (extern_call, "import_source")])
def test_other_backends_refuse_dialect_ops_by_name(kernel, op):
    with pytest.raises(KernelError, match=rf"T\.{op} is an op of the 'cuda' dialect.*backend "
                                          r"'cpu' cannot lower it"):
        tilewright.lower(kernel(), "cpu")


def test_tma_copy_alone_is_refused_by_the_cpu_backend():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float32")
            T.tma_copy(S, A[0:64, 0:64])

    with pytest.raises(KernelError, match=r"T\.tma_copy is an op of the 'cuda' dialect"):
        tilewright.lower(main, "cpu")
    with pytest.raises(KernelError, match=r"T\.tma_copy needs sm_90 or newer.*sm_80"):
        tilewright.lower(main, "cuda -arch=sm_80")


def test_older_architectures_refuse_hopper_ops():
    with pytest.raises(KernelError, match=r"T\.alloc_barrier needs sm_90 or newer .* sm_80"):
        tilewright.lower(tma_gemm(), "cuda -arch=sm_80")
    with pytest.raises(KernelError, match=r"T\.ClusterKernel needs sm_90 or newer"):
        tilewright.lower(cluster_scale(), "cuda -arch=sm_86")
    with pytest.raises(KernelError, match=r"T\.set_max_nreg needs sm_90a"):
        tilewright.lower(ws_gemm(), "cuda -arch=sm_90")


def test_call_extern_alone_is_refused_by_the_cpu_backend():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            T.call_extern("handle", "my_function", T.access_ptr(A, "w"), 4)

    with pytest.raises(KernelError, match=r"T\.call_extern is an op of the 'cuda' dialect.*"
                                          r"backend 'cpu' cannot lower it"):
        tilewright.lower(main, "cpu")


@pytest.mark.parametrize("body, message", [
    (lambda A: T.call_extern("handle", "f", A), r"argument 0 is the buffer 'A'.*T\.access_ptr"),
    (lambda A: T.call_extern("f"), r"the result's type and the function's name"),
    (lambda A: T.call_extern("handle", "not a name", 1), r"must be a C identifier"),
    (lambda A: T.call_extern("f", "x", dtype="handle"), r"argument 0 is a string"),
    (lambda A: T.access_ptr(A, "x"), r"access_mask must be one of r, w, rw"),
    (lambda A: T.access_ptr(A[0], "r", 9), r"extent 9 is outside 1\.\.4"),
    (lambda A: T.access_ptr(3, "r"), r"takes a buffer or one of its elements"),
    (lambda A: T.import_source(""), r"takes CUDA source text"),
    (lambda A: T.comm_reducer(lambda x, y: x * y, [1.0]), r"combines two values with x \+ y"),
    (lambda A: T.attr(A, "pragma", 0), r"'reduce_scope' of a T.comm_reducer"),
    (lambda A: T.evaluate(A[0]), r"T\.evaluate takes T\.tvm_thread_allreduce"),
    (lambda A: T.tvm_thread_allreduce(1, A[0], True, A[0]), r"must be inside 'with T\.attr"),
])
def test_bad_extern_use_is_a_clear_error_at_the_users_line(body, message):
    with pytest.raises(KernelError, match=message) as info:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                body(A)

    assert "test_cuda_dialect.py" in str(info.value)


def test_bad_dialect_use_is_a_clear_error():
    with pytest.raises(KernelError, match="needs barrier=mbars"):
        @T.prim_func
        def no_barrier(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float32")
                T.tma_copy(A[0:64, 0:64], S)

    with pytest.raises(KernelError, match=r"T\.ws\(2\) needs warpgroups .* threads=256"):
        @T.prim_func
        def too_few_threads(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=256):
                with T.ws(2):
                    T.fill(A, 0.0)

    with pytest.raises(KernelError, match=r"T\.get_thread_binding\(1\): the kernel has "
                                          r"threads=\(128, 1\)"):
        @T.prim_func
        def one_row_of_threads(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=128):
                A[T.get_thread_binding(1)] = 0

    with pytest.raises(KernelError, match=r"T\.get_thread_binding takes a thread dimension"):
        @T.prim_func
        def bad_dimension(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=128):
                A[T.get_thread_binding(3)] = 0

    with pytest.raises(KernelError, match=r"T\.barrier_wait needs the phase parity"):
        @T.prim_func
        def no_parity(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=128):
                bar = T.alloc_barrier(128)
                T.barrier_wait(bar[0])

    with pytest.raises(KernelError, match="grid dimension 0 \\(3\\) is not a multiple"):
        cluster_scale(N=192)

    with pytest.raises(KernelError, match="must be at the top of the kernel body"):
        @T.prim_func
        def barrier_in_loop(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128):
                for _ in T.serial(2):
                    T.alloc_barrier(128)

    with pytest.raises(KernelError, match="innermost box extent .* 12 bytes"):
        @T.prim_func
        def narrow_box(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 3), "float32")
                bar = T.alloc_barrier(128)
                T.tma_copy(A[0:64, 0:3], S, barrier=bar)

        tilewright.lower(narrow_box, "cuda -arch=sm_90a")


def test_tensor_maps_check_the_tensor_at_launch():
    p = {"tensor": "A", "rank": 2, "box": [64, 64], "dtype": "float16", "swizzle": 0}
    dims, strides = tensor_map_layout(p, torch.empty(100, 72, dtype=torch.float16))
    assert dims == [72, 100] and strides == [2, 144]
    with pytest.raises(RuntimeError, match="multiple of 16 bytes"):
        tensor_map_layout(p, torch.empty(100, 71, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="expected a 2-D tensor"):
        tensor_map_layout(p, torch.empty(4, 100, 72, dtype=torch.float16))


def test_a_pipelined_loop_that_carries_a_wgmma_group_refills_a_step_later():
    # the group in flight at the next iteration's refill reads the version refilled S - 1
    # steps ahead: the refill runs S - 2 ahead, so two stages are refused
    with pytest.raises(KernelError, match=r"leaves wgmma groups in flight into its next "
                                          r"iteration .* num_stages >= 3 \(got 2\)"):
        tilewright.lower(carried_group_gemm(2), "cuda -arch=sm_90a")

