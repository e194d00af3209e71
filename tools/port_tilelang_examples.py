"""Port TileLang's upstream examples to tilewright mechanically and run them.

    python tools/port_tilelang_examples.py --checkout /path/to/tilelang --target cpu

The port is what a TileLang user would do by hand, and nothing more:

- imports: ``import tilelang`` becomes ``import tilewright as tilelang``,
  ``tilelang.language`` / ``tilelang.X`` become ``tilewright.language`` / ``tilewright.X``;
  ``from tilelang import DataType`` is TVM's, and ``tilelang.transform.simplify_prim_func``
  (a decorator that simplifies the kernel's IR) leaves the kernel as it is;
- CUDA tensors map to the CPU: the strings ``"cuda"`` / ``"cuda:0"`` become ``"cpu"`` (not
  the one in ``carver.arch.CUDA("cuda")``, which names the GPU a kernel is analysed for),
  ``target="cuda"`` becomes ``target="auto"``, and a small shim (``sitecustomize``) makes
  ``Tensor.cuda()`` a no-op, ``torch.cuda.synchronize`` / ``torch.cuda.Event`` and streams
  (``torch.cuda.Stream``, ``torch.cuda.stream(s)``: the host's one, in program order) work,
  and ``torch.cuda.get_device_capability`` / ``get_device_properties`` (which some examples read
  to pick a tiling) describe an sm_80-class device with the host's core count; for the
  examples' own code (not for torch or tilewright) ``torch.cuda.is_available()`` is True, as
  some examples refuse to pick a tiling without a device. Products of float16 / bfloat16 CPU
  tensors (``matmul``, ``einsum``, ``F.linear`` ...) and ``torch._scaled_mm`` of float8 ones
  compute as the GPU's tensor cores do, in float32 with one rounding at the end: torch's own
  narrow-type products on a CPU are about 85x slower, which makes an example's reference at a
  GPU's sizes take hours. A floating tensor divided by a number is multiplied by its
  reciprocal, as torch's CUDA kernel computes it.

Each example (a file with a ``__main__`` block, not a test or regression harness) runs as a
script from a copy of its folder, with the sizes upstream gives it, under a timeout, with
``TILEWRIGHT_TARGET`` naming the backend that ``target="auto"`` resolves to. An example that
needs a GPU-only API (CUDA intrinsics, TMA / wgmma / tcgen05, warp specialisation, thread-level
programming) or another library (Triton, flash-attn ...) is listed as not portable, with the
reason, and is not run. The table gives each example's result and its error's first line:

- ``verified``: it ran and its own checks (asserts, ``assert_close`` ...) passed;
- ``ran (no check)``: it ran, but the example checks nothing;
- ``wrong``: its own check failed;
- ``frontend error``: it stopped before a kernel was compiled (a missing name, a tracing error);
- ``runtime error``: compiling or running the kernel failed;
- ``missing dependency``: it imports a library that is not installed here (``einops``,
  ``tqdm``: the ``test`` extra of tilewright installs them);
- ``timeout``: it did not finish within ``--timeout`` seconds (its whole process group is
  stopped);
- ``not portable``: see above.

``--shrink`` runs the examples listed in :data:`SHRINK` with smaller problem sizes, given
through the example's own command-line arguments (nothing in the example changes); the table
marks them. ``--json FILE`` writes the results; ``--only TEXT`` (repeatable) runs the
examples whose path contains one of the texts; ``--rerun FILE`` runs only the examples a former
``--json`` file lists as verified (to check that another target agrees); ``--logs DIR`` keeps
each example's output; ``--profile`` adds to each row where its time went: the start (imports),
tilewright's autotuning, its other compilations, its kernel calls, and the rest (the example's
own torch code, tracing), also for a run the time limit stops.

``--also-compile TARGET`` (repeatable; ``"cuda -arch=sm_90a"``, ``"cuda -arch=sm_80"``) builds
every distinct kernel an example compiles, while it runs on ``--target`` as always, for that
CUDA target too: lowered and compiled to a cubin with NVRTC through ``tilewright.compile``
(``execution_backend="nvrtc"``), never run. Each kernel is recorded (the ``compiled`` field of
the JSON rows) as ``built``, ``refused`` (a ``KernelError``: tilewright's refusal at the
user's line) or ``crashed`` (any other exception: a TVM error, NVRTC rejecting the generated
CUDA, ...; its traceback is in the example's log), and a second table gives the counts per
example. Kernels compiled inside an autotuning search are not built for CUDA (the tuned one,
compiled again after the search, is).

``--dialect cuda --compile-only TARGET`` (``"cuda -arch=sm_90a"``) takes the other examples:
those not portable only for GPU-only APIs (not those needing another library, nor those for
another GPU: tcgen05 / sm_100, AMD, sm_120, each left out with the reason). Their
``tilelang.language`` becomes ``tilewright_cuda.language`` (the portable language plus the
CUDA dialect; ``tilelang.cuda.intrinsics`` and its modules, TileLang's warp-level tensor-core
emitter, become ``tilewright_cuda.language.mma_emitter``), each kernel they compile is built
for TARGET with NVRTC instead of their own
backend, and they stop at their first kernel call (a call or ``get_profiler``: nothing runs on
the host) or at the first kernel that does not build. Each example is ``built``, ``refused``,
``crashed`` (its worst kernel, as above), ``frontend error`` (first the ``T.<name>`` it uses
that the dialect lacks, found in its source, then the error) or ``runtime error``; the table
ends with the missing names by how many examples use them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# -- what makes an example not portable: (pattern in its source, reason) -----------------------
GPU_ONLY = [
    (r"\bT\.(ptx_\w+|cp_async\w*|ldmatrix|stmatrix|mma_\w+)\b", "PTX intrinsics"),
    (r"\bT\.(tma_\w+|create_tma\w*|fence_proxy_async)\b", "TMA"),
    (r"\bT\.(wgmma\w*|wait_wgmma|warpgroup\w*)\b", "wgmma"),
    (r"\bT\.(tcgen05\w*|alloc_tmem|clc_\w+)\b|tcgen05", "tcgen05 (sm_100)"),
    (r"\bT\.(mbarrier\w*|alloc_barrier|alloc_cluster_barrier|barrier_wait|barrier_arrive|"
     r"cp_async_barrier\w*)\b", "mbarriers"),
    (r"\bT\.(ws|ws_op|WS\w+|annotate_ws\w*|set_max_nreg|inc_max_nreg|dec_max_nreg|"
     r"no_set_max_nreg|disable_warp_group_reg_alloc|annotate_producer\w*|"
     r"annotate_consumer\w*)\b", "warp specialisation"),
    (r"\bT\.(launch_thread|"
     r"block_rank_in_cluster|ClusterKernel|PersistentTileScheduler)\b",
     "warp-, cluster- or grid-level programming"),
    (r"\bT\.(call_extern|import_source)\b", "CUDA source called from the kernel"),
    (r"tilelang\.(cuda|rocm)\.intrinsics|tilelang\.intrinsics|from tilelang\.tileop",
     "tensor-core intrinsic emitters"),
    (r"tilelang\.contrib\.(nvcc|hipcc|nvrtc)|from tilelang\.contrib import (nvcc|hipcc|nvrtc)|"
     r"tilelang\.tools\.cuda|from tilelang\.tools\.cuda import",
     "the CUDA toolchain or CUDA tools"),
    (r"\bT\.mma_gemm_blockscaled\b", "block-scaled tensor-core GEMM"),
    (r"target\s*=\s*[\"']hip|\bT\.mfma\w*", "AMD GPUs (HIP)"),
]
# GPU-only libraries; a CPU-capable one (einops ...) is simply needed in the environment
OTHER_LIBRARY = [
    (r"^\s*(import|from)\s+triton\b", "Triton"),
    (r"^\s*(import|from)\s+flash_attn\b", "flash-attn"),
    (r"^\s*(import|from)\s+(fla|FLA_KDA)\b", "flash-linear-attention (Triton)"),
    (r"^\s*(import|from)\s+(vllm|aiter|flashinfer|flash_mla|deep_gemm|sgl_kernel|bitblas|"
     r"cutlass|fast_hadamard_transform)\b", "a CUDA library"),
    (r"^\s*(import|from)\s+transformers\b", "a model library (transformers) and its weights"),
]
CHECKS = re.compile(r"\bassert\b|assert_close|assert_allclose|allclose|assert_similar|"
                    r"\bcheck\w*\(|\bcompare\w*\(|max err", re.IGNORECASE)


# --shrink: smaller problems through the example's own command-line arguments (upstream sizes
# are a GPU's: attention over 4096-token sequences and 64 heads, GEMMs of 4096^3 and more)
SHRINK = {
    "attention_sink/example_gqa_sink_bwd_bhsd.py": ["--h", "8", "--n_ctx", "256", "--groups",
                                                    "4", "--window_size", "64"],
    "attention_sink/example_gqa_sink_bwd_varlen.py": ["--batch", "2", "--heads", "8", "--groups",
                                                      "4", "--q_seqlen", "256", "--k_seqlen",
                                                      "256"],
    "attention_sink/example_gqa_sink_fwd_varlen.py": ["--batch", "2", "--heads", "8", "--groups",
                                                      "4", "--q_seqlen", "256", "--k_seqlen",
                                                      "256"],
    "attention_sink/example_mha_sink_bwd_bhsd.py": ["--h", "2", "--n_ctx", "256"],
    "attention_sink/example_mha_sink_fwd_bhsd.py": ["--batch", "1", "--heads", "2", "--seq_q",
                                                    "256", "--seq_kv", "256"],
    "blocksparse_gemm/example_blocksparse_gemm.py": ["--m", "256", "--n", "256", "--k", "256"],
    "convolution/example_convolution.py": ["--n", "8", "--c", "64", "--h", "16", "--w", "16",
                                           "--f", "64"],
    "convolution/example_convolution_autotune.py": ["--n", "8", "--c", "64", "--h", "16", "--w",
                                                    "16", "--f", "64"],
    "deepseek_mla/amd/benchmark_mla_decode_amd_tilelang.py": ["--batch", "2", "--heads", "64",
                                                              "--kv_ctx", "512"],
    # its check is atol = rtol = 1e-4 on float16 outputs against a float16 reference: it holds
    # for a long context (small attention weights), not for a short one
    "deepseek_mla/example_mla_decode.py": ["--batch", "1", "--heads", "64", "--kv_ctx", "8192"],
    "deepseek_mla/example_mla_decode_paged.py": ["--batch", "2", "--h_q", "64",
                                                 "--cache_seqlen", "512"],
    "deepseek_v4/sparse_attn_fwd_sm90.py": ["--h", "16", "--n_ctx", "128", "--n_kv", "512",
                                            "--topk", "128"],
    "elementwise/example_elementwise_add.py": ["--m", "1024", "--n", "1024"],
    "flash_attention/example_gqa_bwd.py": ["--batch", "1", "--h", "8", "--n_ctx", "256",
                                           "--groups", "4"],
    "flash_attention/example_gqa_fwd_bshd.py": ["--heads", "8", "--seq_len", "256", "--groups",
                                                "4"],
    "flash_attention/example_mha_bwd_bhsd.py": ["--batch", "1", "--h", "4", "--n_ctx", "256"],
    "flash_attention/example_mha_bwd_bshd.py": ["--batch", "1", "--h", "4", "--n_ctx", "256"],
    "flash_attention/example_mha_fwd_bshd.py": ["--batch", "1", "--heads", "4", "--seq_len",
                                                "256"],
    "flash_decoding/example_gqa_decode.py": ["--heads", "16", "--groups", "4", "--kv_seqlen",
                                             "1024"],
    "flash_decoding/example_gqa_decode_varlen_logits.py": ["--q_heads", "16", "--kv_heads", "4",
                                                           "--k_seqlen", "1024"],
    "gemm/example_gemm_advanced_autotune.py": ["--m", "512", "--n", "512", "--k", "512"],
    "gemm/example_gemm_autotune.py": ["--m", "512", "--n", "512", "--k", "512"],
    "gemm/example_gemm_autotune_pass_configs.py": ["--m", "512", "--n", "512", "--k", "512"],
    "gemm/example_gemm_persistent.py": ["--M", "512", "--N", "512", "--K", "512"],
    "grouped_gemm/example_grouped_gemm_bwd.py": ["--batch_sizes", "64, 128", "--K", "256", "--M",
                                                 "256"],
    "grouped_gemm/example_grouped_gemm_fwd.py": ["--batch_sizes", "64, 128", "--K", "256", "--M",
                                                 "256"],
    # upstream's 448 x 4096 x 4096 float16 groups: torch's float16 reference alone is minutes
    "grouped_gemm/example_grouped_gemm_fwd_ptr.py": ["--K", "512", "--N", "512"],
    "linear_attention/example_mamba_chunk_state.py": ["--batch", "1", "--heads", "8", "--seq_len",
                                                      "1024"],
    "linear_attention/example_retention_fwd.py": ["--B", "1", "--S", "512", "--H", "4"],
}


@dataclass
class Result:
    example: str
    result: str
    detail: str = ""
    seconds: float = 0.0
    arguments: list = field(default_factory=list)
    # --also-compile: one row a kernel and CUDA target (kernel, target, status, error, seconds)
    compiled: list = field(default_factory=list)
    # --dialect cuda: the names the example uses that the dialect's T lacks
    missing: list = field(default_factory=list)


# -- the mechanical port --------------------------------------------------------------------
_IMPORTS = [
    # TileLang re-exports TVM's DataType; its simplify_prim_func decorator only simplifies the
    # IR, which tilewright's compilation does anyway
    (re.compile(r"^(\s*)from tilelang import DataType\s*$", re.M), r"\1from tvm import DataType"),
    (re.compile(r"^(\s*)from tilelang\.transform import simplify_prim_func\s*$", re.M),
     r"\1simplify_prim_func = lambda func: func  # tilewright simplifies when it compiles"),
    # the mma swizzle of a shared tile TileLang's intrinsics module makes: a layout annotation
    # (where elements sit, not what is computed), tilewright's swizzled layout
    (re.compile(r"^(\s*)from tilelang\.cuda\.intrinsics import make_mma_swizzle_layout\s*$",
                re.M),
     r"\1from tilewright.layout import make_swizzled_layout as make_mma_swizzle_layout"),
    (re.compile(r"^(\s*)import tilelang\s*$", re.M), r"\1import tilewright as tilelang"),
    (re.compile(r"^(\s*)import tilelang as (\w+)", re.M), r"\1import tilewright as \2"),
    (re.compile(r"^(\s*)import tilelang\.([\w.]+) as (\w+)", re.M),
     r"\1import tilewright.\2 as \3"),
    (re.compile(r"^(\s*)import tilelang\.([\w.]+)\s*$", re.M),
     r"\1import tilewright.\2; import tilewright as tilelang"),
    (re.compile(r"^(\s*)from tilelang(\.[\w.]+)? import", re.M), r"\1from tilewright\2 import"),
]
_DEVICES = [
    (re.compile(r"target\s*=\s*([\"'])cuda\1"), 'target="auto"'),
    # TVM 0.27's configuration-dict form of a CUDA target (its architecture is the device's)
    (re.compile(r"target\s*=\s*\{[^{}]*([\"'])kind\1\s*:\s*([\"'])cuda\2[^{}]*\}"),
     'target="auto"'),
    # a device string, not the architecture that carver.arch.CUDA("cuda") describes
    (re.compile(r"(?<!CUDA\()([\"'])cuda(:\d+)?\1"), r'\1cpu\1'),
]


# --dialect cuda: the language is the CUDA dialect's (the portable language plus its ops)
_DIALECT = [
    (re.compile(r"^(\s*)import tilewright\.language as (\w+)", re.M),
     r"\1import tilewright_cuda.language as \2"),
    (re.compile(r"^(\s*)from tilewright\.language import", re.M),
     r"\1from tilewright_cuda.language import"),
    (re.compile(r"^(\s*)from tilewright import language as (\w+)", re.M),
     r"\1from tilewright_cuda import language as \2"),
    # TileLang's warp-level tensor-core emitter and its mma swizzle (tilelang.cuda.intrinsics,
    # its macro.mma_macro_generator and layout.mma_layout modules): the dialect's
    (re.compile(r"^(\s*)from tilewright\.cuda\.intrinsics(\.[\w.]+)? import", re.M),
     r"\1from tilewright_cuda.language.mma_emitter import"),
]


def port_source(text: str, dialect: str | None = None) -> str:
    """The example's source with TileLang's imports renamed and CUDA devices mapped to the
    CPU; with ``dialect="cuda"`` its ``tilelang.language`` is ``tilewright_cuda.language``."""
    for pattern, repl in _IMPORTS + _DEVICES + (_DIALECT if dialect == "cuda" else []):
        text = pattern.sub(repl, text)
    return text


SHIM = '''\
"""Installed by tools/port_tilelang_examples.py: CUDA calls of the examples map to the host."""
import contextlib
import functools
import os
import sys
import time

import torch

torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.current_device = lambda: "cpu"
torch.cuda.empty_cache = lambda: None
# examples that pick a tiling from the device see an sm_80-class device with the host's cores;
# torch.cuda.is_available() is True for the examples' own code only (torch, tilewright and the
# libraries they call see the machine as it is)
# (--compile-only: the target's architecture, TW_PORT_CAPABILITY="9,0")
_CAPABILITY = tuple(int(v) for v in os.environ.get("TW_PORT_CAPABILITY", "8,0").split(","))
torch.cuda.get_device_capability = lambda *args, **kwargs: _CAPABILITY
torch.cuda.get_device_name = lambda *args, **kwargs: "host CPU"
_EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_available = torch.cuda.is_available


def _is_available():
    caller = sys._getframe(1).f_code.co_filename
    return os.path.abspath(caller).startswith(_EXAMPLES + os.sep) or _available()


torch.cuda.is_available = _is_available


class _Properties:
    name = "host CPU"
    major, minor = _CAPABILITY
    multi_processor_count = len(os.sched_getaffinity(0))
    total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


torch.cuda.get_device_properties = lambda *args, **kwargs: _Properties()


class _Event:
    def __init__(self, *args, **kwargs):
        self.t = 0.0

    def record(self, *args, **kwargs):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


torch.cuda.Event = _Event


class _Stream:
    """The host runs each call to its end in program order: one stream, already in sync."""

    def __init__(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def wait_stream(self, *args, **kwargs):
        pass

    def wait_event(self, *args, **kwargs):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event

    def query(self):
        return True


_HOST_STREAM = _Stream()
torch.cuda.Stream = _Stream
torch.cuda.default_stream = lambda *args, **kwargs: _HOST_STREAM
torch.cuda.current_stream = lambda *args, **kwargs: _HOST_STREAM
torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()

# The device's products. A GPU multiplies float16 and bfloat16 operands (and float8 ones in
# torch._scaled_mm) on its tensor cores, accumulating in float32 (cuBLAS's compute type) and
# rounding the result once. torch's own float16 / bfloat16 products on a CPU run about 85x
# slower than its float32 ones here (0.7 against 60 GFLOP/s), which turns an example's torch
# reference at a GPU's sizes into hours. A product whose operands are all CPU tensors of one
# of those types computes as the device would: the operands widened to float32 (exact), one
# float32 product, the result rounded to the operands' type (or _scaled_mm's out_dtype).
# Anything else (mixed types, out=, other devices) is torch's own call, unchanged.
_NARROW = (torch.float16, torch.bfloat16)


def _tensors(args):
    for arg in args:
        if isinstance(arg, torch.Tensor):
            yield arg
        elif isinstance(arg, (list, tuple)):  # torch.einsum(equation, [a, b])
            yield from _tensors(arg)


def _widened(arg):
    if isinstance(arg, torch.Tensor):
        return arg.float()
    if isinstance(arg, (list, tuple)):
        return type(arg)(_widened(a) for a in arg)
    return arg


def _as_device(product):
    @functools.wraps(product)  # its name too: torch.compile registers these by name
    def run(*args, **kwargs):
        operands = list(_tensors(args))
        narrow = operands and operands[0].dtype in _NARROW and "out" not in kwargs and all(
            t.dtype == operands[0].dtype and t.device.type == "cpu" for t in operands)
        if not narrow:
            return product(*args, **kwargs)
        return product(*_widened(args), **kwargs).to(operands[0].dtype)
    return run


for _owner, _name in [(torch, "matmul"), (torch, "mm"), (torch, "bmm"), (torch, "einsum"),
                      (torch.nn.functional, "linear"), (torch.Tensor, "__matmul__"),
                      (torch.Tensor, "matmul"), (torch.Tensor, "mm"), (torch.Tensor, "bmm")]:
    setattr(_owner, _name, _as_device(getattr(_owner, _name)))

_scaled_mm = torch._scaled_mm


@functools.wraps(_scaled_mm)
def _device_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                      use_fast_accum=False):
    """float8 operands, exact in float32; one float32 product scaled per row of a and per
    column of b (or per tensor), as the device's block-scaled tensor-core product."""
    if a.device.type != "cpu" or scale_result is not None:
        return _scaled_mm(a, b, scale_a, scale_b, bias=bias, scale_result=scale_result,
                          out_dtype=out_dtype, use_fast_accum=use_fast_accum)
    c = (a.float() @ b.float()) * scale_a.float() * scale_b.float()
    if bias is not None:
        c = c + bias.float()
    return c.to(out_dtype or a.dtype)


