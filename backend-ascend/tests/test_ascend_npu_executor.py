"""The NPU executor's launch, without an NPU: the compiled library and torch.npu are stand-ins
that record what the launch passes. Every argument of the generated host function is passed
(tensors, workspaces, dynamic dimensions and, with ascend.exception_dump, the descriptor), and
workspaces start zeroed (Mmad's documentation warns against NaN inputs); under a torch.npu.graph
capture a call is one launch on the current stream and nothing else."""

import ctypes
import json
import types

import pytest
import torch
from tilewright.errors import TilewrightError
from tilewright_ascend import executor
from tilewright_ascend.exception_dump import decode_descriptor


class _Library:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if not name.endswith("_launch"):
            raise AttributeError(name)

        def launch(*args):
            self.calls.append(args)

        return launch


class _Npu:
    """The ``torch.npu`` names the launch may use: the current stream of a device and whether
    it is capturing. Any other name (a synchronisation, say) is an AttributeError."""

    def __init__(self, capturing=False):
        self.capturing = capturing
        self.streams = []

    def current_stream(self, device=None):
        self.streams.append(device)
        return types.SimpleNamespace(npu_stream=4321)

    def is_current_stream_capturing(self):
        return self.capturing


def _loaded(tmp_path, monkeypatch, meta, npu=None):
    (tmp_path / executor.META).write_text(json.dumps(meta))
    library = _Library()
    monkeypatch.setattr(ctypes, "CDLL", lambda path: library)
    monkeypatch.setattr(torch, "npu", npu or _Npu(), raising=False)
    return executor.BISHENG.load(tmp_path, meta["kernel"].removesuffix("_kernel")), library


def _launch(tmp_path, monkeypatch, meta, tensors):
    run, library = _loaded(tmp_path, monkeypatch, meta)
    run(*tensors)
    (args,) = library.calls
    return args


def test_launch_passes_every_argument_and_the_exception_descriptor(tmp_path, monkeypatch):
    meta = {"kernel": "k_kernel", "blocks": 2, "exception_dump": True,
            "params": [["A", "float32", [4, 8]], ["ws_C_0", "float32", [2, 1, 16, 16]]],
            "dims": [], "workspaces": 1}
    a = torch.randn(4, 8)
    args = _launch(tmp_path, monkeypatch, meta, (a,))
    assert len(args) == 1 + 2 + 1  # stream, A, the workspace, the descriptor
    assert args[0].value == 4321 and args[1].value == a.data_ptr()
    workspace = ctypes.string_at(args[2].value, 2 * 16 * 16 * 4)
    assert workspace == bytes(len(workspace)), "the NPU workspace must start zeroed"
    raw = ctypes.string_at(args[3].value, 256)
    name, tensors, _ = decode_descriptor(raw)
    assert name == "k_kernel"
    assert [(t["size"], t["address"], t["dtype"]) for t in tensors] == [
        (a.numel() * 4, a.data_ptr(), "float32"), (2 * 16 * 16 * 4, args[2].value, "float32")]


def test_launch_without_exception_dump_passes_dims(tmp_path, monkeypatch):
    meta = {"kernel": "k_kernel", "blocks": "(M + 1)", "exception_dump": False,
            "params": [["A", "float16", [-1, 8]]], "dims": [["M", 0, 0]], "workspaces": 0}
    a = torch.randn(5, 8).half()
    args = _launch(tmp_path, monkeypatch, meta, (a,))
    assert len(args) == 3 and args[2].value == 5


def test_launch_under_graph_capture_is_one_launch_on_the_current_stream(tmp_path, monkeypatch):
    """What torch.npu.graph needs: each call is one launch on the current stream of the
    tensors' device, with nothing else asked of torch.npu (no synchronisation)."""
    meta = {"kernel": "k_kernel", "blocks": "(M + 1)", "exception_dump": False,
            "params": [["A", "float32", [-1, 8]], ["ws_C_0", "float32", [2, 16]]],
            "dims": [["M", 0, 0]], "workspaces": 1}
    npu = _Npu(capturing=True)
    run, library = _loaded(tmp_path, monkeypatch, meta, npu)
    a = torch.randn(5, 8)
    for _ in range(3):
        run(a)
    assert len(library.calls) == 3
    assert npu.streams == [a.device] * 3
    assert [args[0].value for args in library.calls] == [4321] * 3


def test_exception_dump_refuses_graph_capture(tmp_path, monkeypatch):
    meta = {"kernel": "k_kernel", "blocks": 1, "exception_dump": True,
            "params": [["A", "float32", [4, 8]]], "dims": [], "workspaces": 0}
    run, library = _loaded(tmp_path, monkeypatch, meta, _Npu(capturing=True))
    with pytest.raises(TilewrightError, match=r"kernel k_kernel was built with "
                                              r"ascend.exception_dump.*Compile it without "
                                              "ascend.exception_dump to capture it"):
        run(torch.randn(4, 8))
    assert library.calls == []
