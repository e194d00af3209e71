"""The differential fuzzer: generated programs are valid, a backend that disagrees with the
interpreter is caught, and the shrunk program is saved as a runnable reproducer."""

import dataclasses
import json
import re
import tempfile
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from tilewright.plugin import Executor, PluginManager, get_manager, hookimpl, set_manager
from tilewright_interp.plugin import BACKEND
from tilewright_sdk.conformance import known_failures
from tilewright_sdk.conformance.known_failures import avoided_features
from tilewright_sdk.fuzz.check import Mismatch, compare, differential, load, module_source
from tilewright_sdk.fuzz.program import programs


def _each_drawn_and_valid(features, drawn: list) -> None:
    """Each of ``features`` is among the ``drawn`` programs' (``_drawn``), and a program with
    each runs on the interpreter and agrees with itself."""
    first = {}
    for program in drawn:
        for feature in set(features) & program.features:
            first.setdefault(feature, program)
    assert set(first) == set(features)
    interp = get_manager().backends()["interp"]
    folder = tempfile.mkdtemp()
    for program in {id(p): p for p in first.values()}.values():
        differential(load(module_source(program, "interp", 0), folder), interp, 0,
                     execute=True)


def _never_drawn(features, strategy, examples: int, seed: int) -> None:
    assert not any(p.features & set(features) for p in _drawn(strategy, examples, seed))


def test_generated_programs_are_valid_and_bounded():
    """Every drawn program traces, runs on the interpreter and agrees with itself; its
    tolerances are finite."""
    interp = get_manager().backends()["interp"]
    folder = tempfile.mkdtemp()
    seen = set()

    @settings(max_examples=12, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(3)
    @given(programs())
    def check(program):
        module = load(module_source(program, "interp", 0), folder)
        assert all(err >= 0 and err < float("inf") for *_, err in module.OUTPUTS)
        differential(module, interp, 0, execute=True)
        seen.update(program.features)

    check()
    assert {"map", "partial_tile"} <= seen


CONTROL = ("if_else", "nested_parallel", "while_loop", "pipelined", "local_scalar",
           "shared_result", "narrow_cast", "narrow_cast_wrap", "int_float_cast",
           "float_int_cast", "reduce_acc_int8", "reduce_acc_float16", "gemm",
           "gemm_twice", "gemm_clear_accum", "gemm_transpose_A", "atomic_add",
           "atomic_add_tile", "atomic_add_element")
# a narrow accumulator is avoided by its reduce_into_DTYPE, which same-dtype ones share; the
# kinds of T.gemm and T.atomic_add by avoiding the op
# what later draws add, and the dtypes before them: avoided, the draws are those of before
# math, 16-bit float casts, atomic max/min and block-code updates (drawn after all others)
MATH_AND_BLOCK = {"exp2", "log", "rsqrt", "sin", "cos", "clamp", "round", "ceil", "trunc",
                  "half_cast", "atomic_max", "atomic_min", "block_update", "erf", "atan",
                  "asinh"}
# the bitwise reductions, T.cummax, block code branching on data and thread-level code (drawn
# since 2026-12-05)
BITS_AND_SCANS = {"reduce_bitand", "reduce_bitor", "reduce_bitxor", "cummax", "block_branch",
                  "thread_code"}
# the bitwise atomics, memory orders, previous values, atomic loads and stores and vector
# values (drawn since 2026-12-12)
ATOMICS_AND_VECTORS = {"atomic_or", "atomic_and", "atomic_xor", "atomic_memory_order",
                       "atomic_prev", "atomic_load", "atomic_store", "vector"}
# integer negation, ~, T.popcount / T.clz, T.truncdiv / T.truncmod, bitwise operators and
# floor divisions of negative operands, T.fmod, and tiles 32 or 64 columns wide (drawn since
# 2026-12-06)
INT_AND_WIDE = {"int_neg", "bitwise_not", "bit_count", "truncdiv", "bitwise_negative",
                "negative_divisor", "fmod", "wide_tile"}
NEW_FEATURES = {"tensor_3d", "dynamic_shape", "sign_cast", "float8_cast", "unpack",
                "int4_input", "float_uint_cast", "unsigned_wrap_arith", "float8_input",
                "tile_copy", "pipelined_gemm", "rebind", "reduce_low_to_low", *BITS_AND_SCANS,
                *MATH_AND_BLOCK, *ATOMICS_AND_VECTORS, *INT_AND_WIDE}
OLD_DTYPES = {"int8", "int16", "int32", "uint8", "int64", "float32", "float16", "bfloat16"}
AVOIDABLE = {f for f in CONTROL if not f.startswith(("reduce_acc", "gemm_", "atomic_add_"))}


def test_control_and_cast_features_are_generated_and_valid():
    """The less-used constructs (if/else, nested T.Parallel, a run-time while loop,
    T.Pipelined, T.alloc_local, shared results, casts that narrow or cross between integers
    and floats, narrow accumulators, GEMMs, atomics) are all generated; a program with each
    runs on the interpreter and agrees with itself; avoided, none is generated."""
    # drawn as before them
    _each_drawn_and_valid(CONTROL, _drawn(programs(avoid=NEW_FEATURES, dtypes=OLD_DTYPES),
                                          400, 11))
    _never_drawn(AVOIDABLE, programs(avoid=AVOIDABLE), 40, 7)


def test_avoided_features_are_never_generated(monkeypatch):
    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(5)
    @given(programs(avoid={"negative_floordiv", "data_guard"}, dtypes={"int8", "int32"}))
    def check(program):
        assert not program.features & {"negative_floordiv", "data_guard"}
        assert program.dtype in ("int8", "int32")

    check()
    # a known failure's fuzz features are what the fuzzer avoids on that backend only
    row = known_failures.KnownFailure("ascend", "int_floordiv-*", "prints // as C '/'",
                                      fuzz=("negative_floordiv",))
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (*known_failures.KNOWN_FAILURES, row))
    assert "negative_floordiv" in avoided_features("ascend")
    assert "negative_floordiv" not in avoided_features("cpu")


