"""Lowering rules of the CUDA backend: one table keyed by tile op (:data:`RULES`), one module
per op family, each registering its rules (``table.register``): ``copy``, ``transpose``,
``fill``, ``gemm``, ``reduce``, ``scan``, ``atomic``, ``debug``, ``pdl``, the expression
intrinsics (``expressions``: fast math, ``T.__ldg``) and the CUDA dialect (``dialect``, with
TMA boxes in ``tma``) and the warp primitives (``warp``)."""

from . import (  # noqa: F401 - they register
    atomic,
    copy,
    debug,
    dialect,
    expressions,
    fill,
    gemm,
    pdl,
    reduce,
    scan,
    transpose,
    warp,
)
from .table import INTRINSIC_RULES, RULES

__all__ = ["INTRINSIC_RULES", "RULES"]
