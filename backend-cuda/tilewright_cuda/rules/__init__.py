"""Lowering rules of the CUDA backend: one table keyed by tile op (:data:`RULES`), one module
per op family, each registering its rules (``table.register``): ``copy``, ``fill``, ``gemm``,
``reduce``, ``scan``, ``atomic``, ``debug`` and the CUDA dialect (``dialect``, with TMA boxes
in ``tma``)."""

from . import atomic, copy, debug, dialect, fill, gemm, reduce, scan  # noqa: F401 - they register
from .table import INTRINSIC_RULES, RULES

__all__ = ["INTRINSIC_RULES", "RULES"]