torch._scaled_mm = _device_scaled_mm

# The device's division by a number. torch on a CUDA device divides a floating tensor by a
# Python number as a multiplication by the number's reciprocal, computed in the tensor's
# compute type (ATen's div_true_kernel_cuda: "compute a * reciprocal(b) ... may lose one bit
# of precision"); torch on the CPU divides. An example whose exact check relies on the device's
# rounding (a scale computed as amax * (1 / 448) in the kernel and amax / 448 in torch) needs
# the device's rule.
def _reciprocal(tensor, number):
    compute = torch.promote_types(tensor.dtype, torch.float32)  # ATen's opmath type
    return (torch.ones((), dtype=compute) / torch.tensor(number, dtype=compute)).item()


def _by_number(divide, multiply):
    @functools.wraps(divide)
    def run(self, other, *args, **kwargs):
        if (isinstance(self, torch.Tensor) and self.is_floating_point() and not args
                and kwargs.get("rounding_mode") is None and "out" not in kwargs
                and isinstance(other, (int, float)) and not isinstance(other, bool)
                and other != 0):
            return multiply(self, _reciprocal(self, other))
        return divide(self, other, *args, **kwargs)
    return run


for _owner, _name, _multiply in [
        (torch.Tensor, "__truediv__", torch.Tensor.mul), (torch.Tensor, "div", torch.Tensor.mul),
        (torch.Tensor, "true_divide", torch.Tensor.mul), (torch, "div", torch.mul),
        (torch, "true_divide", torch.mul), (torch.Tensor, "__itruediv__", torch.Tensor.mul_),
        (torch.Tensor, "div_", torch.Tensor.mul_)]:
    setattr(_owner, _name, _by_number(getattr(_owner, _name), _multiply))

