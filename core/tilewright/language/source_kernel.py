"""``T.CUDASourceCodeKernel``: a kernel launch whose program is the user's CUDA source.

``T.CUDASourceCodeKernel(T.ceildiv(N, 128), threads=128, source_code_or_path=code,
entry_name="external_copy")`` stands where a ``with T.Kernel(...)`` block would, and is the
function's only launch: the ``__global__`` function ``entry_name`` of the source runs on the
grid ``blocks`` (1 to 3 dimensions, expressions of shape symbols allowed) with ``threads``
threads per block (an int or up to 3), in thread-block clusters of ``cluster_dims`` when
given (sm_90+).

The argument convention: the entry is called with the function's parameters in order (a
tensor as a pointer to its first element, of its dtype's CUDA type: ``float*`` for float32; a
scalar parameter as its value), then the shape symbols (``T.dynamic``) that are not
parameters themselves, in the order they first appear in the tensor parameters' shapes (then
strides), each of its dtype (``int`` for the default int32). TileLang's example
``external_copy(float* A, float* B, int n)`` of ``A, B: T.Tensor((N,), T.float32)`` receives
``A``, ``B`` and ``N``.

The statement is the block loops of a kernel around one call of :data:`ir.SOURCE_KERNEL`
(the source, the entry, the threads and the cluster dims as its arguments; the threads also
as the loops' ``tw.threads``, as a ``T.Kernel``'s), so the cache key (the program's text)
holds the source, and only a backend declaring the feature :data:`ir.SOURCE_KERNELS`
compiles it: the others refuse it at the user's line (``engine.session.check_support``).
The backend checks the entry.
"""

from __future__ import annotations

import os

import tvm
from tvm import tirx

from ..errors import KernelFileNotFoundError, KernelValueError, user_location
from ..ir import SOURCE_KERNEL
from . import builder as B
from .buffer import as_int, to_expr
from .frames import BLOCK_AXES, index_value

WHAT = "T.CUDASourceCodeKernel"
# text holding one of these is CUDA source, not a path (TileLang's rule)
SOURCE_MARKERS = ("\n", "__global__", 'extern "C"', "#include")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cuda", ".cpp", ".cc", ".c", ".h", ".hpp")
MAX_THREADS = 1024  # a CUDA block's limit


def _error(message: str) -> KernelValueError:
    return KernelValueError(f"{WHAT}: {message}", user_location())


def load_source(source_code_or_path) -> str:
    """The CUDA source ``source_code_or_path`` names: an existing file's text (a str or an
    ``os.PathLike``; ``~`` expanded), else the text itself when it looks like source (a
    newline, ``__global__``, ``extern "C"`` or ``#include``). A path-like object, or a string
    with a path separator or a source file's suffix, naming no file is a
    :class:`KernelFileNotFoundError`; an empty string a ValueError."""
    is_path = isinstance(source_code_or_path, os.PathLike)
    if not isinstance(source_code_or_path, (str, os.PathLike)):
        raise _error(f"source_code_or_path must be CUDA source text or a path to a CUDA source "
                     f"file, got {type(source_code_or_path).__name__}")
    text = os.fspath(source_code_or_path)
    if not isinstance(text, str) or not text.strip():
        raise _error("source_code_or_path must be non-empty CUDA source text or a path to a "
                     "CUDA source file")
    path = os.path.expanduser(text)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    if not is_path and any(marker in text for marker in SOURCE_MARKERS):
        return text
    separators = [s for s in (os.path.sep, os.path.altsep) if s]
    if is_path or any(s in text for s in separators) or text.endswith(SOURCE_SUFFIXES):
        raise KernelFileNotFoundError(f"{WHAT}: CUDA source file not found: {text}",
                                      user_location())
    return text


def _dims(value, what: str, default=None) -> tuple[int, int, int]:
    """``value`` (an int or 1 to 3 of them, each positive) as three ints, 1 where left out."""
    if value is None:
        value = default
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    values = [as_int(v) for v in values]
    if not 1 <= len(values) <= 3 or not all(isinstance(v, int) and not isinstance(v, bool)
                                            and v > 0 for v in values):
        raise _error(f"{what} must be a positive int or 1 to 3 of them, got {value!r}")
    return (*values, *(1,) * (3 - len(values)))


def CUDASourceCodeKernel(*blocks, threads=None, source_code_or_path,  # noqa: N802 - TileLang's
                         entry_name: str = "main_kernel", cluster_dims=None, prelude=None):
    """Launch the ``__global__`` function ``entry_name`` of the user's CUDA source (inline text,
    or a file) on the grid ``blocks`` with ``threads`` (128 when not given) threads per block;
    ``prelude`` (CUDA text) goes before the source. The whole launch of its function: see the
    module's docstring for the arguments the entry receives."""
    builder = B.current(WHAT)
    if builder.in_kernel():
        raise _error("cannot be used inside 'with T.Kernel(...)': it is a kernel launch of its "
                     "own; write it in the function's body")
    if builder.kernel_seen:
        raise _error("a function with T.CUDASourceCodeKernel has no other kernel launch "
                     "('with T.Kernel' block or T.CUDASourceCodeKernel): write one function "
                     "per launch")
    if not 1 <= len(blocks) <= 3:
        raise _error(f"takes 1 to 3 grid dimensions, got {len(blocks)}")
    grid = [to_expr(index_value(b, f"a {WHAT} grid dimension")) for b in blocks]
    block = _dims(threads, "threads", 128)
    if block[0] * block[1] * block[2] > MAX_THREADS:
        raise _error(f"threads={threads!r} is {block[0] * block[1] * block[2]} threads per "
                     f"block; CUDA allows at most {MAX_THREADS}")
    cluster = _dims(cluster_dims, "cluster_dims", 1)
    if not isinstance(entry_name, str) or not entry_name.strip().isidentifier():
        raise _error(f"entry_name must name a __global__ function of the source (a C "
                     f"identifier), got {entry_name!r}")
    if prelude is not None and not isinstance(prelude, str):
        raise _error(f"prelude must be CUDA source text, got {type(prelude).__name__}")
    source = load_source(source_code_or_path)
    if prelude is not None:
        source = f"{prelude}\n{source}"
    span = B.here()
    call = tvm.ir.Call(tvm.ir.Op.get(SOURCE_KERNEL), [
        tvm.ir.StringImm(source), tvm.ir.StringImm(entry_name.strip()),
        *(tirx.IntImm("int32", d) for d in (*block, *cluster))])
    body = tirx.Evaluate(call, span=span)
    for axis in reversed(range(len(grid))):
        var = tirx.Var(("bx", "by", "bz")[axis], "int32")
        iv = tirx.IterVar(tvm.ir.Range(0, grid[axis]), var, tirx.IterVar.ThreadIndex,
                          BLOCK_AXES[axis])
        body = tirx.For(var, 0, grid[axis], tirx.ForKind.THREAD_BINDING, body,
                        thread_binding=iv,
                        annotations={"tw.threads": list(block)} if axis == 0 else None,
                        span=span)
    builder.kernel_seen = True
    builder.source_kernel = True
    builder.emit(body)
