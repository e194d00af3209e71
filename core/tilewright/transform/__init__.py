"""Backend-agnostic passes and pass frameworks."""

# TileLang spells the pass-config names tilelang.transform.PassConfigKey
from ..plugin.passconfig import NAMES as PassConfigKey
from .bounds import check_bounds, instrument_bounds, legalize_negative_indices
from .float_min_max import min_max_ignoring_nan
from .float_to_int import saturating_float_to_int
from .grid_sync import split_grid_syncs
from .lower_tile_ops import RuleContext, lower_intrinsics, lower_tile_ops
from .narrow_float import narrow_float_arithmetic
from .safe_memory import legalize_safe_memory, without_safe_value_scopes
from .shape_symbols import bind_solved_symbols
from .threads import serialize_threads, thread_dependence
from .walk import StmtMutator, prim_func_pass, rebuild_for, reraise_pass_error
from .wrapping_int import wrapping_integer_arithmetic

__all__ = ["PassConfigKey", "RuleContext", "StmtMutator", "bind_solved_symbols", "check_bounds",
           "instrument_bounds", "legalize_negative_indices",
           "legalize_safe_memory", "lower_intrinsics", "lower_tile_ops",
           "min_max_ignoring_nan", "narrow_float_arithmetic", "prim_func_pass", "rebuild_for",
           "reraise_pass_error",
           "saturating_float_to_int", "serialize_threads", "split_grid_syncs",
           "thread_dependence", "without_safe_value_scopes",
           "wrapping_integer_arithmetic"]