# --also-compile: every kernel the example compiles for its own backend is also built for each
# CUDA target in TW_PORT_ALSO_COMPILE (lowered, its CUDA compiled to a cubin by NVRTC; never
# run), through tilewright's public compile; one JSON line a kernel and target goes to the file
# TW_PORT_ALSO_COMPILE_RECORD: built, refused (a KernelError: tilewright's refusal at the
# user's line) or crashed (any other exception: a TVM error, NVRTC rejecting our CUDA ...).
# The variables are taken out of the environment, so that the autotuner's helper processes
# (which compile every configuration) do not build each configuration for CUDA too; the
# compilations inside an autotuning search are left out in this process as well.
if os.environ.get("TW_PORT_ALSO_COMPILE"):
    import importlib
    import json
    import threading
    import traceback

    import tilewright
    import tvm_ffi
    from tilewright.autotuner import AutoTuner as _Tuner
    from tilewright.errors import KernelError as _KernelError

    _CUDA_TARGETS = json.loads(os.environ.pop("TW_PORT_ALSO_COMPILE"))
    _CUDA_RECORD = os.environ.pop("TW_PORT_ALSO_COMPILE_RECORD")
    _cuda_state = threading.local()  # .busy: inside a build of ours or an autotuning search
    _cuda_lock = threading.Lock()
    _cuda_seen = set()  # (target, structural hash): a kernel compiled again is built once
    _own_compile = importlib.import_module("tilewright.jit.decorator")

    def _cuda_outcome(exc) -> tuple:
        if exc is None:
            return "built", ""
        text = (str(exc).strip().splitlines() or [""])[0][:600]
        kind = "refused" if isinstance(exc, _KernelError) else "crashed"
        return kind, f"{type(exc).__name__}: {text}"

    def _cuda_build(func, out_idx, pass_configs):
        symbol = func.attrs.get("global_symbol") if func.attrs else None
        name = str(symbol or "main")
        try:
            structure = tvm_ffi.structural_hash(func)
        except Exception:  # noqa: BLE001 - then this compilation is built whatever it repeats
            structure = id(func)
        for target in _CUDA_TARGETS:
            with _cuda_lock:
                if (target, structure) in _cuda_seen:
                    continue
                _cuda_seen.add((target, structure))
            start, error = time.perf_counter(), None
            try:
                tilewright.compile(func, out_idx=out_idx, target=target,
                                   execution_backend="nvrtc", pass_configs=pass_configs)
            except Exception as exc:  # noqa: BLE001 - each outcome is recorded, none raised
                error = exc
                if not isinstance(exc, _KernelError):
                    traceback.print_exc()
            status, detail = _cuda_outcome(error)
            row = {"kernel": name, "target": target, "status": status, "error": detail,
                   "seconds": round(time.perf_counter() - start, 2)}
            print(f"tw-also-compile: {name} for {target}: {status} {detail}", file=sys.stderr,
                  flush=True)
            with _cuda_lock, open(_CUDA_RECORD, "a") as record:
                print(json.dumps(row), file=record)

    def _quiet(fn):
        """``fn`` with our builds turned off while it runs."""
        @functools.wraps(fn)
        def run(*args, **kwargs):
            busy = getattr(_cuda_state, "busy", False)
            _cuda_state.busy = True
            try:
                return fn(*args, **kwargs)
            finally:
                _cuda_state.busy = busy
        return run

    def _also_for_cuda(compile_kernel):
        @functools.wraps(compile_kernel)
        def run(func, *args, **kwargs):
            if getattr(_cuda_state, "busy", False):
                return compile_kernel(func, *args, **kwargs)
            try:
                return compile_kernel(func, *args, **kwargs)
            finally:
                _quiet(_cuda_build)(func, kwargs.get("out_idx"), kwargs.get("pass_configs"))
        return run

    _own_compile._compile_kernel = _also_for_cuda(_own_compile._compile_kernel)
    _Tuner.search = _quiet(_Tuner.search)

