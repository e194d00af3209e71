"""Kernels as torch operators: schemas, eager and compiled calls, dispatch over specialisations,
dynamic shapes under torch.compile without specialising, and the errors for bad input."""

import itertools

import pytest
import tilewright
import torch
import torch._dynamo.testing
from tilewright.torch_ops import OpError
from torch_kernels import rmsnorm, rope, row_scale, take_first, vector_add

_names = itertools.count()


def unique(base: str) -> str:
    return f"tw_test::{base}_{next(_names)}"


def ref_rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def ref_rope(q, cos, sin):
    a, b = q.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def compiled(fn, dynamic):
    """``fn`` under torch.compile (inductor), fullgraph, with a frame counter."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    return torch.compile(fn, backend=counter, fullgraph=True, dynamic=dynamic), counter


def test_schemas_come_from_the_signature():
    assert vector_add.torch_op.schema == "(Tensor A, Tensor B, int block_M=256) -> Tensor"
    assert row_scale.torch_op.schema == "(Tensor X, Tensor W, int block_N=64) -> Tensor"
    norm = rmsnorm(8, 32).as_torch_op(unique("norm"))
    assert norm.schema == "(Tensor X, Tensor W, float eps) -> Tensor"
    rot = rope(8, 32).as_torch_op(unique("rope"))
    assert rot.schema == "(Tensor(a!) Q, Tensor Cos, Tensor Sin) -> ()"
    norm.remove()
    rot.remove()


def test_eager_operator_matches_the_kernel_for_every_length():
    for n in (1000, 77):
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(torch.ops.tw_test.vadd(a, b), a + b)
        torch.testing.assert_close(torch.ops.tw_test.vadd(a, b, 128), a + b)


def test_in_place_kernel_returns_nothing_and_mutates():
    op = rope(8, 32).as_torch_op(unique("rope"))
    q, cos, sin = torch.randn(8, 32), torch.randn(8, 16), torch.randn(8, 16)
    want = ref_rope(q, cos, sin)
    assert op(q, cos, sin) is None
    torch.testing.assert_close(q, want)
    op.remove()


def test_dynamic_kernel_compiles_once_for_every_shape():
    fn, counter = compiled(lambda x, w: torch.ops.tw_test.row_scale(x, w).relu() + 1, True)
    for m, n in ((5, 100), (17, 33), (64, 64)):
        x, w = torch.randn(m, n), torch.randn(n)
        torch.testing.assert_close(fn(x, w), (x * w).relu() + 1)
    assert counter.frame_count == 1  # no recompilation: nothing was specialised


def test_const_kernel_under_dynamic_compile_keeps_sizes_symbolic():
    fn, counter = compiled(lambda a, b: torch.ops.tw_test.vadd(a, b) * 2, True)
    for n in (1000, 1500, 333):
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(fn(a, b), (a + b) * 2)
    assert counter.frame_count == 1


class Block(torch.nn.Module):
    """RMSNorm then RoPE in place (the seed's ACLGraph pair), then a dynamic kernel."""

    def __init__(self, norm, rot, n):
        super().__init__()
        self.norm, self.rot = norm, rot
        self.w = torch.nn.Parameter(torch.randn(n), requires_grad=False)

    def forward(self, x, cos, sin, scale):
        y = self.norm(x, self.w, 1e-6)
        self.rot(y, cos, sin)
        return torch.ops.tw_test.row_scale(y, scale) + x


def test_module_compiles_fullgraph_and_matches_eager():
    m, n = 16, 64
    norm = rmsnorm(m, n).as_torch_op(unique("norm"))
    rot = rope(m, n).as_torch_op(unique("rope"))
    block = Block(norm, rot, n)
    x, cos, sin, scale = (torch.randn(m, n), torch.randn(m, n // 2), torch.randn(m, n // 2),
                          torch.randn(n))
    eager = block(x, cos, sin, scale)
    want = ref_rope(ref_rmsnorm(x, block.w, 1e-6), cos, sin) * scale + x
    torch.testing.assert_close(eager, want, rtol=1e-5, atol=1e-5)
    fn, counter = compiled(block, False)
    torch.testing.assert_close(fn(x, cos, sin, scale), eager)
    assert counter.frame_count == 1
    norm.remove()
    rot.remove()


def test_factory_specialisations_dispatch_by_shape_and_refuse_ambiguity():
    name = unique("norm")
    factory = tilewright.jit(rmsnorm.fn, out_idx=[-1], target="cpu", torch_op=name)
    factory(8, 32)
    factory(16, 32)
    op = factory.torch_op
    for m in (8, 16):
        x, w = torch.randn(m, 32), torch.randn(32)
        torch.testing.assert_close(op(x, w, 1e-5), ref_rmsnorm(x, w, 1e-5), rtol=1e-5,
                                   atol=1e-5)
    with pytest.raises(OpError, match=rf"torch op {name} has no cpu kernel for X: "
                                      r"float32\(4, 32\).*X: float32\(8, 32\)"):
        op(torch.randn(4, 32), torch.randn(32), 1e-5)
    with pytest.raises(OpError, match=rf"torch op {name} already runs kernel main .* would "
                                      "accept some of the same inputs"):
        factory(8, 32, block_M=8)  # another kernel for the same shapes
    op.remove()


def test_registering_a_name_twice_is_refused():
    kernel = rmsnorm(8, 32)
    name = unique("norm")
    op = kernel.as_torch_op(name)
    with pytest.raises(OpError, match=rf"torch op {name} is already registered by tilewright "
                                      r"\(kernel main\); pick another name"):
        kernel.as_torch_op(name)
    op.remove()
    kernel.as_torch_op(name).remove()  # free again once removed
    with pytest.raises(OpError, match="torch op aten::add already exists"):
        kernel.as_torch_op("aten::add")
    with pytest.raises(OpError, match="must look like 'namespace::name'"):
        kernel.as_torch_op("no_namespace")


def test_outputs_that_depend_on_values_are_refused():
    with pytest.raises(OpError, match=r"output 'C' of kernel main has shape \(n,\), which "
                                      "depends on the value of n, not on input shapes"):
        take_first(0).as_torch_op(unique("take"))


def test_a_device_without_a_backend_is_named():
    kernel = tilewright.compile(rmsnorm.get_tir(8, 32), out_idx=[-1], target="cuda")
    op = kernel.as_torch_op(unique("norm_cuda"))
    with pytest.raises(OpError, match=r"got tensors on 'cpu', where it has no kernel: its "
                                      r"kernels are compiled for target 'cuda.*'; compile the "
                                      r"kernel for 'cpu' too .* It runs on cuda"):
        op(torch.randn(8, 32), torch.randn(32), 1e-5)
    op.remove()


def test_fake_tensors_give_symbolic_shapes_and_dtype_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(6, 10), static_shapes=False)
    w = mode.from_tensor(torch.randn(10), static_shapes=False)
    with mode:
        y = torch.ops.tw_test.row_scale(x, w)
        assert y.shape == x.shape and y.dtype == torch.float32
        with pytest.raises(TypeError, match=r"torch op tw_test::row_scale: 'X' must be a "
                                            r"float32 tensor"):
            torch.ops.tw_test.row_scale(x.to(torch.float64), w)


def test_an_operator_of_one_kernel_names_the_shapes_it_runs():
    op = rmsnorm(8, 32).as_torch_op(unique("norm"))
    with pytest.raises(OpError, match=rf"torch op {op.qualname} has no cpu kernel for X: "
                                      r"float32\(4, 32\), W: float32\(32,\); it has kernels "
                                      r"for: X: float32\(8, 32\), W: float32\(32,\)"):
        op(torch.randn(4, 32), torch.randn(32), 1e-5)
    op.remove()
