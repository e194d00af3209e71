"""The two Ascend dialect trees and the rule that one kernel is written in one of them.

The seed describes two trees that share no names: the tilelang-ascend adapter tree
(``tilewright_ascend.language``, A2/A3: ``T.Kernel(n, is_npu=True) as (cid, vid)``,
``T.alloc_L1`` ...) and TileLang mainline's Ascend dialect
(``tilewright_ascend.language.mainline``, Ascend 950: ``T.Kernel(n) as bx``, ``T.alloc_l1``
...). Each dialect call claims its tree for the kernel it is in (the kernel annotation
:data:`..facts.keys.TREE_KEY`); a call of the other tree in the same kernel is an error naming
both names, and the compiler refuses a kernel for the target the other tree speaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.language import builder as B

from ..facts.keys import TREE_KEY
from ._emit import error


@dataclass(frozen=True)
class Tree:
    """One dialect tree: its key, the module that speaks it, what the seed calls it and the
    target kind that compiles its kernels."""

    key: str
    module: str
    title: str
    target: str

    def describe(self) -> str:
        return f"{self.title} ({self.module}, target {self.target!r})"


ADAPTER = Tree("adapter", "tilewright_ascend.language",
               "the tilelang-ascend adapter tree for A2/A3", "ascend")
MAINLINE = Tree("mainline", "tilewright_ascend.language.mainline",
                "TileLang mainline's Ascend dialect for Ascend 950", "ascend-950")
TREES = {t.key: t for t in (ADAPTER, MAINLINE)}

# mainline name -> the adapter tree's name for the same thing
MAINLINE_TO_ADAPTER = {
    "alloc_l1": "T.alloc_L1", "alloc_l0a": "T.alloc_L0A", "alloc_l0b": "T.alloc_L0B",
    "alloc_l0c": "T.alloc_L0C", "alloc_shared": "T.alloc_ub", "ascend_set_flag": "T.set_flag",
    "ascend_wait_flag": "T.wait_flag", "ascend_pipe_barrier": "T.pipe_barrier / T.barrier_all",
    "dual_copy": "T.copy with the vid offset", "SimtVF": "T.Parallel inside T.Scope('V')",
    "SimdVF": "T.tile.* vector ops", "MixedKernel": "T.Kernel(n, is_npu=True) as (cid, vid)",
    "annotate_buffer_versions": "T.Pipelined(num_stages=...) (buffer versions are inferred)",
    "Kernel": "T.Kernel(n, is_npu=True) as (cid, vid)",
}
# adapter name -> the mainline name for the same thing
ADAPTER_TO_MAINLINE = {
    "alloc_L1": "T.alloc_l1", "alloc_L0A": "T.alloc_l0a", "alloc_L0B": "T.alloc_l0b",
    "alloc_L0C": "T.alloc_l0c", "alloc_ub": "T.alloc_shared", "set_flag": "T.ascend_set_flag",
    "wait_flag": "T.ascend_wait_flag", "pipe_barrier": "T.ascend_pipe_barrier",
    "barrier_all": "T.ascend_pipe_barrier('PIPE_ALL')",
    "Scope": "nothing: the compiler assigns the cube and vector cores",
    "set_cross_flag": "nothing: cross-core flags are inserted by the compiler",
    "wait_cross_flag": "nothing: cross-core flags are inserted by the compiler",
    "gemm_v0": "T.gemm", "mma": "T.gemm on T.alloc_l0a / T.alloc_l0b tiles",
    "tile": "T.Parallel inside T.SimtVF, or T.simd.*",
    "annotate_address": "nothing: the compiler places buffers",
    "Kernel": "T.Kernel(n) as bx",
}


def counterpart(tree: Tree, name: str) -> str:
    """What to do instead of ``T.<name>`` of ``tree`` in a kernel of the other tree."""
    table = MAINLINE_TO_ADAPTER if tree is MAINLINE else ADAPTER_TO_MAINLINE
    ours = table.get(name.split(".")[0], "its own names")
    if ours.startswith("nothing: "):
        return f"it has no counterpart there ({ours.removeprefix('nothing: ')})"
    return f"use {ours}"


def claim(tree: Tree, name: str) -> None:
    """Record that the kernel being built uses ``T.<name>`` of ``tree``; an error at the user's
    line when it already uses the other tree. Outside a kernel there is nothing to claim."""
    builder = B.current(f"T.{name}")
    if not builder.in_kernel():
        return
    have = builder.kernel_annotations.get(TREE_KEY)
    if have is None:
        builder.kernel_annotations[TREE_KEY] = tree.key
    elif have != tree.key:
        other = TREES[str(have)]
        raise error(f"T.{name} is a name of {tree.describe()}, but this kernel is written in "
                    f"{other.describe()}; one kernel uses one tree: instead of T.{name}, "
                    f"{counterpart(tree, name)}")


def foreign_name(here: Tree, module: str, name: str) -> AttributeError:
    """The error for ``T.<name>`` missing from ``module``, which speaks ``here``: a name of the
    other tree says which tree it is from and what to write instead."""
    other = MAINLINE if here is ADAPTER else ADAPTER
    if name not in (ADAPTER_TO_MAINLINE if here is MAINLINE else MAINLINE_TO_ADAPTER):
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return AttributeError(f"T.{name} belongs to {other.describe()}; this module speaks "
                          f"{here.describe()}: {counterpart(other, name)}, or import "
                          f"{other.module} as T for the other tree")