# --compile-only: the example's kernels are built for the CUDA targets in TW_PORT_COMPILE_ONLY
# instead of its own backend (lowered, compiled to a cubin by NVRTC), each recorded in
# TW_PORT_COMPILE_RECORD as built, refused or crashed; the example stops at its first kernel
# call (nothing runs on the host), or at the first kernel that does not build (the example
# cannot go on without it).
if os.environ.get("TW_PORT_COMPILE_ONLY"):
    import importlib
    import json
    import traceback

    from tilewright.errors import KernelError as _OnlyKernelError
    from tilewright.runtime.call import KernelCall as _OnlyKernelCall

    _ONLY_TARGETS = json.loads(os.environ.pop("TW_PORT_COMPILE_ONLY"))
    _ONLY_RECORD = os.environ.pop("TW_PORT_COMPILE_RECORD")
    _only_module = importlib.import_module("tilewright.jit.decorator")
    _only_compile = _only_module._compile_kernel

    def _stop(message: str, status: int):
        print(f"tw-compile-only: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(status)

    def _build_only(func, out_idx=None, target=None, pass_configs=None,
                    execution_backend=None, cache=None):
        symbol = func.attrs.get("global_symbol") if func.attrs else None
        name, kernel, failed = str(symbol or "main"), None, False
        for cuda in _ONLY_TARGETS:
            start, status, detail = time.perf_counter(), "built", ""
            try:
                built = _only_compile(func, out_idx=out_idx, target=cuda,
                                      pass_configs=pass_configs, execution_backend="nvrtc",
                                      cache=cache)
                kernel = kernel or built
            except Exception as exc:  # noqa: BLE001 - each outcome is recorded
                failed = True
                status = "refused" if isinstance(exc, _OnlyKernelError) else "crashed"
                detail = f"{type(exc).__name__}: " + \
                    (str(exc).strip().splitlines() or [""])[0][:600]
                if status == "crashed":
                    traceback.print_exc()
                else:
                    print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            row = {"kernel": name, "target": cuda, "status": status, "error": detail,
                   "seconds": round(time.perf_counter() - start, 2)}
            print(f"tw-compile-only: {name} for {cuda}: {status} {detail}", file=sys.stderr,
                  flush=True)
            with open(_ONLY_RECORD, "a") as record:
                print(json.dumps(row), file=record)
        if failed:
            _stop(f"{name} did not build: the example stops here", 0)
        return kernel

    _only_module._compile_kernel = _build_only
    # TileLang's toolchain queries answer for the target: tilelang.contrib.nvcc's
    # get_target_compute_version() (the examples check for Hopper with it) is the target's
    # compute capability, "9.0" for sm_90a
    import types

    def _compute_version(target=None):
        return ".".join(map(str, _CAPABILITY))

    _nvcc = types.ModuleType("tilewright.contrib.nvcc")
    _nvcc.get_target_compute_version = _compute_version
    _contrib = sys.modules.setdefault("tilewright.contrib",
                                      types.ModuleType("tilewright.contrib"))
    _contrib.nvcc = sys.modules.setdefault("tilewright.contrib.nvcc", _nvcc)
    _OnlyKernelCall.__call__ = lambda self, *args, **kwargs: _stop(
        "stopped at the first kernel call", 0)
    # the profiler makes the kernel's inputs on its device and calls it: a kernel call too
    importlib.import_module("tilewright.jit.kernel").JITKernel.get_profiler = \
        lambda self, *args, **kwargs: _stop("stopped at the first kernel call (its profiler)", 0)

# --profile: where the time goes -- the start (imports), tilewright's autotuning (its
# compilations and measurements), its other compilations, its kernel calls, and the rest (the
# example's own torch code, tracing) -- reported at exit and, for a run that the time limit
# will stop, just before it
if os.environ.get("TW_PORT_PROFILE"):
    import atexit
    import importlib
    import threading

    from tilewright.autotuner import AutoTuner as _AutoTuner
    from tilewright.runtime.call import KernelCall as _KernelCall

    # (tilewright.jit is also the decorator's name: the modules come from importlib)
    _decorator = importlib.import_module("tilewright.jit.decorator")
    _kernel = importlib.import_module("tilewright.jit.kernel")

    # seconds, calls, since; a call inside another timed one counts for the outer one only
    _SPENT = {"autotune": [0.0, 0, None], "compile": [0.0, 0, None], "kernel": [0.0, 0, None]}

    def _alive() -> float:
        """Seconds since this process started (/proc: its start and the uptime, in ticks)."""
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return float(uptime.read().split()[0]) - start

    _STARTUP = _alive()  # the interpreter's start, torch's and tilewright's imports

    def _timed(kind, fn):
        def run(*args, **kwargs):
            entry = _SPENT[kind]
            if any(e[2] is not None for e in _SPENT.values()):  # inside a timed call
                return fn(*args, **kwargs)
            entry[2] = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                entry[0] += time.perf_counter() - entry[2]
                entry[1] += 1
                entry[2] = None
        return run

    _decorator._compile_kernel = _timed("compile", _decorator._compile_kernel)
    _kernel.compile = _timed("compile", _kernel.compile)
    _KernelCall.__call__ = _timed("kernel", _KernelCall.__call__)
    _AutoTuner.search = _timed("autotune", _AutoTuner.search)

    def _report():
        now, alive = time.perf_counter(), _alive()
        spent = {k: total + (now - since if since is not None else 0.0)
                 for k, (total, _, since) in _SPENT.items()}
        rest = alive - _STARTUP - sum(spent.values())
        print(f"tw-profile: startup {_STARTUP:.1f} s, autotune {spent['autotune']:.1f} s "
              f"({_SPENT['autotune'][1]}), compile {spent['compile']:.1f} s "
              f"({_SPENT['compile'][1]}), kernels {spent['kernel']:.1f} s "
              f"({_SPENT['kernel'][1]} calls), rest {rest:.1f} s", flush=True)

    atexit.register(_report)
    # TW_PORT_PROFILE: when to report, in seconds since the process started
    threading.Thread(target=lambda: (
        time.sleep(max(float(os.environ["TW_PORT_PROFILE"]) - _alive(), 0.0)), _report()),
        daemon=True).start()
'''


def not_portable(source: str) -> str | None:
    """The reason an example cannot run on the host, or None."""
    for pattern, reason in OTHER_LIBRARY:
        if re.search(pattern, source, re.M):
            return f"needs {reason}"
    for pattern, reason in GPU_ONLY:
        match = re.search(pattern, source, re.M)
        if match:
            return f"GPU-only API: {reason} ({match.group(0).strip()})"
    return None


# --dialect cuda leaves these out: the dialect is Hopper's (sm_90a); these need another GPU
NOT_IN_DIALECT = {
    "tcgen05 (sm_100)": "Blackwell's tensor memory and tcgen05 MMA (sm_100), which the CUDA "
                        "dialect does not have",
    "AMD GPUs (HIP)": "an AMD GPU (HIP), not CUDA",
    "sm_120": "sm_120's block-scaled MMA (consumer Blackwell), which the CUDA dialect does "
              "not have",
}


def dialect_reason(source: str, example: str = "") -> tuple[bool, str]:
    """(whether ``--dialect cuda`` ports the example, why): it must be not portable only for
    GPU-only APIs, none of them another GPU's (:data:`NOT_IN_DIALECT`; the ``amd/`` folder's
    examples are AMD's)."""
    for pattern, reason in OTHER_LIBRARY:
        if re.search(pattern, source, re.M):
            return False, f"needs {reason}"
    reasons = [reason for pattern, reason in GPU_ONLY if re.search(pattern, source, re.M)]
    if re.search(r"tilelang\.rocm\b|\bROCm\b|\bgfx\d+", source) or \
            example.startswith("amd/"):  # AMD's matrix cores
        reasons.append("AMD GPUs (HIP)")
    if re.search(r"\bT\.mma_gemm_blockscaled\b|\bsm_?120\b", source, re.I):
        reasons.append("sm_120")
    for reason in reasons:
        if reason in NOT_IN_DIALECT:
            return False, f"needs {NOT_IN_DIALECT[reason]}"
    if not reasons:
        return False, "portable: runs on the host without the dialect"
    return True, "GPU-only API: " + ", ".join(reasons)


def language_aliases(source: str) -> set[str]:
    """The names the example gives TileLang's language module (``T`` by default)."""
    aliases = set(re.findall(r"^\s*import tilelang\.language as (\w+)", source, re.M))
    aliases |= set(re.findall(r"^\s*from tilelang import language as (\w+)", source, re.M))
    return aliases or {"T"}


def missing_names(source: str, available: set[str]) -> list[str]:
    """The ``T.<name>`` the example uses that are not in ``available`` (the dialect's names),
    each once, in order of first use."""
    found = []
    for alias in language_aliases(source):
        for name in re.findall(rf"(?<![\w.]){alias}\.(\w+)", source):
            if name not in available and name not in found:
                found.append(name)
    return found


def local_imports(path: Path, seen=None) -> list[Path]:
    """The example's own helper modules (siblings it imports), recursively."""
    seen = set() if seen is None else seen
    out = []
    for name in re.findall(r"^\s*(?:from|import)\s+([\w]+)", path.read_text(), re.M):
        sibling = path.parent / f"{name}.py"
        if sibling.exists() and sibling not in seen:
            seen.add(sibling)
            out += [sibling, *local_imports(sibling, seen)]
    return out


# AutoDD's inputs: a deliberately failing program and its expected reduction
NOT_EXAMPLES = ("autodd/",)


def discover(examples: Path, only: list[str] | None) -> list[Path]:
    """Every example: a file with a ``__main__`` block that imports TileLang, not a test, a
    performance-regression harness or one of :data:`NOT_EXAMPLES`."""
    found = []
    for path in sorted(examples.rglob("*.py")):
        name = path.name
        rel = str(path.relative_to(examples))
        if name.startswith(("test_", "regression_")) or name == "conftest.py" or \
                rel.startswith(NOT_EXAMPLES):
            continue
        text = path.read_text(errors="replace")
        if "__main__" not in text or not re.search(r"^\s*(import|from)\s+tilelang", text, re.M):
            continue
        if only and not any(text in rel for text in only):
            continue
        found.append(path)
    return found


# -- running and classifying ----------------------------------------------------------------
_WRONG = re.compile(r"^(AssertionError|torch\.testing|.*Mismatched elements|.*Tensor-likes are "
                    r"not close|.*not close)", re.M)


def _error_line(output: str) -> str:
    """The first line of the last exception in ``output`` (``--also-compile``'s own lines
    left out)."""
    lines = [line for line in output.rstrip().splitlines()
             if not line.startswith("tw-also-compile: ")]
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback")), default=None)
    if start is None:
        return lines[-1][:200] if lines else ""
    for line in lines[start + 1:]:
        if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", line):
            return line[:200]
    return lines[-1][:200]


_MISSING = re.compile(r"ModuleNotFoundError: No module named '(\w+)")


# what examples print when a check fails without raising
_FAILED = re.compile(r"^.*(❌|✗|Verification FAILED|Validation: FAILED|similarity check "
                     r"failed).*$", re.M)


def classify(rc: int, output: str, checked: bool) -> tuple[str, str]:
    if rc == 0:
        failed = _FAILED.search(output)
        if failed:
            return "wrong", failed.group(0).strip()[:200]
        return ("verified", "") if checked else ("ran (no check)", "")
    if rc < 0 and "Traceback" not in output:  # a signal ended it: name it, not the last line
        name = signal.Signals(-rc).name
        return "runtime error", f"killed by {name}" + (
            " (the host's memory ran out?)" if name == "SIGKILL" else "") + \
            f" after: {_error_line(output)}"
    line = _error_line(output)
    missing = _MISSING.match(line)
    if missing and missing.group(1) not in ("tilewright", "tilelang"):
        return "missing dependency", line
    tail = output[output.rfind("Traceback"):] if "Traceback" in output else output
    if line.startswith("AssertionError") or _WRONG.search(line):
        return "wrong", line
    compiled = any(part in tail for part in ("/tilewright/engine/", "tilewright_cpu",
                                             "tilewright_interp", "/tilewright/jit/kernel.py"))
    frontend = ("tilewright" in line and ("has no " in line or "cannot import" in line)) \
        or "/tilewright/language/" in tail or "KernelError" in line or \
        "ImportError" in line or "ModuleNotFoundError" in line
    if frontend and not compiled:
        return "frontend error", line
    return "runtime error", line


def _run(argv: list, cwd: Path, env: dict, timeout: float) -> tuple[int | None, str]:
    """(exit status or None on timeout, output). The example runs in a session of its own; on
    timeout the whole session is stopped (an autotuner's or a compiler's children too)."""
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        return rc, out.read()


_PROFILE = re.compile(r"^tw-profile: (.*)$", re.M)


COMPILE_ONLY = ("built", "refused", "crashed", "frontend error", "runtime error",
                "none compiled", "missing dependency", "timeout", "not portable")


def classify_compile_only(rc: int, output: str, compiled: list,
                          missing: list) -> tuple[str, str]:
    """``--compile-only``: the example's worst kernel (crashed, refused, built), or why it
    compiled none; a frontend error names the dialect's missing names first."""
    if rc != 0:
        result, line = classify(rc, output, False)
        if result == "frontend error" and missing:
            return result, f"missing T.{', T.'.join(missing)}; {line}"
        if result == "frontend error" or not compiled:
            return (result if result in COMPILE_ONLY else "runtime error"), line
    if not compiled:
        return "none compiled", "it ran to its end without compiling a kernel"
    for status in ("crashed", "refused"):
        first = next((c for c in compiled if c["status"] == status), None)
        if first:
            return status, f"{first['kernel']}: {first['error']}"
    stopped = re.search(r"tw-compile-only: (stopped at the first kernel call.*)", output)
    if rc != 0:  # every kernel built, then the host code failed before a kernel call
        return "built", f"then: {_error_line(output)}"
    return "built", stopped.group(1) if stopped else ""


def run_one(path: Path, examples: Path, work: Path, target: str, timeout: float,
            logs: Path | None, shrink: bool = False, profile: bool = False,
            also_compile: list[str] | None = None, compile_only: list[str] | None = None,
            dialect_names: set[str] | None = None) -> Result:
    rel = str(path.relative_to(examples))
    helpers = local_imports(path)
    source = "\n".join(p.read_text(errors="replace") for p in [path, *helpers])
    missing = []
    if compile_only:
        ported, reason = dialect_reason(source, rel)
        if not ported:  # a portable example is the plain mode's (main leaves it out)
            return Result(rel, "portable" if reason.startswith("portable") else
                          "not portable", reason)
        missing = missing_names(source, dialect_names or set())
    else:
        reason = not_portable(source)
        if reason:
            return Result(rel, "not portable", reason)
    script = work / path.relative_to(examples)
    arguments = SHRINK.get(rel, []) if shrink else []
    env = {**os.environ, "TILEWRIGHT_TARGET": target, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(work / "_shim"), str(script.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    if profile:
        env["TW_PORT_PROFILE"] = str(max(timeout - 5.0, 1.0))
    record = work / "_shim" / "compiled.jsonl"
    record.unlink(missing_ok=True)
    if also_compile:
        env["TW_PORT_ALSO_COMPILE"] = json.dumps(also_compile)
        env["TW_PORT_ALSO_COMPILE_RECORD"] = str(record)
    if compile_only:
        env["TW_PORT_COMPILE_ONLY"] = json.dumps(compile_only)
        env["TW_PORT_COMPILE_RECORD"] = str(record)
        sm = re.search(r"sm_(\d+)(\d)", compile_only[0])
        env["TW_PORT_CAPABILITY"] = f"{sm.group(1)},{sm.group(2)}" if sm else "9,0"
    start = time.monotonic()
    rc, output = _run([sys.executable, script.name, *arguments], script.parent, env, timeout)
    seconds = time.monotonic() - start
    compiled = [json.loads(line) for line in record.read_text().splitlines()] \
        if record.exists() else []
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / (rel.replace("/", "__") + ".log")).write_text(output)
    spent = _PROFILE.findall(output)
    spent = f" [{spent[-1]}]" if spent else ""
    if rc is None:
        return Result(rel, "timeout", f"over {timeout:.0f} s{spent}", seconds, arguments,
                      compiled, missing)
    if compile_only:
        result, detail = classify_compile_only(rc, output, compiled, missing)
    else:
        result, detail = classify(rc, output, bool(CHECKS.search(source)))
    return Result(rel, result, detail + spent, seconds, arguments, compiled, missing)


def prepare(examples: Path, work: Path, dialect: str | None = None) -> None:
    shutil.copytree(examples, work, dirs_exist_ok=True)
    for path in work.rglob("*.py"):
        text = path.read_text(errors="replace")
        ported = port_source(text, dialect)
        if ported != text:
            path.write_text(ported)
    (work / "_shim").mkdir(exist_ok=True)
    (work / "_shim" / "sitecustomize.py").write_text(SHIM)


ORDER = ("verified", "ran (no check)", "wrong", "frontend error", "runtime error",
         "missing dependency", "timeout", "not portable")


def table(results: list[Result]) -> str:
    """The results, one row per example (``*``: run with the :data:`SHRINK` arguments), and
    the counts."""
    width = max([len(r.example) for r in results] + [7]) + 2
    lines = [f"{'example':<{width}}  {'result':<18}  {'s':>6}  first line of the error / reason",
             "-" * (width + 60)]
    for r in results:
        name = r.example + (" *" if r.arguments else "")
        lines.append(f"{name:<{width}}  {r.result:<18}  {r.seconds:6.1f}  {r.detail}")
    counts = {k: sum(r.result == k for r in results) for k in ORDER}
    portable = len(results) - counts["not portable"]
    lines.append("")
    lines.append(", ".join(f"{k}: {v}" for k, v in counts.items() if v))
    if portable:
        ok = counts["verified"] + counts["ran (no check)"]
        lines.append(f"portable: {portable}; ran to the end: {ok} ({100 * ok / portable:.0f}%), "
                     f"verified by their own checks: {counts['verified']} "
                     f"({100 * counts['verified'] / portable:.0f}%)")
    shrunk = sum(bool(r.arguments) for r in results)
    if shrunk:
        lines.append(f"* {shrunk} example(s) ran with smaller sizes given through their own "
                     "command-line arguments (--shrink)")
    return "\n".join(lines)


COMPILED = ("built", "refused", "crashed")


def compile_table(results: list[Result], targets: list[str]) -> str:
    """``--also-compile``: per example and CUDA target, how many of its distinct kernels built,
    were refused (a KernelError) or crashed, the first refusal or crash, and the totals."""
    ran = [r for r in results if r.result != "not portable"]
    width = max([len(r.example) for r in ran] + [7]) + 2
    lines = []
    for target in targets:
        lines += ["", f"CUDA compile, {target}: kernels built / refused / crashed",
                  f"{'example':<{width}}  {'b':>3} {'r':>3} {'c':>3}  first refusal or crash",
                  "-" * (width + 60)]
        totals = dict.fromkeys(COMPILED, 0)
        examples = dict.fromkeys((*COMPILED, "none compiled"), 0)
        for r in ran:
            rows = [c for c in r.compiled if c["target"] == target]
            counts = {k: sum(c["status"] == k for c in rows) for k in COMPILED}
            first = next((c for c in rows if c["status"] == "crashed"), None) or \
                next((c for c in rows if c["status"] == "refused"), None)
            note = f"{first['kernel']}: {first['error']}" if first else ""
            lines.append(f"{r.example:<{width}}  {counts['built']:>3} {counts['refused']:>3} "
                         f"{counts['crashed']:>3}  {note[:160]}")
            for k in COMPILED:
                totals[k] += counts[k]
            worst = "crashed" if counts["crashed"] else "refused" if counts["refused"] else \
                "built" if counts["built"] else "none compiled"
            examples[worst] += 1
        lines.append(f"kernels: {', '.join(f'{k} {v}' for k, v in totals.items())}; examples "
                     f"(worst kernel): {', '.join(f'{k} {v}' for k, v in examples.items())}")
    return "\n".join(lines)


def compile_only_table(results: list[Result], targets: list[str]) -> str:
    """``--compile-only``: one row per example (its result, its kernels built / refused /
    crashed, the first error or the reason), the counts, and the dialect's missing names by
    how many examples use them."""
    width = max([len(r.example) for r in results] + [7]) + 2
    lines = [f"CUDA dialect, compile only ({', '.join(targets)})",
             f"{'example':<{width}}  {'result':<18}  {'b':>3} {'r':>3} {'c':>3}  "
             "first error / reason", "-" * (width + 70)]
    for r in results:
        counts = [sum(c["status"] == k for c in r.compiled) for k in COMPILED]
        lines.append(f"{r.example:<{width}}  {r.result:<18}  {counts[0]:>3} {counts[1]:>3} "
                     f"{counts[2]:>3}  {r.detail[:200]}")
    counts = {k: sum(r.result == k for r in results) for k in COMPILE_ONLY}
    kernels = {k: sum(c["status"] == k for r in results for c in r.compiled) for k in COMPILED}
    lines += ["", "examples: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v),
              "kernels: " + ", ".join(f"{k} {v}" for k, v in kernels.items())]
    uses: dict = {}
    for r in results:
        if r.result != "not portable":
            for name in r.missing:
                uses[name] = uses.get(name, 0) + 1
    if uses:
        ranked = sorted(uses.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("missing names (examples using them): " +
                     ", ".join(f"T.{k} {v}" for k, v in ranked))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", required=True, type=Path,
                        help="a TileLang source tree (its examples/ folder is ported)")
    parser.add_argument("--target", default="cpu", help="cpu, interp, ... (what 'auto' means)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per example")
    parser.add_argument("--only", action="append",
                        help="run only examples whose path contains this text (repeatable)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--logs", type=Path, help="keep each example's output in this folder")
    parser.add_argument("--shrink", action="store_true",
                        help="run the examples of SHRINK with smaller sizes, through their own "
                             "command-line arguments")
    parser.add_argument("--profile", action="store_true",
                        help="say where each example's time goes: start, tilewright's "
                             "autotuning, compilations and kernel calls, the rest (the "
                             "example's own torch code ...)")
    parser.add_argument("--also-compile", action="append", metavar="TARGET",
                        help="also build every kernel an example compiles for this CUDA target "
                             "(e.g. 'cuda -arch=sm_90a'; repeatable): lowered and compiled to "
                             "a cubin with NVRTC, not run; each kernel is recorded as built, "
                             "refused (KernelError) or crashed")
    parser.add_argument("--dialect", choices=["cuda"],
                        help="port the examples that are not portable only for GPU-only APIs "
                             "to this backend's dialect (tilelang.language -> "
                             "tilewright_cuda.language); needs --compile-only")
    parser.add_argument("--compile-only", action="append", metavar="TARGET",
                        help="with --dialect: build each kernel an example compiles for this "
                             "CUDA target (e.g. 'cuda -arch=sm_90a'; repeatable) with NVRTC "
                             "instead of running it; the example stops at its first kernel "
                             "call")
    parser.add_argument("--rerun", type=Path,
                        help="run only the examples this former --json file lists as verified")
    args = parser.parse_args(argv)
    examples = args.checkout / "examples"
    if not examples.is_dir():
        parser.error(f"{examples} is not a folder: --checkout names a TileLang source tree")
    if bool(args.dialect) != bool(args.compile_only):
        parser.error("--dialect cuda and --compile-only TARGET go together: the dialect's "
                     "examples need a GPU to run, so they are only built")
    dialect_names = set(dir(importlib.import_module("tilewright_cuda.language"))) \
        if args.dialect else None
    paths = discover(examples, args.only)
    if args.rerun:
        verified = {r["example"] for r in json.loads(args.rerun.read_text())
                    if r["result"] == "verified"}
        paths = [p for p in paths if str(p.relative_to(examples)) in verified]
    results = []
    with tempfile.TemporaryDirectory(prefix="tw-port-") as tmp:
        work = Path(tmp) / "examples"
        prepare(examples, work, args.dialect)
        for path in paths:
            result = run_one(path, examples, work, args.target, args.timeout, args.logs,
                             args.shrink, args.profile, args.also_compile, args.compile_only,
                             dialect_names)
            if result.result == "portable":
                continue
            results.append(result)
            shrunk = " (shrunk)" if result.arguments else ""
            built = ", ".join(f"{k} {sum(c['status'] == k for c in result.compiled)}"
                              for k in COMPILED) if args.also_compile or args.compile_only \
                else ""
            print(f"{result.example}{shrunk}: {result.result} ({result.seconds:.1f} s) "
                  f"{result.detail}" + (f" [cuda: {built}]" if built else ""),
                  file=sys.stderr, flush=True)
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    if args.compile_only:
        print(compile_only_table(results, args.compile_only))
        return 0
    print(table(results))
    if args.also_compile:
        print(compile_table(results, args.also_compile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
