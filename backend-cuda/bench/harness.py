"""The GPU harness: runs exported bundles on a GPU with torch and cuda-python only.

Run (on the GPU machine, from the repository root):
    PYTHONPATH=core python backend-cuda/bench/harness.py --bundles backend-cuda/bench/bundles \
        --out OUTDIR [--quick] [--only NAME,...]
    PYTHONPATH=core python backend-cuda/bench/harness.py --bundles ... --list   (no GPU needed:
        loads every bundle and checks its metadata against its case; exit status 1 if broken)

First correctness (fresh random inputs, outputs poisoned with NaN, torch references, dtype
tolerances), then timing (CUDA events after warm-up, median), each kernel as a ratio to its
peer measured in the same run: cuBLAS through torch.matmul, torch SDPA, device-to-device copy
bandwidth, torch._scaled_mm for the scaled fp8 GEMMs (with block scales where the build of
torch takes them, else its rowwise form), the float16 torch.matmul of the dequantised weights
for W4A16, the dense torch.matmul (cuBLAS, float16) of the decompressed operand for the 2:4
sparse GEMM (its values and metadata from tilewright.utils.sparse), torch._int_mm for the
int8 GEMM; for attention every SDPA backend torch has is timed and the fastest is the peer.
The W4A16 rows (~10 us a call at decode sizes) are timed as CUDA graphs of back-to-back
calls, theirs and the peer's alike, so that Python's launch overhead stays out of both.
The machine's ceilings are measured too. The rows run in the order ``--only`` gives (a
plan's priority: a run cut short keeps the first), one after another in a worker process
(row_runner.py): a row that runs past ``--timeout`` seconds is stopped, and one that hangs,
crashes or breaks the CUDA context costs only its row (the rest go on in a fresh worker).
Each timing stops after ``--budget`` seconds or 50 runs. Full logs go to OUTDIR after every
row (two files); one short table is printed last.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import json
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path

import check_runner
import row_runner
import targets
from tilewright import sparse
from tilewright.runtime import load, open_bundle
from tilewright.runtime.cuda import kernels_of
from tilewright.testing import assert_close
from tilewright.testing import compare as testing_compare

torch = None  # imported in main(): --list runs without torch's CUDA

LOG: list[str] = []


def log(text: str) -> None:
    LOG.append(text)
    print(text, flush=True)


BUDGET_S = 1.0


def bench(fn, budget_s: float | None = None, max_reps: int = 50) -> float:
    """Median milliseconds of ``fn`` with CUDA events, after warm-up."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    first = start.elapsed_time(end)
    budget_s = BUDGET_S if budget_s is None else budget_s
    reps = max(3, min(max_reps, int(budget_s * 1e3 / max(first, 1e-3))))
    samples = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


ROUNDS = 5


def compare(ours, peer) -> tuple[float, float]:
    """Median milliseconds of ``ours`` and ``peer``, timed in alternating rounds: the GPU's
    clocks drift with its temperature and power over a run, and a peer timed only after ours
    (or before) would carry that drift into the ratio."""
    mine, theirs = [], []
    for _ in range(ROUNDS):
        mine.append(bench(ours, BUDGET_S / ROUNDS))
        theirs.append(bench(peer, BUDGET_S / ROUNDS))
    return statistics.median(mine), statistics.median(theirs)


def poisoned_call(kernel, inputs):
    """Run a bundle with its outputs pre-filled with NaN (integer ones with their type's
    largest value); returns the outputs."""
    specs = kernel.signature.params
    symbols = {}
    it = iter(inputs)
    full, outs = [], []
    ins = [next(it) if not p.is_output else None for p in specs]
    for spec, arg in zip(specs, ins):
        if arg is not None:
            for want, got in zip(spec.shape, arg.shape):
                if isinstance(want, str):
                    symbols.setdefault(want, got)
    for spec, arg in zip(specs, ins):
        if arg is None:
            shape = [d if isinstance(d, int) else int(eval(d, {}, dict(symbols)))
                     for d in spec.shape]
            dtype = getattr(torch, spec.dtype)
            poison = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max
            arg = torch.full(shape, poison, dtype=dtype, device="cuda")
            outs.append(arg)
        full.append(arg)
    kernel.function(*full)
    return outs, full


