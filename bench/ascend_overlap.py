"""How much MTE2 (GM -> on-chip) work overlaps compute (V or M) on the Ascend emulator's
timing model, for the double-buffered elementwise add and the L1 double-buffered GEMM, beside
the conservative scheme (each set/wait pair adjacent before its consumer) in the same run.
"ours" is the hand-written double buffering of the seeds; the "auto" rows are the same loops
written as ``T.Pipelined(num_stages=2)`` without flags, multi-buffered and synchronised by
the backend. The "950" rows are the mainline dialect's versioned vector add and pipelined GEMM
(``backend-ascend/examples/mainline_kernels.py``) compiled for ``ascend-950``, which has no
conservative counterpart (its kernels carry no flags of their own).

The measure is the time MTE2 is busy while V or M is busy on the same core, divided by the
shorter of the two busy times (MTE2, or V and M together): 1.0 means the shorter activity is
entirely hidden under the longer one, 0.0 that they take turns. Times come from the
emulator's cost model (cycles per byte or element per pipe, not calibrated against hardware).
Run: python bench/ascend_overlap.py
"""

import sys
from pathlib import Path

import tilewright
import torch
from tilewright_ascend.executor import last_run_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend-ascend" / "examples"))
import ascend_kernels as K
import mainline_kernels as M


def measure(func, *tensors, target="ascend"):
    kernel = tilewright.compile(func, out_idx=[-1], target=target)
    out = kernel(*tensors)
    return out, last_run_stats()


def main():
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    rows = []
    out, ours = measure(K.vec_add_pipelined(512, 512, 512, 256, 32), a, b)
    torch.testing.assert_close(out, a + b)
    out, cons = measure(K.vec_add_conservative(512, 512, 512, 256, 32), a, b)
    torch.testing.assert_close(out, a + b)
    rows.append(("double-buffered add", ours, cons))
    out, auto = measure(K.vec_add_pipelined_auto(512, 512, 512, 256, 32), a, b)
    torch.testing.assert_close(out, a + b)
    rows.append(("add, T.Pipelined auto", auto, cons))
    x, y = torch.randn(128, 1024).half(), torch.randn(1024, 128).half()
    ref = x.float() @ y.float()
    out, ours = measure(K.gemm_pipelined(128, 128, 1024, 64, 64, 128, kL0Size=64), x, y)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=5e-2)
    out, cons = measure(K.gemm_pipelined(128, 128, 1024, 64, 64, 128, kL0Size=64,
                                         conservative=True), x, y)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=5e-2)
    rows.append(("pipelined GEMM", ours, cons))
    out, auto = measure(K.gemm_auto(128, 128, 1024, 64, 64, 128, kL0Size=64, num_stages=2),
                        x, y)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=5e-2)
    rows.append(("GEMM, T.Pipelined auto", auto, cons))
    n = 512 * 512
    out, add950 = measure(M.vector_add(n, tile=4096, blocks=4), a.flatten(), b.flatten(),
                          target=M.TARGET)
    torch.testing.assert_close(out, (a + b).flatten())
    rows.append(("950 versioned add", add950, None))
    out, gemm950 = measure(M.gemm(128, 128, 1024, 64, 64, 64), x, y, target=M.TARGET)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=5e-2)
    rows.append(("950 pipelined GEMM", gemm950, None))
    print(f"{'kernel':22} {'MTE2 overlap (ours)':>20} {'(conservative)':>15} "
          f"{'cycles (ours)':>14} {'(conservative)':>15}")
    for name, o, c in rows:
        cons_overlap = f"{c['mte2_overlap']:15.3f}" if c else f"{'-':>15}"
        cons_cycles = f"{c['cycles']:15.0f}" if c else f"{'-':>15}"
        print(f"{name:22} {o['mte2_overlap']:20.3f} {cons_overlap} "
              f"{o['cycles']:14.0f} {cons_cycles}")


if __name__ == "__main__":
    main()