def test_compare_names_the_output_and_bound():
    import torch

    outputs = [("Y", (2,), "float32", 0.0), ("R1", (2,), "int8", 0.0)]
    compare([torch.ones(2), torch.zeros(2, dtype=torch.int8)],
            [torch.ones(2), torch.zeros(2, dtype=torch.int8)], outputs)
    with pytest.raises(Mismatch, match=r"R1: 1 of 2 elements"):
        compare([torch.ones(2), torch.tensor([0, -1], dtype=torch.int8)],
                [torch.ones(2), torch.zeros(2, dtype=torch.int8)], outputs)


def _wrong_plugin():
    """The interpreter again, as backend 'wrong' whose kernels add 1 to the last element of
    their last argument (an output)."""
    python = BACKEND.executors[0]

    def build(source, ctx, workdir):
        fn = python.build(source, ctx, workdir)

        def run(*args):
            fn(*args)
            args[-1].view(-1)[-1] += 1

        return run

    wrong = dataclasses.replace(
        BACKEND, name="wrong", target_kinds=("wrong",),
        pipelines={"wrong": BACKEND.pipelines["interp"]},
        codegens={"wrong": BACKEND.codegens["interp"]},
        executors=(Executor("python", python.available, build),))
    module = types.ModuleType("wrong_backend")
    module.tilewright_backends = hookimpl(lambda: [wrong])
    return module


