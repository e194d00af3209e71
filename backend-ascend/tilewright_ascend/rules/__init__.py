"""Tile op -> Ascend C: one rule per op in :data:`RULES` (keyed by op name) and one copy rule
per data path. A rule is ``rule(emitter, call)`` and writes lines through the emitter, which
also prints its expressions and names its buffers.

Families: :mod:`.copy` (``T.copy`` by data path, GM <-> UB, atomics), :mod:`.cube` (the cube
paths and instructions), :mod:`.vector` (vector instructions), :mod:`.simd` (``T.SimdVF``
register code), :mod:`.sync`, :mod:`.debug`; :mod:`.scalar` writes the loops the scalar unit
runs.
"""

from ..facts.paths import PATHS
from . import copy, cube, debug, simd, sync, vector  # noqa: F401 - the families register rules
from .scalar import emit_scalar_loop
from .simd import emit_vector_function
from .table import COPY_RULES, RULES
from .vector import parallel_rule

assert set(COPY_RULES) == set(PATHS), "every data path needs exactly one copy rule"

__all__ = ["RULES", "emit_scalar_loop", "emit_vector_function", "parallel_rule"]
