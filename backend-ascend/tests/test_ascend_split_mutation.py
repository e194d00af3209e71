"""Mutation test of the cube/vector split: deleting a cross-core flag pair from the generated
source is a reported race, a deadlock or a wrong result."""

import re

import tilewright
import torch
from test_ascend_split import _decayed_ref, decayed_gemm
from tilewright_ascend.executor import EmulatorError, compile_and_run_source
from tilewright_sdk.conformance.catalogue import _attention, _attention_ref


def _cross_pairs(lines):
    """(set line, wait line) per cross-core flag id: the first set and the first wait."""
    pairs = {}
    for i, line in enumerate(lines):
        m = re.search(r"CrossCore(Set|Wait)Flag(?:<[^>]*>)?\((\d+)\)", line)
        if m:
            slot = pairs.setdefault(m.group(2), [None, None])
            index = 0 if m.group(1) == "Set" else 1
            if slot[index] is None:
                slot[index] = i
    return pairs


def _detected(low, pairs, tensors, out_index, ref, tmp_path, tol):
    lines = low.source.text.splitlines()
    found = []
    for flag, (s, w) in sorted(pairs.items()):
        text = "\n".join(line for i, line in enumerate(lines) if i not in (s, w))
        args = [t.clone() for t in tensors]
        work = tmp_path / f"f{flag}"
        work.mkdir(parents=True)
        try:
            compile_and_run_source(text, low.source.payload, args, work)
        except EmulatorError as exc:
            assert re.search(r"race|never be satisfied|unpaired", str(exc)), str(exc)
            found.append(flag)
            continue
        if not torch.allclose(args[out_index].double(), ref, rtol=tol, atol=tol):
            found.append(flag)
    return found


def test_mutation_every_deleted_cross_core_pair_is_detected(tmp_path):
    """Delete one cross-core set/wait pair at a time: the emulator must report a race or a
    deadlock, or the result must be wrong. In the decayed GEMM (four K steps, one channel)
    that holds for the full and the empty flag. In flash attention (five K steps, three
    channels) it holds for every full flag; its empty flags are implied by the other
    channels' full flags (each consumer answers with a handoff of its own before the
    producer can come round again), so deleting one of them changes nothing observable."""
    low = tilewright.lower(decayed_gemm(64, 32, 128), target="ascend")
    pairs = _cross_pairs(low.source.text.splitlines())
    assert len(pairs) == 2
    a, b = torch.randn(64, 128).half(), torch.randn(128, 32).half()
    found = _detected(low, pairs, (a, b, torch.empty(64, 32)), 2, _decayed_ref(a, b),
                      tmp_path / "decayed", 1e-3)
    assert found == sorted(pairs), f"undetected deletions: {set(pairs) - set(found)}"

    S = 40
    low = tilewright.lower(_attention("float16", S, 16), target="ascend")
    pairs = _cross_pairs(low.source.text.splitlines())
    assert len(pairs) == 6
    full = {f: p for f, p in pairs.items() if int(f) % 2 == 0}  # ids: full, empty per channel
    q, k, v = (torch.randn(S, 16).half() for _ in range(3))
    ref = _attention_ref(q.double(), k.double(), v.double())[0]
    found = _detected(low, full, (q, k, v, torch.empty(S, 16).half()), 3, ref,
                      tmp_path / "attention", 2e-3)
    assert found == sorted(full), f"undetected deletions: {set(full) - set(found)}"
