"""AutoDD: shrink a failing Python program while its error message still appears.

``python -m tilewright.autodd buggy.py --err-msg "T.gemm K" -o minimized.py`` runs candidates
of ``buggy.py`` with statements removed (delta debugging over every statement list, largest
chunks first) or compound statements replaced by their bodies, keeping a candidate whenever
the message still appears in its stdout or stderr, until nothing more can go. Candidates run
in a process forked from one that already imported the program's top-level imports (TVM, torch),
or with ``--no-fork`` in a fresh interpreter each. Code inside
``with __freeze__:`` blocks is never touched (``__freeze__`` is defined as a no-op context
manager while candidates run). Each candidate runs in its own process under a time limit; the
search visits candidates in a fixed order, so the same input gives the same output.
"""

from __future__ import annotations

from .core import DeltaDebugger, Result, minimize

__all__ = ["DeltaDebugger", "Result", "minimize"]
