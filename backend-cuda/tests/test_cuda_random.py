"""Random numbers (``T.rng_init`` / ``T.rng_rand`` / ``T.rng_rand_float``) in the generated
CUDA: the conformance case of per-thread generators run by the host emulation against the
suite's Philox reference (itself checked against cuRAND's code in
tests/language/test_random.py), and the Philox rounds' 32 x 32 -> 64-bit products as the
wide multiply in SASS, not a 64-bit multiplication."""

import re

import hostemu
import pytest
import sass
import tilewright
import torch
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import rng

M, N = 2, 6


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_per_thread_generators_in_host_emulation(arch_name, tmp_path):
    source = tilewright.lower(rng._random_threads("float32", M, N),
                              f"cuda -arch={arch_name}").source
    offsets = torch.tensor([5, 2], dtype=torch.int32)
    u = torch.full((M, 32, N), -1, dtype=torch.int64)
    z = torch.full((M, 32), float("nan"))
    hostemu.run(source.text, source.payload, tmp_path, offsets, u, z)
    want_u, want_z = rng._random_threads_ref(offsets, N)
    assert torch.equal(u, want_u)
    torch.testing.assert_close(z.double(), want_z, rtol=1e-6, atol=1e-6)


@pytest.mark.nvcc
@pytest.mark.sass
def test_philox_rounds_use_the_wide_multiply(tmp_path):
    source = tilewright.lower(rng._random_threads("float32", M, N), "cuda -arch=sm_90a").source
    cubin, _ = executor.nvcc_compile(source.text, arch.get("sm_90a"), tmp_path)
    ops = re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?P\w+\s+)?([A-Z0-9_.]+)", sass.dump(cubin),
                     re.M)
    # ten rounds of two products for each refill of the output block (the setup, the loop's
    # draws, the normal pair's): one IMAD.WIDE.U32 each (IMAD.WIDE computes addresses), no
    # 64 x 64-bit product built of partial products
    assert ops.count("IMAD.WIDE.U32") >= 2 * 10 * 2
    assert "IMAD.HI.U32" not in ops and len(ops) < 1000