def test_a_wrong_backend_is_caught_shrunk_and_saved(pytester, tmp_path):
    """The fuzz session in this process, on a fresh plugin manager with backend 'wrong'."""
    manager = PluginManager()
    previous = set_manager(manager)
    try:
        manager.load().register(_wrong_plugin(), "wrong")
        result = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "--pyargs", "tilewright_sdk.fuzz",
            "--tilewright-backend", "wrong", "--examples", "5", "--seed", "1",
            "--tilewright-fuzz-dir", str(tmp_path / "repro"), "--tilewright-report",
            str(tmp_path / "report"))
    finally:
        set_manager(previous)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*backend 'wrong' disagrees with the interpreter on a "
                                 "generated program (shrunk); reproducer: *repro_wrong_*.py*",
                                 "*tilewright fuzz: backend wrong*", "FAILURE, reproducer *"])
    (saved,) = (tmp_path / "repro").iterdir()
    text = saved.read_text()
    assert "def fuzz(" in text and "BACKEND = 'wrong'" in text and "reproduce(" in text
    assert text.count("T.Parallel") <= 2  # shrunk: one map, perhaps a store
    data = json.loads((tmp_path / "report" / "fuzz-wrong.json").read_text())
    assert data["fuzz"]["failures"][0]["reproducer"] == str(saved)
    assert "Differential fuzzing" in (tmp_path / "report" / "index.html").read_text()


def test_a_refusal_is_not_a_crash():
    from tilewright.errors import KernelError
    from tilewright_sdk.fuzz.check import deliberate

    def raised(fn):
        try:
            fn()
        except KernelError as exc:
            return exc

    def wrapped_crash():
        try:
            raise RuntimeError("InternalError: Cannot decide infinity for type int8")
        except RuntimeError as exc:
            raise KernelError("backend 'x' failed to lower T.reduce_sum") from exc

    def refusal():
        try:
            {}["op"]
        except KeyError:
            raise KernelError("backend 'x' has no form for T.log2") from None

    assert not deliberate(raised(wrapped_crash))
    assert deliberate(raised(refusal))


def test_shrinking_keeps_to_the_kind_of_failure_found():
    """Once a wrong result is found, a build failure met while shrinking it is counted, not
    shrunk to (the reproducer must show the bug that was found)."""
    from tilewright_sdk.fuzz.stats import FuzzStats
    from tilewright_sdk.fuzz.test_fuzz import _kind

    stats = FuzzStats("x", 0, 10)
    wrong = _kind(Mismatch("output Y: 3 of 16 elements differ"))
    build = _kind(RuntimeError("the emulator build failed: /tmp/build-12/kernel.cpp:91"))
    assert build == _kind(RuntimeError("the emulator build failed: /tmp/build-7/kernel.cpp:3"))
    assert stats.found(wrong) and stats.failure_kind == "Mismatch"
    assert not stats.found(build)
    assert stats.found(_kind(Mismatch("output Z differs")))
    assert stats.other_failures == {build: 1}
    assert any("another failure seen while shrinking (1)" in line for line in stats.lines())


NEW_DRAWS = ("dtype_uint16", "dtype_uint32", "sign_cast", "unsigned_wrap", "tensor_3d",
             "tile_3d", "dynamic_shape", "dynamic_M", "dynamic_N", "float8_cast",
             "float8_tile", "cast_float8_e4m3fn", "cast_float8_e5m2", "unpack", "unpack_signed",
             "int4_input", "unsigned_wrap_arith", "float8_input", "float8_input_converted",
             "input_float8_e4m3fn", "input_float8_e5m2")


def test_new_draws_are_generated_and_valid():
    """uint16/uint32 with casts and sums, differences and products that wrap, 3-D tensors and
    tiles, sizes read from the arguments, float8 casts, fragments and inputs, 4-bit fields and
    int4 inputs are all drawn; one program with each runs on the interpreter and agrees with
    itself."""
    _each_drawn_and_valid(NEW_DRAWS, _drawn(programs(avoid=MATH_AND_BLOCK | BITS_AND_SCANS |
                                                     ATOMICS_AND_VECTORS | INT_AND_WIDE), 300, 22))


