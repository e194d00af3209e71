"""TileLang's ``PassConfigKey`` members that the core's own keys do not cover, as data.

Each row is (member, TileLang's string, type, owner, what it does in TileLang). The owner is
the backend where the concept exists (``cuda``: PTX, TMA, wgmma, shared memory, nvcc), or
``tilelang`` for a switch of TileLang's own compiler that has no counterpart here (its
simplifier, its TIR passes, its checks). A row becomes a :class:`PassConfigKey` named
``<owner>.<TileLang's string without its prefix>`` only when no loaded plugin declares the
member itself, so a backend that implements a switch owns its declaration; the others are
accepted, and a compilation for a backend that does not own them says so in one log line.
"""

from __future__ import annotations

from .types import PassConfigKey

_ANY = object  # TileLang accepts several types (a string or a list of flags ...)

ROWS = (
    # -- CUDA: code generation and the nvcc / ptxas tool chain ----------------------------------
    ("TL_DISABLE_WARP_SPECIALIZED", "tl.disable_warp_specialized", bool, "cuda",
     "no producer/consumer warp specialisation"),
    ("TL_DISABLE_TMA_LOWER", "tl.disable_tma_lower", bool, "cuda", "no TMA copies"),
    ("TL_DISABLE_WGMMA", "tl.disable_wgmma", bool, "cuda", "no wgmma on sm_90"),
    ("TL_PTXAS_REGISTER_USAGE_LEVEL", "tl.ptxas_register_usage_level", int, "cuda",
     "ptxas register usage level 0-10"),
    ("TL_ENABLE_PTXAS_VERBOSE_OUTPUT", "tl.enable_ptxas_verbose_output", bool, "cuda",
     "ptxas -v"),
    ("TL_DEVICE_COMPILE_FLAGS", "tl.device_compile_flags", _ANY, "cuda",
     "extra nvcc / NVRTC flags"),
    ("TL_EMIT_LINE_DIRECTIVES", "tl.emit_line_directives", bool, "cuda",
     "#line directives in the generated source"),
    ("TL_ENABLE_ASYNC_COPY", "tl.enable_async_copy", bool, "cuda", "cp.async copies"),
    ("TIR_USE_ASYNC_COPY", "tirx.use_async_copy", bool, "cuda", "cp.async copies"),
    ("TL_ENABLE_LOWER_LDGSTG", "tl.enable_lower_ldgstg", bool, "cuda",
     "wide global loads and stores"),
    ("TL_ENABLE_LOWER_LDGSTG_PREDICATED", "tl.enable_lower_ldgstg_predicated", bool, "cuda",
     "predicated wide global loads and stores"),
    ("TL_DISABLE_LOWER_LDGSTG_PREDICATED", "tl.disable_lower_ldgstg_predicated", bool, "cuda",
     "no predicated wide global loads and stores"),
    ("TL_DISABLE_SHUFFLE_ELECT", "tl.disable_shuffle_elect", bool, "cuda",
     "no elect.sync for single-thread work"),
    ("TL_DISABLE_THREAD_STORAGE_SYNC", "tl.disable_thread_storage_sync", bool, "cuda",
     "no automatic __syncthreads"),
    ("TL_DEBUG_THREAD_STORAGE_SYNC_SUMMARY", "tl.debug_thread_storage_sync_summary", bool,
     "cuda", "print where barriers were inserted"),
    ("TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS", "tl.debug_merge_shared_memory_allocations",
     bool, "cuda", "print the shared memory plan"),
    ("TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE", "tl.enable_aggressive_shared_memory_merge",
     bool, "cuda", "overlap more shared buffers"),
    ("TL_DISABLE_SHARED_MEMORY_REUSE", "tl.disable_shared_memory_reuse", bool, "cuda",
     "one shared memory region per buffer"),
    ("TIR_MERGE_STATIC_SMEM", "tirx.merge_static_smem", bool, "cuda",
     "merge static shared buffers"),
    ("CUDA_KERNELS_OUTPUT_DIR", "cuda.kernels_output_dir", str, "cuda",
     "folder for the generated CUDA sources"),
    ("TL_ENABLE_VECTORIZE_PLANNER_VERBOSE", "tl.enable_vectorize_planner_verbose", bool,
     "cuda", "log the vector widths chosen"),
    ("TL_DYNAMIC_ALIGNMENT", "tl.dynamic_alignment", int, "cuda",
     "assumed alignment of dynamic shapes for vectorising"),
    ("TL_DISABLE_DYNAMIC_TAIL_SPLIT", "tl.disable_dynamic_tail_split", bool, "cuda",
     "no split of vectorised loops with a dynamic tail"),
    ("TL_ENABLE_REDUCER_PLAN_VERBOSE", "tl.enable_reducer_plan_verbose", bool, "cuda",
     "log the plan of each warp reduction"),
    ("TL_REDUCER_FORCE_BASELINE", "tl.reducer_force_baseline", bool, "cuda",
     "the baseline warp reduction plan"),
    ("TL_LAYOUT_COST_MODEL", "tl.layout_cost_model", str, "cuda",
     "cost model of fragment layout inference"),
    # -- TileLang's own compiler: simplifier, TIR passes and checks ------------------------------
    ("TL_SIMPLIFY", "tl.Simplify", _ANY, "tilelang", "options of TileLang's simplifier"),
    ("TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES", "transitively_prove_inequalities", bool,
     "tilelang", "simplifier option"),
    ("TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS", "convert_boolean_to_and_of_ors", bool,
     "tilelang", "simplifier option"),
    ("TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES",
     "apply_constraints_to_boolean_branches", bool, "tilelang", "simplifier option"),
    ("TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL",
     "propagate_knowns_to_prove_conditional", bool, "tilelang", "simplifier option"),
    ("TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS",
     "propagate_knowns_to_simplify_expressions", bool, "tilelang", "simplifier option"),
    ("TL_SIMPLIFY_ENABLE_LET_INLINE", "enable_simplify_let_inline", bool, "tilelang",
     "simplifier option"),
    ("TL_DISABLE_BUFFER_INIT_CHECK", "tl.disable_buffer_init_check", bool, "tilelang",
     "TileLang's check for reads of uninitialised buffers"),
    ("TL_DISABLE_DATA_RACE_CHECK", "tl.disable_data_race_check", bool, "tilelang",
     "TileLang's data race check"),
    ("TL_DISABLE_PRELOWER_SEMANTIC_CHECK", "tl.disable_prelower_semantic_check", bool,
     "tilelang", "TileLang's semantic checks before lowering"),
    ("TL_DISABLE_OUT_OF_BOUND_WARNING", "tl.disable_out_of_bound_warning", bool, "tilelang",
     "TileLang's out-of-bounds warnings"),
    ("TL_CONFIG_INDEX_BITWIDTH", "tl.config_index_bitwidth", int, "tilelang",
     "index bit width"),
    ("TL_DISABLE_LOOP_UNSWITCHING", "tl.disable_loop_unswitching", bool, "tilelang",
     "TileLang's loop unswitching"),
    ("TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE", "tl.loop_unswitching_allow_non_trivial_else",
     bool, "tilelang", "loop unswitching option"),
    ("TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS", "tl.if_stmt_binding_inline_replayable_binds",
     bool, "tilelang", "TileLang's let inlining in conditions"),
    ("TL_FORCE_LET_INLINE", "tl.force_let_inline", bool, "tilelang", "inline every let"),
    ("TL_AST_PRINT_ENABLE", "tl.ast_print_enable", bool, "tilelang", "print TileLang's AST"),
    ("TL_STORAGE_REWRITE_DETECT_INPLACE", "tl.storage_rewrite_detect_inplace", bool,
     "tilelang", "in-place detection of TVM's storage rewrite"),
    ("TL_PASS_PROFILE_THRESHOLD_MS", "tl.pass_profile_threshold_ms", _ANY, "tilelang",
     "hide faster passes in TileLang's pass profile"),
    ("TIR_ENABLE_EQUIV_TERMS_IN_CSE", "tir.enable_equiv_terms_in_cse_tir", bool, "tilelang",
     "TVM CSE option"),
    ("TIR_DISABLE_CSE", "tirx.disable_cse_tir", bool, "tilelang", "no TVM CSE"),
    ("TIR_SIMPLIFY", "tirx.Simplify", _ANY, "tilelang", "TVM simplifier options"),
    ("TIR_DISABLE_STORAGE_REWRITE", "tirx.disable_storage_rewrite", bool, "tilelang",
     "no TVM storage rewrite"),
    ("TIR_ENABLE_DEBUG", "tirx.enable_debug", bool, "tilelang", "TVM debug output"),
    ("TIR_ADD_LOWER_PASS", "tirx.add_lower_pass", _ANY, "tilelang",
     "extra TVM lowering passes"),
    ("TIR_NOALIAS", "tirx.noalias", bool, "tilelang", "TVM's no-alias assumption"),
)


_PREFIXES = (("tl.", ""), ("tirx.", "tir_"), ("tir.", "tir_"), ("cuda.", ""))


def _name(owner: str, value: str) -> str:
    """``tl.disable_wgmma`` owned by cuda -> ``cuda.disable_wgmma``; ``tirx.Simplify`` ->
    ``tilelang.tir_simplify``."""
    for prefix, replacement in _PREFIXES:
        if value.startswith(prefix):
            value = replacement + value[len(prefix):]
            break
    return f"{owner}.{value.lower()}"


def fallback_keys(declared: set[str]) -> list[PassConfigKey]:
    """The rows whose TileLang member no key in ``declared`` (member names) covers."""
    return [PassConfigKey(_name(owner, value), type_, None, f"TileLang: {doc}", owner=owner,
                          tilelang=member, tilelang_value=value)
            for member, value, type_, owner, doc in ROWS if member not in declared]
