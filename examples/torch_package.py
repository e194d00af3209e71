"""A kernel package of the examples: `tilewright package examples/torch_package.py --name
tw_examples` builds a wheel that registers these kernels as torch operators
(torch.ops.tw_examples.*) and runs with torch alone.

Each entry names a kernel of the examples and the configurations to compile; a dynamic
kernel's shape symbols may be bounded by ranges.
"""

from gemm_dynamic import matmul_dynamic
from rmsnorm import rmsnorm
from softmax import softmax

TORCH_OPS = {
    # one operator, two compiled shapes: calls dispatch on the input's shape
    "tw_examples::softmax": {"kernel": "softmax",
                             "configs": [{"M": 256, "N": 128}, {"M": 256, "N": 512}]},
    "tw_examples::rmsnorm": {"kernel": "rmsnorm", "configs": [{"M": 256, "N": 128}]},
    # one dynamic kernel for every M, N, K up to 4096
    "tw_examples::matmul": {"kernel": "matmul_dynamic", "configs": [{}],
                            "ranges": {"m": [1, 4096], "n": [1, 4096], "k": [1, 4096]}},
}

__all__ = ["TORCH_OPS", "matmul_dynamic", "rmsnorm", "softmax"]
