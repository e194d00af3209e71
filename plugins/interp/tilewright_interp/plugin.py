"""The entry point of tilewright-interp: declares the backend 'interp', an interpreter of the
tile IR in Python and NumPy."""

from __future__ import annotations

from tilewright.language.reducer import OPS as REDUCER_OPS
from tilewright.plugin import API_VERSION, BackendModule, Capabilities, hookimpl
from tilewright.transform.sequential import SEQUENTIAL_OPS

from . import __version__
from .codegen import CODEGEN
from .executor import EXECUTORS
from .lowering import RULES
from .pipeline import PIPELINE

BACKEND = BackendModule(
    name="interp",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=("interp",),
    pipelines={"interp": PIPELINE},
    codegens={"interp": CODEGEN},
    executors=EXECUTORS,
    capabilities=Capabilities(
        # the ops with a lowering rule, and those of grid barriers and thread-level code,
        # which the first phases remove
        tile_ops=frozenset({*RULES, *SEQUENTIAL_OPS, "atomic_load"}),  # + codegen's load
        dtypes=frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                          "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
                          "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
                          "float4_e2m1fn"}),
        memory_scopes=frozenset({"global", "shared.dyn", "local.fragment", "local", "local.var",
                                 *(f"local.reducer.{op}" for op in REDUCER_OPS)}),
        features=frozenset({"vector_dtypes", "wide_vectors", "dynamic_shapes", "partial_tiles",
                            "kernel_sequence",
                            "while_loops", "atomic_return_prev", "extended_math",
                            "nan_reductions", "nan_min_max", "pointer_params",
                            "strided_tensors"}),
    ),
    description="reference interpreter: runs the tile IR in Python and NumPy, one block "
                "at a time",
)


@hookimpl
def tilewright_backends():
    """Called once when the plugin manager loads plugins."""
    return [BACKEND]