def where_wrong(got, want, rtol: float, atol: float, tile: tuple[int, int]) -> dict | None:
    """Where a matrix output is wrong, by the output tiles of a block (``tile``), for a
    failure a rerun cannot reproduce here: None when every element is within
    ``atol + rtol |want|``; else the count, the tiles wholly / partly wrong, the wrong
    elements' positions inside a tile (by 16 rows and 8 columns) and the worst element."""
    err = (got.float() - want.float()).abs()
    bad = ~(err <= atol + rtol * want.float().abs())  # NaN counts as wrong
    if not bool(bad.any()):
        return None
    (tm, tn), (m, n) = tile, bad.shape
    per_tile = bad[:m // tm * tm, :n // tn * tn].reshape(m // tm, tm, n // tn, tn)
    share = per_tile.float().mean(dim=(1, 3))
    inside = per_tile.sum(dim=(0, 2))
    worst = int(err.nan_to_num(float("inf")).argmax())
    return {"wrong": int(bad.sum()), "of": bad.numel(), "tiles": share.numel(),
            "tiles_all_wrong": int((share == 1).sum()), "tiles_partly": int(
                ((share > 0) & (share < 1)).sum()),
            "by_16_rows": inside.reshape(tm // 16, 16, -1).sum(dim=(1, 2)).tolist(),
            "by_8_cols": inside.reshape(-1, tn // 8, 8).sum(dim=(0, 2)).tolist(),
            "worst": [worst // n, worst % n, float(got.flatten()[worst]),
                      float(want.flatten()[worst])]}


def tolerance(dtype) -> dict:
    return {torch.float16: {"rtol": 2e-2, "atol": 2e-2}, torch.bfloat16: {"rtol": 5e-2,
            "atol": 5e-2}, torch.float32: {"rtol": 1e-4, "atol": 1e-4}}[dtype]


def run_case(name: str, kernel, case: dict, ceilings: dict) -> dict:
    dtype = getattr(torch, case["dtype"])
    kind = case["kind"]
    torch.manual_seed(0)
    if kind == "gemm":
        m, n, k = case["M"], case["N"], case["K"]
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        # stream-K's counters (case "tickets", int32): zero before the first call, and each
        # call leaves them zero
        counters = [torch.zeros([int(d) for d in p.shape], dtype=torch.int32, device="cuda")
                    for p in kernel.signature.params[2:-1]]
        (c,), full = poisoned_call(kernel, [a, b, *counters])
        ref = (a.float() @ b.float()).to(dtype)
        tol = tolerance(dtype)
        torch.testing.assert_close(c.float(), ref.float(), rtol=tol["rtol"],
                                   atol=tol["atol"] * k ** 0.5)
        ours, peer = compare(lambda: kernel.function(*full), lambda: torch.matmul(a, b))
        if counters:  # the timed calls left the counters at 0, and one more call (its
            # partial sums added in block order, whichever block came last) gives the same bits
            again = torch.full_like(c, float("nan"))
            kernel.function(*full[:-1], again)
            torch.cuda.synchronize()
            if any(x.any().item() for x in counters) or not torch.equal(again, c):
                raise AssertionError("stream-K: the counters are not back to 0 after the "
                                     "timed calls, or a later call differs from the first")
        flops = 2 * m * n * k
        return {"ours_ms": ours, "peer_ms": peer, "peer": "torch.matmul (cuBLAS)",
                "ours_tflops": flops / ours * 1e-9, "ratio": peer / ours}
    if kind == "attention":
        b_, h, s, d = case["batch"], case["heads"], case["seq"], case["dim"]
        q, k_, v = (torch.randn(b_, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
        (o,), full = poisoned_call(kernel, [q, k_, v])
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k_, v))
        ref = torch.nn.functional.scaled_dot_product_attention(qt.float(), kt.float(),
                                                               vt.float()).transpose(1, 2)
        torch.testing.assert_close(o.float(), ref, **tolerance(dtype))
        qc, kc, vc = (t.contiguous() for t in (qt, kt, vt))
        backend, peer_fn = best_sdpa(qc, kc, vc)
        ours, peer = compare(lambda: kernel.function(*full), peer_fn)
        flops = 4 * b_ * h * s * s * d
        return {"ours_ms": ours, "peer_ms": peer, "peer": f"torch SDPA ({backend})",
                "ours_tflops": flops / ours * 1e-9, "ratio": peer / ours}
    if kind == "add":
        a = torch.randn(case["M"], case["N"], device="cuda", dtype=dtype)
        b = torch.randn_like(a)
        (c,), full = poisoned_call(kernel, [a, b])
        torch.testing.assert_close(c, a + b)
        ours = bench(lambda: kernel.function(*full))
        moved = 3 * a.numel() * a.element_size()
        tbps = moved / ours * 1e-9
        return {"ours_ms": ours, "peer_ms": None, "peer": "d2d copy bandwidth",
                "ours_tbps": tbps, "ratio": tbps / ceilings["copy_tbps"]}
    if kind == "silu":
        x = torch.randn(case["M"], case["N"], device="cuda", dtype=dtype)
        (y,), full = poisoned_call(kernel, [x])
        torch.testing.assert_close(y, torch.nn.functional.silu(x.float()).to(dtype),
                                   **tolerance(dtype))
        ours, peer = compare(lambda: kernel.function(*full),
                             lambda: torch.nn.functional.silu(x))
        tbps = 2 * x.numel() * x.element_size() / ours * 1e-9
        return {"ours_ms": ours, "peer_ms": peer, "peer": "torch silu", "ours_tbps": tbps,
                "copy_ratio": tbps / ceilings["copy_tbps"], "ratio": peer / ours}
    if kind in ("softmax", "rmsnorm"):
        x = torch.randn(case["M"], case["N"], device="cuda", dtype=dtype)
        if kind == "softmax":
            (y,), full = poisoned_call(kernel, [x])
            torch.testing.assert_close(y, torch.softmax(x, 1), **tolerance(dtype))
            peer_fn = lambda: torch.softmax(x, 1)
            moved = 2 * x.numel() * x.element_size()
        else:
            w = torch.randn(case["N"], device="cuda", dtype=dtype)
            (y,), full = poisoned_call(kernel, [x, w])
            ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + case["eps"]) * w
            torch.testing.assert_close(y, ref, **tolerance(dtype))
            peer_fn = lambda: torch.nn.functional.rms_norm(x, (case["N"],), w, case["eps"])
            moved = 2 * x.numel() * x.element_size()
        ours, peer = compare(lambda: kernel.function(*full), peer_fn)
        return {"ours_ms": ours, "peer_ms": peer, "peer": f"torch {kind}",
                "ours_tbps": moved / ours * 1e-9, "ratio": peer / ours}
    if kind == "fp8_gemm":
        return fp8_gemm_row(kernel, case)
    if kind == "w4a16":
        return w4a16_row(kernel, case)
    if kind == "gemm_sp":
        return gemm_sp_row(kernel, case)
    if kind == "int8_gemm":
        return int8_gemm_row(kernel, case)
    raise ValueError(f"{name}: unknown case kind {kind!r}")


FP8_GROUP = 128  # the block layout's scale granularity (examples/gemm_fp8_scaled.py)


def fp8_scales(layout: str, m: int, n: int, k: int) -> tuple:
    """Random positive float32 scales for A [m, k] and B [n, k] in ``layout``."""
    kg, ng = -(-k // FP8_GROUP), -(-n // FP8_GROUP)
    shapes = {"tensor": ((1,), (1,)), "token": ((m,), (n,)), "block": ((m, kg), (ng, kg))}
    return tuple(torch.rand(s, device="cuda") * 0.01 + 0.001 for s in shapes[layout])


def fp8_expand(scale, rows: int, k: int, layout: str, blocks: bool):
    """A scale tensor as one float32 factor per element of its [rows, k] operand."""
    if layout == "tensor":
        return scale.expand(rows, k)
    if layout == "token":
        return scale[:, None].expand(rows, k)
    wide = scale.repeat_interleave(FP8_GROUP, 1)[:, :k]
    return wide.repeat_interleave(FP8_GROUP, 0)[:rows] if blocks else wide


def fp8_peer(a, b, sa, sb, layout: str):
    """torch._scaled_mm with the same scales where torch takes them (block scales where this
    torch build accepts them), else with per-row scales of the same cost; (call, its name)."""
    mm = torch._scaled_mm
    if layout == "tensor":
        return (lambda: mm(a, b.t(), sa.reshape(()), sb.reshape(()), out_dtype=torch.bfloat16),
                "torch._scaled_mm (per-tensor)")
    rows_a = torch.ones(a.shape[0], 1, device="cuda")
    rows_b = torch.ones(1, b.shape[0], device="cuda")
    rowwise = (lambda: mm(a, b.t(), rows_a if layout == "block" else sa[:, None],
                          rows_b if layout == "block" else sb[None, :],
                          out_dtype=torch.bfloat16), "torch._scaled_mm (rowwise)")
    if layout == "token":
        return rowwise
    try:  # DeepSeek-V3 blocks: A 1x128, B 128x128 (torch lays B's scales out transposed)
        block = lambda: mm(a, b.t(), sa, sb.t(), out_dtype=torch.bfloat16)  # noqa: E731
        block()
        return block, "torch._scaled_mm (1x128 / 128x128 blocks)"
    except (RuntimeError, ValueError) as exc:
        log(f"  torch._scaled_mm takes no block scales here ({str(exc).splitlines()[0][:100]});"
            " the peer is its rowwise form")
        return rowwise[0], "torch._scaled_mm (rowwise; blocks unavailable)"


def fp8_gemm_row(kernel, case: dict) -> dict:
    """The scaled fp8 GEMM against the float32 product of the dequantised operands, timed
    against torch._scaled_mm."""
    m, n, k, layout = case["M"], case["N"], case["K"], case["layout"]
    fp8 = getattr(torch, case["dtype"])
    a = torch.randn(m, k, device="cuda").to(fp8)
    b = torch.randn(n, k, device="cuda").to(fp8)
    sa, sb = fp8_scales(layout, m, n, k)
    (c,), full = poisoned_call(kernel, [a, b, sa, sb])
    ref = (a.float() * fp8_expand(sa, m, k, layout, False)) @ \
        (b.float() * fp8_expand(sb, n, k, layout, True)).T
    # Per-tensor and per-token scales leave the whole sum to the fp8 tensor cores'
    # accumulator (about 14 bits kept); block scales add each k-block's sum in float32.
    accum = "float32" if layout == "block" else "fp8_tensor_core"
    rows = slice(None, None, max(1, m // 1024))  # 1024 rows: the float64 comparison's cost
    mine = assert_close(c[rows], ref[rows], reduction_length=k, accum_dtype=accum)
    peer_fn, peer_name = fp8_peer(a, b, sa, sb, layout)
    theirs = testing_compare(peer_fn()[rows], ref[rows], reduction_length=k, accum_dtype=accum)
    ours, peer = compare(lambda: kernel.function(*full), peer_fn)
    return {"ours_ms": ours, "peer_ms": peer, "peer": peer_name,
            "ours_tflops": 2 * m * n * k / ours * 1e-9, "ratio": peer / ours,
            "max_error": mine.max_abs_error, "peer_max_error": theirs.max_abs_error,
            "tolerance": mine.tolerance.why}


def w4a16_row(kernel, case: dict) -> dict:
    """The W4A16 GEMM against the float16 torch.matmul of its dequantised weights (the
    issue's peer), checked against that product."""
    m, n, k, group = case["M"], case["N"], case["K"], case["group"]
    dtype = getattr(torch, case["dtype"])
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    q = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8)
    scales = (torch.rand(n, k // group, device="cuda") * 0.02 + 0.005).to(dtype)
    zeros = torch.randint(0, 16, (n, k // group), device="cuda").to(dtype)
    # option ticket_combine's counters (one per output tile, int32): zero before the first
    # call, and each call leaves them zero
    counters = [torch.zeros([int(d) for d in p.shape], dtype=torch.int32, device="cuda")
                for p in kernel.signature.params[4:-1]]
    (c,), full = poisoned_call(kernel, [a, q, scales, zeros, *counters])
    w = w4a16_weights(q, scales, zeros, bool(case["config"].get("register_w")))
    ref = a.float() @ w.float().T
    torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().mean().item())
    wt = w.T
    # a decode-sized call takes ~10 us on the GPU, as long as its Python launch: timed as
    # CUDA graphs of GRAPH_CALLS back-to-back calls, ours and the peer alike (the ratio
    # with one launch per timed call, as the other rows are timed, is kept beside it)
    eager = compare(lambda: kernel.function(*full), lambda: torch.matmul(a, wt))
    try:
        ours, peer = (t / GRAPH_CALLS for t in compare(
            graphed(lambda: kernel.function(*full)), graphed(lambda: torch.matmul(a, wt))))
        timing = f"CUDA graphs of {GRAPH_CALLS} back-to-back calls"
    except RuntimeError as exc:  # no graph capture here: the launches' overhead stays in
        log(f"  CUDA graph capture failed ({str(exc).splitlines()[0][:100]}); timed eagerly")
        (ours, peer), timing = eager, "one launch per timed call"
    if counters:  # after every timed call the counters are back to 0, and one more call
        # (its sums in slice order, whichever block came last) gives the first one's bits
        again = torch.full_like(c, float("nan"))
        kernel.function(*full[:-1], again)
        torch.cuda.synchronize()
        if any(x.any().item() for x in counters) or not torch.equal(again, c):
            raise AssertionError("ticket_combine: the counters are not back to 0 after the "
                                 "timed calls, or a later call differs from the first")
    moved = q.numel() + 2 * (a.numel() + c.numel() + 2 * scales.numel())
    return {"ours_ms": ours, "peer_ms": peer, "peer": "torch.matmul of the float16 weights",
            "ours_tbps": moved / ours * 1e-9, "ratio": peer / ours, "timing": timing,
            "eager_ms": list(eager), "eager_ratio": eager[1] / eager[0]}


def w4a16_weights(q, scales, zeros, wgmma_order: bool):
    """The weights [N, K] that W4A16's codes ``q`` [N, K / 2], scales and zero points stand
    for; ``wgmma_order``: the codes are in the order option register_w reads
    (examples/gemm_w4a16.py, ``wgmma_order``: in each 16 bytes, column 8 s + 2 t + h is
    nibble s + 4 h of word t)."""
    n, half = q.shape
    group = 2 * half // scales.shape[1]
    codes = torch.stack([q & 15, q >> 4], dim=-1)
    if wgmma_order:
        codes = codes.reshape(n, half // 16, 4, 2, 4).permute(0, 1, 4, 2, 3)
    codes = codes.reshape(n, 2 * half).to(scales.dtype)
    return (codes - zeros.repeat_interleave(group, 1)) * scales.repeat_interleave(group, 1)


GRAPH_CALLS = 20


def graphed(fn):
    """A call replaying ``fn`` called ``GRAPH_CALLS`` times back to back, captured as one CUDA
    graph (after a warm-up call outside it): its time over ``GRAPH_CALLS`` is one call's
    without the Python launch overhead. RuntimeError when the capture fails."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    torch.cuda.synchronize()
    return graph.replay


def gemm_sp_row(kernel, case: dict) -> dict:
    """The 2:4 sparse GEMM on the kept values and metadata of a random 2:4 sparse A, checked
    against and timed beside the dense torch.matmul (cuBLAS) of A itself."""
    from tilewright.utils.sparse import compress, randn_semi_sparse

    m, n, k = case["M"], case["N"], case["K"]
    dtype = getattr(torch, case["dtype"])
    a = randn_semi_sparse(m, k, dtype, device="cuda")
    values, meta = compress(a, getattr(torch, case["e_dtype"]))
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    (c,), full = poisoned_call(kernel, [values, meta, b])
    tol = tolerance(dtype)
    wrong = where_wrong(c, a.float() @ b.float(), tol["rtol"], tol["atol"] * k ** 0.5,
                        (case["config"]["block_M"], case["config"]["block_N"]))
    if wrong is not None:
        raise AssertionError(f"wrong elements: {json.dumps(wrong)}")
    ours, peer = compare(lambda: kernel.function(*full), lambda: torch.matmul(a, b))
    return {"ours_ms": ours, "peer_ms": peer, "peer": "torch.matmul of dense A (cuBLAS)",
            "ours_tflops": 2 * m * n * k / ours * 1e-9, "ratio": peer / ours}


def int8_gemm_row(kernel, case: dict) -> dict:
    """The int8 GEMM (A [M, K], B [N, K], int32 C) against torch._int_mm of the same
    operands (cuBLASLt's int8 GEMM, B column-major as it takes it), which must match exactly,
    and timed beside it."""
    m, n, k = case["M"], case["N"], case["K"]
    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
    (c,), full = poisoned_call(kernel, [a, b])
    bt = b.t()
    ref = torch._int_mm(a, bt)
    if not torch.equal(c, ref):
        wrong = (c != ref).sum().item()
        raise AssertionError(f"{wrong} of {c.numel()} int32 outputs differ from torch._int_mm")
    ours, peer = compare(lambda: kernel.function(*full), lambda: torch._int_mm(a, bt))
    return {"ours_ms": ours, "peer_ms": peer, "peer": "torch._int_mm (cuBLASLt int8)",
            "ours_tflops": 2 * m * n * k / ours * 1e-9, "ratio": peer / ours}  # TOPS


def best_sdpa(q, k, v):
    """The fastest of torch's SDPA backends on these inputs: (backend, a call of it)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # an old torch: its default choice only
        return "default", lambda: sdpa(q, k, v)
    times, calls = {}, {}
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue

        def call(backend=backend):
            with sdpa_kernel(backend):
                return sdpa(q, k, v)

        try:
            times[name.lower()] = bench(call, BUDGET_S / ROUNDS)
            calls[name.lower()] = call
        except RuntimeError as exc:  # not available for these inputs or this build
            log(f"  SDPA {name.lower()}: unavailable ({str(exc).splitlines()[0][:100]})")
    if not times:
        return "default", lambda: sdpa(q, k, v)
    log(f"  SDPA backends (ms): {json.dumps(times)}")
    name = min(times, key=times.get)
    return name, calls[name]


def ceilings() -> dict:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = bench(lambda: torch.matmul(a, b))
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    cp = bench(lambda: dst.copy_(src))
    out = {"bf16_matmul_tflops": 2 * n ** 3 / mm * 1e-9, "copy_tbps": 2 * src.numel() / cp * 1e-9}
    return out


def expected_params(case: dict) -> list[tuple]:
    """(dtype, shape, is_output) of each kernel parameter a case's kind implies."""
    dt, kind = case["dtype"], case["kind"]
    if kind == "gemm":  # stream-K: a counter per tile of the last wave ("tickets")
        m, n, k = case["M"], case["N"], case["K"]
        return [(dt, [m, k], False), (dt, [k, n], False),
                *([("int32", [case["tickets"]], False)] if case.get("tickets") else []),
                (dt, [m, n], True)]
    if kind == "attention":
        shape = [case["batch"], case["seq"], case["heads"], case["dim"]]
        return [(dt, shape, False)] * 3 + [(dt, shape, True)]
    if kind == "add":
        shape = [case["M"], case["N"]]
        return [(dt, shape, False)] * 2 + [(dt, shape, True)]
    if kind in ("softmax", "silu"):
        return [(dt, [case["M"], case["N"]], False), (dt, [case["M"], case["N"]], True)]
    if kind == "rmsnorm":
        return [(dt, [case["M"], case["N"]], False), (dt, [case["N"]], False),
                (dt, [case["M"], case["N"]], True)]
    if kind == "fp8_gemm":
        m, n, k = case["M"], case["N"], case["K"]
        kg, ng = -(-k // FP8_GROUP), -(-n // FP8_GROUP)
        sa, sb = {"tensor": ([1], [1]), "token": ([m], [n]),
                  "block": ([m, kg], [ng, kg])}[case["layout"]]
        return [(dt, [m, k], False), (dt, [n, k], False), ("float32", sa, False),
                ("float32", sb, False), (case["out_dtype"], [m, n], True)]
    if kind == "int8_gemm":
        m, n, k = case["M"], case["N"], case["K"]
        return [("int8", [m, k], False), ("int8", [n, k], False), ("int32", [m, n], True)]
    if kind == "gemm_sp":
        m, n, k = case["M"], case["N"], case["K"]
        factor = sparse.e_factor(dt, case["e_dtype"])
        return [(dt, [m, k // 2], False), (case["e_dtype"], [m, k // factor], False),
                (dt, [k, n], False), (case["config"].get("out_dtype", "float32"), [m, n], True)]
    if kind == "w4a16":
        m, n, k, groups = case["M"], case["N"], case["K"], case["K"] // case["group"]
        config = case["config"]  # option ticket_combine: a counter per output tile
        tiles = -(-m // config.get("block_M", 1)) * -(-n // config.get("block_N", 1))
        return [(dt, [m, k], False), ("uint8", [n, k // 2], False), (dt, [n, groups], False),
                (dt, [n, groups], False),
                *([("int32", [tiles], False)] if config.get("ticket_combine") else []),
                (dt, [m, n], True)]
    raise ValueError(f"unknown case kind {kind!r}")


def check_bundle(path: Path) -> list[str]:
    """What is wrong with a bundle, without a GPU: it loads, its files are there, its
    signature is what its case computes, it is built for sm_90a without spills. Empty when
    fine."""
    problems = []
    try:
        bundle = open_bundle(path, required=("case",))
        case = bundle.json("case")
        kernel = load(path)
        if case["kind"] == "check":
            problems += check_arguments(check_runner.check_data(bundle),
                                        kernel.signature.params)
        else:
            want = expected_params(case)
            got = [(p.dtype, list(p.shape), p.is_output) for p in kernel.signature.params]
            if got != want:
                problems.append(f"signature {got} is not the case's {want}")
        launch = kernel.function.launch
        if launch.get("arch") != "sm_90a":
            problems.append(f"built for {launch.get('arch')}, not sm_90a")
        if len(kernel.function.cubin) < 1024:
            problems.append("the cubin is empty or truncated")
        build = case.get("build", {})
        if build.get("spill_bytes"):
            problems.append(f"{build['spill_bytes']} bytes of register spills")
        for k in kernels_of(launch):
            if int(k.get("dynamic_smem_bytes", 0)) > 227 * 1024:
                problems.append(f"{k['entry']}: {k['dynamic_smem_bytes']} B of shared memory "
                                "> 227 KB")
    except Exception as exc:  # noqa: BLE001 - report every broken bundle, not the first
        problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def check_arguments(data: dict, params) -> list[str]:
    """A check's stored arguments (``data``, its ``check.pt``) fit its kernel's parameters
    (``ParamSpec``s): one per parameter, of the dtype the compiled kernel takes (a packed
    4-bit tensor one value a byte), of its shape where the shape is constant, a number for a
    scalar; every run has an expected value per output; only outputs are compared sorted."""
    problems = []
    for r, run in enumerate(data["runs"]):
        if len(run["args"]) != len(params):
            problems.append(f"run {r}: {len(run['args'])} arguments for {len(params)} "
                            "parameters")
            continue
        for arg, p in zip(run["args"], params):
            if p.kind != "tensor":
                if p.dtype == "handle" and hasattr(arg, "data_ptr"):
                    continue  # a T.ptr address: the tensor there (on the GPU when run)
                if not isinstance(arg, (int, float)) or isinstance(arg, bool):
                    problems.append(f"run {r}: argument {p.name} is {type(arg).__name__}, "
                                    f"the kernel takes a scalar of dtype {p.dtype}")
                continue
            # as the compiled kernel takes it: a packed 4-bit tensor one value a byte
            shape = [d if isinstance(d, int) else s for d, s in zip(p.shape, arg.shape)]
            if str(arg.dtype).removeprefix("torch.") != p.held_dtype or \
                    list(arg.shape) != shape:
                problems.append(f"run {r}: argument {p.name} is {arg.dtype} "
                                f"{list(arg.shape)}, the kernel takes {p.held_dtype} "
                                f"{list(p.shape)}")
        if len(run["outputs"]) != len(run["expected"]) or not run["outputs"]:
            problems.append(f"run {r}: {len(run['outputs'])} outputs, "
                            f"{len(run['expected'])} expected values")
        for position, order in run.get("unordered", {}).items():
            if position not in run["outputs"] or order not in check_runner.ORDERS:
                problems.append(f"run {r}: unordered output {position} ({order!r}) is not an "
                                f"output compared sorted ({', '.join(check_runner.ORDERS)})")
    return problems


def _case(path: Path) -> dict:
    """A bundle's case description, {} when the bundle cannot be opened (check_bundle says
    why)."""
    try:
        return open_bundle(path).json("case")
    except Exception:  # noqa: BLE001 - the listing goes on; the problem is reported
        return {}


def is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


def chosen(names, only: list[str]) -> list[str]:
    """Those of ``names`` that ``only`` picks, in its order (a plan's priority), once each: a
    name, or a pattern (``fnmatch``: ``conformance-*``) picking its matches by name; every
    name, sorted, when ``only`` is empty."""
    names = sorted(names)
    if not only:
        return names
    picked = (fnmatch.filter(names, item) if is_pattern(item) else
              [item] if item in names else [] for item in only)
    return list(dict.fromkeys(name for group in picked for name in group))


def bundles_in(root: Path, only: list[str]) -> list[Path]:
    """The bundles under ``root`` that ``only`` picks (:func:`chosen`), in its order."""
    built = [p.name for p in root.iterdir() if (p / "manifest.json").exists()]
    return [root / name for name in chosen(built, only)]


def list_bundles(root: Path, only: list[str]) -> int:
    """Check every bundle under ``root`` (and its correctness checks, ``root/checks``) without
    a GPU; print one line each; 1 when one is broken or there are none."""
    paths = bundles_in(root, only)
    checks = root / "checks"
    if checks.is_dir():
        paths += bundles_in(checks, only)
        index = json.loads((checks / "index.json").read_text())
        counts: dict = {}
        for entry in index.values():
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        print(f"checks: {json.dumps(counts)} (index.json)")
        missing = [n for n in chosen(index, only) if index[n]["status"] == "bundled" and
                   not (checks / n / "manifest.json").exists()]
        if missing:
            print(f"checks missing their bundles: {', '.join(missing)}")
            return 1
    if not paths:
        print(f"no bundles in {root}")
        return 1
    bad = 0
    total = 0
    for path in paths:
        size = sum(f.stat().st_size for f in path.iterdir())
        total += size
        problems = check_bundle(path)
        bad += bool(problems)
        case = _case(path)
        sizes = {k: v for k, v in case.items() if k not in ("kind", "config", "build",
                                                         "pass_configs", "group")}
        print(f"{path.name:48s} {'BROKEN' if problems else 'ok':6s} {size / 1024:6.0f} KiB "
              f"{json.dumps(sizes)} {json.dumps(case.get('config', {}))}")
        for problem in problems:
            print(f"    {problem}")
    print(f"{len(paths)} bundles, {total / 2 ** 20:.1f} MiB, {bad} broken")
    return 1 if bad else 0


def child(args) -> int:
    """The measurements ``--child NAME[,NAME...]`` names, in this process and in order: the
    ceilings (``ceilings``) or a bundle. Prints ``ROW <name>``, its log lines, then ``RESULT
    <json>`` for each (row_runner.py reads them); stops after a row that lost the CUDA
    context (every later call in this process would fail: the parent goes on in a fresh
    one)."""
    global torch
    import torch as torch_module

    torch = torch_module
    globals()["BUDGET_S"] = args.budget
    ceil = json.loads(args.ceilings)
    for name in args.child.split(","):
        print(row_runner.ROW + name, flush=True)
        result = measure(args.bundles / name, ceil)
        if name == "ceilings":
            ceil = result
        print(row_runner.RESULT + json.dumps({"name": name, **result}), flush=True)
        if result.get("fatal"):
            return check_runner.CONTEXT_LOST
    return 0


def measure(path: Path, ceil: dict) -> dict:
    """One row's result (``status`` ok, or FAILED and why, ``fatal`` when the context is
    lost): the machine's ceilings (``path`` named ``ceilings``) or a bundle's measurement;
    the row's tensors are freed before the next."""
    try:
        if path.name == "ceilings":
            props = torch.cuda.get_device_properties(0)
            result = {**ceilings(), "gpu": f"{props.name} ({props.multi_processor_count} SMs)",
                      "torch": torch.__version__, "cuda": torch.version.cuda}
        else:
            bundle = open_bundle(path)
            case = bundle.json("case")
            # the target the row competes for, and which kernel it was (targets.py)
            result = {**run_case(path.name, load(path), case, ceil),
                      "case": targets.identity(case),
                      "binary": bundle.manifest["files"]["binary"]["sha256"][:16]}
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported as this bundle's row
        log(traceback.format_exc().rstrip())
        result = row_runner.failed(f"{type(exc).__name__}: {str(exc)[:80]}")
    gc.collect()
    if not check_runner.context_alive(torch):
        return {**result, "fatal": True}
    torch.cuda.empty_cache()
    return result


def device_checks(args, only: list[str]) -> bool:
    """The correctness checks (BUNDLES/checks) under compute-sanitizer: writes checks.json,
    checks.md (the table) and sanitizer.log to OUT, logs a summary and the rows that are not
    ok and clean; True when every bundled check passed clean."""
    root = args.bundles / "checks"
    index = json.loads((root / "index.json").read_text())
    index = {n: index[n] for n in chosen(index, only)}
    for name, entry in index.items():  # a plan carries the checks it names, not every one
        if entry["status"] == "bundled" and not (root / name / "manifest.json").exists():
            index[name] = {**entry, "status": "not carried",
                           "reason": f"no bundle {root / name} on this machine"}
    cases = {n: open_bundle(root / n).json("case") for n, e in index.items()
             if e["status"] == "bundled"}
    started = time.perf_counter()
    sanitizer = args.sanitizer or check_runner.find_sanitizer()
    refusal = check_runner.sanitizer_refusal(sanitizer) if sanitizer else "none found"
    if refusal:
        sanitizer = None
    log(f"# checks: {len(index)} ({len(cases)} bundled), plainly"
        f"{', then under ' + sanitizer if sanitizer else ' only: NOT sanitized, ' + refusal}")
    now = time.monotonic()
    run = check_runner.process_runner(
        Path(__file__).resolve(), root, sanitizer, args.batch_timeout,
        None if args.checks_stop is None else now + args.checks_stop)
    tools = tuple(t for t in args.tools.split(",") if t) if sanitizer else ()

    def save(verdicts: check_runner.Verdicts) -> list[dict]:  # after every batch, and last
        rows = check_runner.rows(index, verdicts)
        (args.out / "checks.md").write_text(check_runner.table(rows) + "\n")
        (args.out / "checks.json").write_text(json.dumps(rows, indent=1))
        (args.out / "sanitizer.log").write_text("\n".join(verdicts.logs) + "\n")
        return rows

    verdicts = check_runner.sanitize_all(run, cases, tools, args.batch,
                                         now + args.checks_budget, save)
    rows = save(verdicts)
    for r in rows:
        if check_runner.trouble(r):
            log(f"  {r['check']} {r['dtype']}: {r['result']} {r['error']}; {r['sanitizer']}; "
                f"{r.get('detail', '')[:200]}")
    log(f"{check_runner.table(rows).splitlines()[-1]}; {verdicts.processes} processes, "
        f"{time.perf_counter() - started:.0f} s (table: checks.md)")
    (args.out / "harness.log").write_text("\n".join(LOG) + "\n")
    return check_runner.healthy(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, help="folder for the logs (not with --list)")
    parser.add_argument("--only", default="",
                        help="comma-separated bundle names or patterns (conformance-*), in the "
                             "order to run them")
    parser.add_argument("--quick", action="store_true",
                        help="the small sizes (BUNDLES/quick), a smoke run")
    parser.add_argument("--list", action="store_true",
                        help="check every bundle's metadata (no GPU) and exit")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help="seconds of timed runs per measurement (at most 50 runs)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one bundle may take (its own process) before it is "
                             "killed and reported as a hang")
    parser.add_argument("--checks", choices=["all", "none", "only"], default="all",
                        help="the correctness checks (BUNDLES/checks) under compute-sanitizer "
                             "before the timings, not at all, or alone")
    parser.add_argument("--batch", type=int, default=32,
                        help="checks per sanitized process")
    parser.add_argument("--checks-budget", type=float, default=300.0,
                        help="seconds after which the sanitizers stop starting batches "
                             "(the plain run that gives the results covers every check)")
    parser.add_argument("--checks-stop", type=float, default=None,
                        help="seconds after which a sanitized process still running is stopped "
                             "(its checks: not run, time budget) so the tables are written "
                             "within a caller's time limit; default: no such limit")
    parser.add_argument("--batch-timeout", type=float, default=300.0,
                        help="seconds one process over a batch of checks may take before it "
                             "is killed (the check it was on is pinned, the rest go on)")
    parser.add_argument("--tools", default=",".join(check_runner.TOOLS),
                        help="the compute-sanitizer tools to run after the plain run, in order "
                             "(comma-separated; '' for none)")
    parser.add_argument("--sanitizer", default=None,
                        help="compute-sanitizer to use (default: on PATH or in /usr/local/cuda)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--run-checks", help=argparse.SUPPRESS)
    parser.add_argument("--ceilings", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = args.bundles / "quick" if args.quick else args.bundles
    only = list(dict.fromkeys(s for s in args.only.split(",") if s))  # in order, once each
    if args.list:
        return list_bundles(root, only)
    if args.run_checks:
        return check_runner.run_checks(args.bundles, args.run_checks.split(","))
    if args.child:
        return child(args)
    if args.out is None:
        parser.error("--out is required unless --list is given")
    signal.signal(signal.SIGTERM, check_runner.stop_groups)  # a plan step's time limit
    args.out.mkdir(parents=True, exist_ok=True)
    checked = True
    if args.checks != "none" and (args.bundles / "checks").is_dir():
        checked = device_checks(args, only)
    if args.checks == "only":
        return 0 if checked else 1
    started = time.perf_counter()
    rows = []

    def save() -> None:  # after every row: a run cut short still leaves its logs
        (args.out / "harness.log").write_text("\n".join(LOG) + "\n")
        (args.out / "results.json").write_text(json.dumps(
            {"ceilings": ceil, "results": dict(rows)}, indent=1))

    names = [p.name for p in bundles_in(root, only)]
    checks = args.bundles / "checks"
    for name in only:  # a name that is neither a row nor a check is a plan's mistake
        if not is_pattern(name) and name not in names and not (checks / name).is_dir():
            log(f"{name}: not built (no bundle {root / name})")
            rows.append((name, row_runner.failed("not built")))
    log(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, bundles {root}, {len(names)} rows in "
        f"order, in worker processes (timeout {args.timeout:.0f} s a row)")
    ceil: dict = {}

    def command(pending: list[str]) -> list[str]:  # the ceilings, once known, go along
        return [sys.executable, str(Path(__file__).resolve()), "--bundles", str(root),
                "--budget", str(args.budget), "--ceilings", json.dumps(ceil),
                "--child", ",".join(pending)]

    for name, result in row_runner.run_rows(command, ["ceilings", *names], args.timeout, log):
        if name == "ceilings":
            ceil.update(result)
            if "copy_tbps" not in ceil:
                log(f"ceilings: {json.dumps(ceil)}")
                save()
                return 1
            log(f"{ceil['gpu']}, torch {ceil['torch']}, CUDA {ceil['cuda']}; ceilings: torch "
                f"bf16 matmul 8192^3 {ceil['bf16_matmul_tflops']:.0f} TFLOP/s, d2d copy "
                f"{ceil['copy_tbps']:.2f} TB/s")
            continue
        log(f"{name}: {json.dumps(result)}")
        rows.append((name, result))
        save()
    log(f"total {time.perf_counter() - started:.0f} s")
    save()
    print(f"\n{ceil['gpu']}: torch bf16 matmul {ceil['bf16_matmul_tflops']:.0f} TFLOP/s, d2d "
          f"copy {ceil['copy_tbps']:.2f} TB/s")
    print(f"{'kernel':32s} status  ours ms    peer ms  ratio  ours        vs")
    for name, r in rows:
        if r["status"] != "ok":
            print(f"{name:32s} {r['status']}")
            continue
        peer = f"{r['peer_ms']:9.3f}" if r["peer_ms"] is not None else "        -"
        rate = f"{r['ours_tflops']:6.0f} TF/s" if "ours_tflops" in r else \
            f"{r['ours_tbps']:6.2f} TB/s"
        print(f"{name:32s} ok   {r['ours_ms']:9.3f}  {peer}  {r['ratio']:5.2f}  {rate} "
              f"{r['peer']}")
    return 0 if all(r["status"] == "ok" for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
