"""``T.copy(..., annotations={...})``: TileLang's keys with a meaning here (``disable_tma``,
``prefer_instruction``, ``coalesced_width``, ``eviction_policy``, ``parallel_loop_layout``)
checked as they are; any other key kept with its value on the tile op, where the printed
program shows it (TileLang's ``test_scalar_copy_annotations_preserved``), changing neither
the generated code nor the results on the CPU backend and the interpreter; a key close to a
known one warns, naming that one."""

import warnings

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

TARGETS = ["cpu", "interp"]


def scalar_copy():
    """TileLang's test_scalar_copy_annotations_preserved, without T.async_copy (which this
    language does not have): a one-element copy outside T.Parallel stays a tile op."""
    @T.prim_func
    def main(A: T.Tensor((1,), T.float32), B: T.Tensor((1,), T.float32)):
        with T.Kernel(1, threads=32):
            A_shared = T.alloc_shared((1,), T.float32)
            T.copy(A[0], B[0], annotations={"test.copy": "sync"})
            T.copy(A[0], A_shared[0], annotations={"test.copy": "async", "test.n": [1, 2]})

    return main


def test_unknown_annotations_are_kept_on_the_copy():
    lines = scalar_copy().script().splitlines()
    copies = [line for line in lines if '"tw.copy"' in line]
    assert len(copies) == 2
    assert 'attrs={"test.copy": "sync"}' in copies[0]
    assert '"test.copy": "async"' in copies[1] and '"test.n": [1, 2]' in copies[1]


@pytest.mark.parametrize("target", TARGETS)
def test_a_scalar_copy_with_annotations_copies(target):
    a, b = torch.tensor([3.5]), torch.zeros(1)
    tilewright.compile(scalar_copy(), target=target)(a, b)
    assert b.tolist() == [3.5]


def tiled(annotations):
    """A (128, 128) matrix copied through shared tiles, every copy annotated."""
    @T.prim_func
    def main(A: T.Tensor((128, 128), T.float32), B: T.Tensor((128, 128), T.float32)):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            s = T.alloc_shared((64, 64), T.float32)
            T.copy(A[by * 64, bx * 64], s, annotations=annotations)
            T.copy(s, B[by * 64, bx * 64], annotations=annotations)
            for i, j in T.Parallel(2, 2):
                T.copy(A[i, j], B[i, j], annotations=annotations)  # element copies: stores

    return main


UNKNOWN = {"test.copy": "sync", "my_pass.level": 3, "weights": [0.5, 1.0]}


@pytest.mark.parametrize("target", TARGETS)
def test_unknown_annotations_change_neither_code_nor_results(target):
    plain, annotated = tiled(None), tiled(UNKNOWN)
    assert "my_pass.level" in annotated.script()
    assert tilewright.lower(plain, target).source.text == \
        tilewright.lower(annotated, target).source.text
    a = torch.randn(128, 128)
    b, c = torch.zeros_like(a), torch.zeros_like(a)
    tilewright.compile(plain, target=target)(a, b)
    tilewright.compile(annotated, target=target)(a, c)
    assert torch.equal(b, a) and torch.equal(c, a)


def copy_with(annotations, **kwargs):
    @T.prim_func
    def main(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=32):
            T.copy(A, B, annotations=annotations, **kwargs)

    return main


def test_a_key_close_to_a_known_one_warns_naming_it():
    with pytest.warns(RuntimeWarning, match="annotation 'disable_tmaa' is not one this "
                                            "language reads .*did you mean 'disable_tma'"):
        func = copy_with({"disable_tmaa": True})
    assert '"disable_tmaa": True' in func.script()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy_with({"test.copy": "sync"})


@pytest.mark.parametrize("target", TARGETS)
def test_known_keys_take_precedence_over_the_arguments(target):
    func = copy_with({"disable_tma": False, "coalesced_width": 4, "eviction_policy": 1,
                      "prefer_instruction": "sync",
                      "parallel_loop_layout": T.Fragment((64,), lambda i: (i % 32, i // 32))},
                     disable_tma=True, coalesced_width=2, eviction_policy="evict_last")
    text = func.script()
    assert '4, T.bool(False), "evict_first"' in text and "attrs=" not in text
    a, b = torch.randn(64), torch.zeros(64)
    tilewright.compile(func, target=target)(a, b)
    assert torch.equal(b, a)


@pytest.mark.parametrize("annotations,kwargs,message", [
    ({"prefer_instruction": "fastest"}, {}, "prefer_instruction must be one of 'tma', "
                                            "'cp_async', 'sync'.*got 'fastest'"),
    ({}, {"prefer_instruction": "dma"}, "prefer_instruction must be one of .*got 'dma'"),
    ({"eviction_policy": 5}, {}, "eviction_policy must be one of 'evict_normal', "
                                 "'evict_first', 'evict_last', got 5"),
    ({}, {"eviction_policy": "evict_all"}, "eviction_policy must be one of"),
    ({"coalesced_width": -1}, {}, "coalesced_width must be a non-negative int, got -1"),
    ({"disable_tma": "yes"}, {}, "disable_tma must be a bool, got 'yes'"),
    ({"parallel_loop_layout": 4}, {}, "the loop layout .* must be a T.Fragment, got int"),
    ({3: "x"}, {}, "annotation keys must be strings, got 3"),
    ({"test.fn": print}, {}, "annotation 'test.fn' is kept on the op, so its value must be a "
                             "string, a number, an expression or a list or dict of them; got "
                             "builtin_function_or_method"),
])
def test_annotations_are_checked_at_the_line(annotations, kwargs, message):
    with pytest.raises(KernelError, match=message) as info:
        copy_with(annotations, **kwargs)
    assert info.value.location.filename == __file__


def test_annotations_must_be_a_dict():
    with pytest.raises(KernelError, match="T.copy: annotations must be a dict, got list"):
        copy_with([("test.copy", "sync")])
