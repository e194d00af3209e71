"""Ascend C code generation: :mod:`.emitter` walks the lowered IR, :mod:`.expr` prints its
expressions, and the rules of :mod:`..rules` write each tile op."""

from .emitter import CODEGEN

__all__ = ["CODEGEN"]
