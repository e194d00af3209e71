"""Backend-agnostic passes and pass frameworks."""

from .lower_tile_ops import RuleContext, lower_intrinsics, lower_tile_ops
from .walk import StmtMutator, prim_func_pass, rebuild_for, reraise_pass_error

__all__ = ["RuleContext", "StmtMutator", "lower_intrinsics", "lower_tile_ops", "prim_func_pass",
           "rebuild_for", "reraise_pass_error"]