TILE_DRAWS = ("tile_copy", "tile_copy_window", "tile_copy_fragment_shared",
              "tile_copy_shared_fragment", "pipelined_gemm", "rebind", "reduce_low_to_low")


def test_tile_copies_pipelined_gemms_and_rebinds_are_generated_and_valid():
    """T.copy between fragments and shared tiles (whole, or a window at offsets), a T.gemm
    carried by a T.Pipelined loop, a Python variable rebound to a second tile and float16 /
    bfloat16 reductions into the other low-precision dtype are drawn; one program with each
    runs on the interpreter and agrees with itself; avoided, none is drawn."""
    _each_drawn_and_valid(TILE_DRAWS, _drawn(programs(avoid=MATH_AND_BLOCK | BITS_AND_SCANS |
                                                      ATOMICS_AND_VECTORS | INT_AND_WIDE), 300, 22))
    _never_drawn(TILE_DRAWS, programs(avoid={"tile_copy", "pipelined_gemm", "rebind",
                                             "reduce_low_to_low"}), 60, 22)


MATH_DRAWS = ("exp2", "log", "rsqrt", "sin", "cos", "clamp", "round", "ceil", "trunc",
              "erf", "atan", "asinh",
              "half_cast", "cast_float16", "cast_bfloat16", "atomic_max", "atomic_min",
              "atomic_max_tile", "atomic_min_element", "block_update", "block_update_shared",
              "block_update_local", "block_update_global", "block_update_loop",
              "block_update_add", "block_update_sub", "block_update_max", "block_update_min")


def test_math_atomics_and_block_code_are_generated_and_valid():
    """exp2, log, rsqrt, sin, cos, clamp, round/ceil/trunc, erf/atan/asinh, casts through
    float16 and bfloat16, atomic max/min and block-code updates of shared, per-thread and
    global scalars are drawn; one program with each runs on the interpreter and agrees with
    itself; avoided, none is drawn. (Seed 49: one whose 400 draws hold every feature, as
    seed 33's did before erf/atan/asinh.)"""
    _each_drawn_and_valid(MATH_DRAWS, _drawn(programs(avoid=BITS_AND_SCANS |
                                                      ATOMICS_AND_VECTORS | INT_AND_WIDE), 400,
                                                     49))
    _never_drawn(MATH_DRAWS, programs(avoid=MATH_AND_BLOCK), 60, 49)


SCAN_AND_BIT_DRAWS = ("reduce_bitand", "reduce_bitor", "reduce_bitxor", "cummax",
                      "cummax_dim0", "cummax_dim1", "cummax_reverse", "cumsum")
BRANCH_DRAWS = ("block_branch_global", "block_branch_shared", "block_branch_any_of",
                "block_branch_all_of", "block_branch_loop")


def test_bitwise_reductions_and_running_maxima_are_generated_and_valid():
    """T.reduce_bitand/bitor/bitxor of integer tiles and T.cummax in both dimensions and
    directions are drawn; one program with each runs on the interpreter and agrees with
    itself; avoided, none is drawn (and no float program reduces bitwise)."""
    drawn = _drawn(programs(avoid={"block_branch", "thread_code", *ATOMICS_AND_VECTORS,
                                    *INT_AND_WIDE}), 300,
                   6)
    _each_drawn_and_valid(SCAN_AND_BIT_DRAWS, drawn)
    assert not any(p.dtype.startswith(("float", "bfloat")) and
                   p.features & {"reduce_bitand", "reduce_bitor", "reduce_bitxor"}
                   for p in drawn)
    _never_drawn(BITS_AND_SCANS, programs(avoid=BITS_AND_SCANS), 60, 6)


