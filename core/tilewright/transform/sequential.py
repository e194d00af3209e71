"""The first phases of a backend that runs a grid's blocks, and a block's threads, one after
another (the CPU, the interpreter): the parallelism the language lets a kernel express
beyond tiles made sequential before the backend's own lowering, and the ops those phases
remove, which such a backend declares among its tile ops."""

from __future__ import annotations

from ..plugin import Phase
from .grid_sync import GRID_OPS, split_grid_syncs
from .shape_symbols import bind_solved_symbols
from .threads import THREAD_OPS, serialize_threads

SEQUENTIAL_OPS = (*THREAD_OPS, *GRID_OPS)


def sequential_phases(prefix: str) -> tuple[Phase, ...]:
    """The three phases, their passes named ``<prefix>BindSolvedSymbols``, ...
    (``prefix``: the backend's, ``"CPU"``)."""
    return (
        Phase("bind_solved_symbols",
              lambda ctx: [bind_solved_symbols(f"{prefix}BindSolvedSymbols")],
              "a shape symbol given only by a dimension linear in it (T.Tensor((n * 4,))) "
              "bound from that dimension (tilewright.transform.shape_symbols)"),
        Phase("split_grid_syncs", lambda ctx: [split_grid_syncs(f"{prefix}SplitGridSyncs")],
              "a kernel with T.sync_grid() run as consecutive launches, one a phase "
              "(tilewright.transform.grid_sync)"),
        Phase("serialize_threads",
              lambda ctx: [serialize_threads(f"{prefix}SerializeThreads")],
              "code reading T.get_thread_binding's index run for each thread in turn "
              "(tilewright.transform.threads)"),
    )
