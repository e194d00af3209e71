"""Block code and the conformance suite's scalar cases in the host emulation: an atomic's old
value assigned to a per-thread variable happens once per block (thread 0 into a shared slot,
every thread reads it: it was made by every thread), the bitwise reducers combine their
partials with their own operator (they were summed), and run-time break/continue."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases


def tickets(blocks=4, rounds=3):
    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks, rounds), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            v = T.alloc_var("int32")
            for r in T.serial(rounds):
                v = T.atomic_add(C[0], 1, return_prev=True)
                Ticket[bx, r] = v

    return main


@pytest.mark.emulator
def test_an_old_value_into_a_variable_is_one_atomic_per_block(tmp_path):
    lowered = tilewright.lower(tickets(), "cuda -arch=sm_80")
    counter, got = torch.zeros(1, dtype=torch.int32), torch.full((4, 3), -1, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, counter, got)
    assert counter.item() == 12
    assert sorted(got.flatten().tolist()) == list(range(12))
    assert all(row == sorted(row) for row in got.tolist())  # a block's rounds in order


CASES = [c for c in cases(["reducers", "atomic_prev", "loop_jumps"])
         if c.id in ("reducers-int32-partial", "atomic_prev-int32-partial",
                     "loop_jumps-float32-partial")]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scalar_conformance_case_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    expected = case.reference(inputs, **case.dims)
    outputs = {i % len(func.params) for i in case.kernel.out_idx}
    given, args, results = iter(t.clone() for t in inputs), [], []
    for i, param in enumerate(func.params):
        if i in outputs:
            results.append(torch.full([int(s) for s in param.shape], -77,
                                      dtype=getattr(torch, str(param.dtype))))
            args.append(results[-1])
        else:
            args.append(next(given))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    results += [args[i] for i in case.kernel.inplace]
    for n, (got, want) in enumerate(zip(results, expected, strict=True)):
        assert_close(got, want, dtype=str(got.dtype), name=f"{case.id} output {n}",
                     reduction_length=case.kernel.reduction(**case.dims))