def test_block_code_branching_on_data_is_generated_and_valid():
    """Block code branching on an element of an input in global memory or of a shared tile,
    or on T.any_of / T.all_of of part of a row of a shared tile, and a loop whose trip count
    such an element gives, are drawn; one program with each runs on the interpreter and agrees
    with itself."""
    _each_drawn_and_valid(BRANCH_DRAWS, _drawn(programs(avoid=BITS_AND_SCANS - {
        "block_branch"} | ATOMICS_AND_VECTORS | INT_AND_WIDE), 200, 5))


def test_thread_level_code_is_generated_and_valid():
    """Thread-level code (T.get_thread_binding: a running sum down a column per thread, a
    column mirrored from another thread's) is drawn; one program with each runs on the
    interpreter and agrees with itself."""
    _each_drawn_and_valid(("thread_code_scan", "thread_code_mirror"),
                          _drawn(programs(avoid=BITS_AND_SCANS - {"thread_code"} |
                                          ATOMICS_AND_VECTORS | INT_AND_WIDE), 300, 11))


ATOMIC_DRAWS = ("atomic_or", "atomic_and", "atomic_xor", "atomic_memory_order",
                "atomic_prev_block", "atomic_prev_parallel", "atomic_prev_thread",
                "atomic_prev_ticket", "atomic_prev_read", "atomic_prev_unused",
                "atomic_prev_statement", "atomic_prev_inline", "atomic_prev_folded",
                "atomic_prev_ticket_nested", "atomic_load", "atomic_store", "vector_map",
                "vector_lanes", "vector_store_slice", "vector_store_extract")


def test_atomics_and_vectors_are_generated_and_valid():
    """Bitwise atomics, memory orders, previous values (block code, T.Parallel, thread-level
    code, tickets; read, unused, bare, inside the store, folded away), atomic loads and stores
    and vector values (stored into slices, read back lane by lane) are drawn; one program with
    each runs on the interpreter and agrees with itself; avoided, none is drawn."""
    _each_drawn_and_valid(ATOMIC_DRAWS, _drawn(programs(avoid=INT_AND_WIDE), 400, 4))
    _never_drawn(ATOMIC_DRAWS, programs(avoid=ATOMICS_AND_VECTORS), 60, 4)


NEW_OP_DRAWS = (*INT_AND_WIDE, "not", "popcount", "clz", "truncmod")


def test_integer_operations_fmod_and_wide_tiles_are_generated_and_valid():
    """Integer negation, ~, T.popcount and T.clz, T.truncdiv and T.truncmod, &, | and ^ of
    negative operands, floor divisions by a negative divisor computed at run time, T.fmod
    of exact floats and tiles 32 or 64 columns wide are drawn; one program with each runs on
    the interpreter and agrees with itself; avoided, none is drawn."""
    _each_drawn_and_valid(NEW_OP_DRAWS, _drawn(programs(), 300, 6))
    _never_drawn(NEW_OP_DRAWS, programs(avoid=INT_AND_WIDE), 60, 6)


def test_atomics_and_vectors_respect_the_backends_capabilities():
    """Without the features atomic_return_prev and vector_dtypes no previous value and no
    vector; without a tile op none of its atomics; an atomic only into a dtype the backend
    takes it for (op_dtypes); vectors of at most 128 bits without wide_vectors."""
    ops = {"atomic_add", "atomic_max", "atomic_min"}
    takes = {op: frozenset({"int32", "float32"}) for op in ops}

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(2)
    @given(programs(features=frozenset({"partial_tiles"}), tile_ops=ops, op_dtypes=takes))
    def check(program):
        assert not {f for f in program.features if f.startswith(
            ("atomic_prev", "atomic_or", "atomic_and", "atomic_xor", "atomic_load",
             "atomic_store", "vector"))}
        source = program.kernel_source()
        assert "return_prev" not in source and "T.atomic_load" not in source
        if "T.atomic_" in source:
            assert program.dtype in ("int32", "float32")

    check()
    widths = {(p.dtype, f) for p in _drawn(programs(features=frozenset({"vector_dtypes"})),
                                           400, 2) for f in p.features if f == "vector_x8"}
    assert widths and all(dtype in ("int8", "uint8", "int16", "uint16", "float16", "bfloat16")
                          for dtype, _ in widths)


def test_new_draws_respect_the_backends_capabilities():
    """No size read from the arguments without the dynamic_shapes feature, no T.fmod,
    T.clz or T.popcount without extended_math, no float8 or unsigned dtype the backend does
    not declare, none of the avoided features."""
    avoid = {"tensor_3d", "unpack", "sign_cast", "int4_input", "unsigned_wrap_arith"}

    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(22)
    @given(programs(avoid=avoid, dtypes={"int8", "int32", "float32", "float16", "uint8"},
                    features=frozenset({"partial_tiles"})))
    def check(program):
        assert not program.features & (avoid | {"dynamic_shape", "float8_cast", "tile_3d",
                                                "float8_input", "fmod", "bit_count"})
        assert not program.packed and not program.float8
        assert not program.dynamic and not program.depth
        source = program.kernel_source()
        assert "float8" not in source and "uint16" not in source and "uint32" not in source

    check()


def test_the_interpreter_wraps_and_saturates_as_torch_does():
    """What the new draws rely on: int32 -> uint32 wraps and subtracting below zero wraps
    back; float32 -> float8_e4m3fn saturates at 448 and float8_e5m2 rounds to nearest even;
    T.unpack's fields (low nibble first, sign-extended on request)."""
    import tilewright
    import tilewright.language as T
    import torch

    @T.prim_func
    def kernel(X: T.Tensor((8,), "int32"), F: T.Tensor((8,), "float32"),
               W: T.Tensor((8,), "int32"), E4: T.Tensor((8,), "float32"),
               E5: T.Tensor((8,), "float32"), U: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(8):
                W[i] = T.cast(T.cast(X[i], "uint32") - T.uint32(5), "int32")
                E4[i] = T.cast(T.cast(F[i], "float8_e4m3fn"), "float32")
                E5[i] = T.cast(T.cast(F[i], "float8_e5m2"), "float32")
                U[i] = T.cast(T.unpack(T.cast(X[i], "int8"), i % 2, 4, signed=True), "int32")

    x = torch.tensor([-20, -1, 0, 3, 4, 5, 17, 100], dtype=torch.int32)
    f = torch.tensor([500.0, -1e4, 449.0, 3.3, -0.001, 1e-6, 20.5, 0.3])
    w, e4, e5, u = tilewright.compile(kernel, out_idx=[2, 3, 4, 5], target="interp")(x, f)
    assert torch.equal(w, ((x.long() - 5) % 2**32).to(torch.uint32).view(torch.int32))
    assert torch.equal(e4, f.to(torch.float8_e4m3fn).float())
    assert torch.equal(e5, f.to(torch.float8_e5m2).float())
    byte = x.to(torch.int8).to(torch.int32) & 0xFF
    nibble = torch.where(torch.arange(8) % 2 == 0, byte & 0xF, byte >> 4)
    assert torch.equal(u, torch.where(nibble > 7, nibble - 16, nibble))


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_the_interpreter_wraps_unsigned_arithmetic_as_torch_does(dtype):
    """What the wrapping draws rely on: an unsigned sum, difference and product is the exact
    one modulo 2**bits (torch's int64 result masked: its low bits are right even where the
    int64 product overflows)."""
    import tilewright
    import tilewright.language as T
    import torch

    @T.prim_func
    def kernel(A: T.Tensor((64,), dtype), B: T.Tensor((64,), dtype),
               S: T.Tensor((64,), dtype), D: T.Tensor((64,), dtype),
               P: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(64):
                S[i] = A[i] + B[i]
                D[i] = A[i] - B[i]
                P[i] = A[i] * B[i]

    bits = int(dtype[4:])
    gen = torch.Generator().manual_seed(bits)
    a, b = (torch.randint(0, 2 ** bits, (64,), generator=gen) for _ in range(2))
    a[:4], b[:4] = torch.tensor([0, 1, 2 ** bits - 1, 5]), torch.tensor([1, 2 ** bits - 1, 2, 0])
    got = tilewright.compile(kernel, out_idx=[2, 3, 4], target="interp")(
        a.to(getattr(torch, dtype)), b.to(getattr(torch, dtype)))
    for out, want in zip(got, (a + b, a - b, a * b)):
        assert out.long().tolist() == (want & (2 ** bits - 1)).tolist()


GEMM_DRAWS = ("attention", "attention_mask", "attention_p_shared", "attention_p_fragment",
              "gemm_kernel_float16", "gemm_kernel_bfloat16", "gemm_kernel_int8",
              "gemm_kernel_float8_e4m3fn", "gemm_kernel_float8_e5m2", "gemm_threads256",
              "gemm_transpose_A", "gemm_transpose_B", "partial_M", "partial_N", "partial_K",
              "pipelined_stages3", "epilogue_bias", "epilogue_scale", "epilogue_dequant",
              "epilogue_shared", "epilogue_store", "epilogue_cast_bfloat16", "block_swizzle",
              "epilogue_reduce")


def test_gemm_kernels_are_generated_and_valid():
    """GEMM kernels over tensor-core tile shapes (every operand dtype, transposes, 256
    threads, partial blocks, 3 stages, each epilogue) and FlashAttention are drawn; one
    program with each runs on the interpreter and agrees with itself; the tile shapes are
    those the tensor cores take; avoided, none is drawn and the tile programs' draws are
    those of before."""
    from tilewright_sdk.fuzz.gemm import fuzz_plan, gemm_programs

    drawn = _drawn(gemm_programs(), 150, 22)
    for program in drawn:
        for line in program.body:  # every gemm's C: 16x8 tiles split over the warps
            shape = re.match(r"[cso] = T.alloc_fragment\(\((\d+), (\d+)\)", line)
            if shape:
                rows, cols = int(shape[1]), int(shape[2])
                assert rows % 16 == 0 and cols % 16 == 0
                assert (rows // 16) * (cols // 8) % (program.threads // 32) == 0, line
    _each_drawn_and_valid(GEMM_DRAWS, drawn)

    def sources(strategy) -> list:
        return [program.kernel_source() for program in _drawn(strategy, 20, 5)]

    ((_, tiles, count),) = fuzz_plan(20, avoid={"gemm_kernel"})
    assert count == 20 and sources(tiles) == sources(programs())


def _drawn(strategy, examples: int, seed: int = 1) -> list:
    out = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(strategy)
    def draw(program):
        out.append(program)

    draw()
    return out


def test_the_fuzzer_asks_for_kernels_at_their_odds():
    """A quarter of the programs are GEMM and attention kernels, attention among them as
    often as kernel_kinds has it (float16 and bfloat16 half the time), each part drawing only
    its kind: counts, which Hypothesis's clumped draws cannot skew."""
    from tilewright_sdk.fuzz.gemm import GemmProgram, fuzz_plan

    plan = fuzz_plan(40)  # every operand dtype: 2 attention entries of 10
    assert [(name, n) for name, _, n in plan] == [
        ("tile programs", 30), ("GEMM kernels", 8), ("attention kernels", 2)]
    assert [(name, n) for name, _, n in fuzz_plan(40, dtypes={"int8", "int32", "float32"})] \
        == [("tile programs", 30), ("GEMM kernels", 10)]
    assert [n for _, _, n in fuzz_plan(40, avoid={"attention"})] == [30, 10]
    for name, strategy, _ in plan:
        drawn = _drawn(strategy, 5)
        if name == "tile programs":
            assert not any(isinstance(program, GemmProgram) for program in drawn)
        else:
            assert {"attention" in program.features for program in drawn} == \
                {name == "attention kernels"}
