"""Pass Visualizer: per-pass structure trees, for every installed backend."""

import re
import runpy
import sys
from pathlib import Path

import tilewright
from tilewright.tools import pass_visualizer
from tilewright.tools.pass_visualizer import LOOP_KINDS, build_func, record, render, structure
from tool_kernels import gemm
from tvm import tirx

EXAMPLE = Path(__file__).parents[2] / "examples" / "gemm.py"


def test_tile_ops_expand_into_fields():
    (kernel,) = structure(gemm().body)
    assert kernel["cls"] == "kernel" and kernel["details"]["@tw.threads"]
    flat = []

    def walk(nodes):
        for n in nodes:
            flat.append(n)
            walk(n["children"])

    walk([kernel])
    ops = {n["label"]: n for n in flat if n["cls"] == "tileop"}
    assert {"T.fill", "T.copy", "T.gemm"} <= set(ops)
    fields = ops["T.gemm"]["details"]
    assert fields["M"] == "64" and fields["N"] == "64" and fields["K"] == "32"
    assert fields["A"] == "A_s[0:64, 0:32]"
    allocs = {n["label"]: n["details"] for n in flat if n["cls"] == "alloc"}
    assert allocs["alloc C_l"]["scope"] == "local.fragment"


def test_record_and_render_cpu(tmp_path):
    steps = record(gemm(), "cpu")
    assert steps[0]["phase"] == "input"
    assert [s["name"] for s in steps[1:9]] == ["CPUBindSolvedSymbols", "CPUSplitGridSyncs",
                                              "CPUSerializeThreads", "CPUFloatMinMax",
                                              "CPUFuseGemmK",
                                              "CPUHoistGemmConversions", "LowerTileOps",
                                              "CPULowerIntrinsics"]
    page = render({"cpu": steps, "broken": "UnsupportedOpError: nope"}, "t")
    assert page.count("<h3") == len(steps) and '<div class="err">UnsupportedOpError' in page
    assert 'class="k tileop">T.gemm' in page  # tile op before lowering
    assert 'class="k intrin"' in page  # lowered intrinsics after


def test_cli_covers_every_installed_backend(tmp_path, monkeypatch, capsys):
    out = tmp_path / "passes.html"
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the script's folder first
    code = pass_visualizer.main([str(EXAMPLE), "--set", "M=128", "--set", "N=128", "--set",
                                 "K=64", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "pass_visualizer: cpu:" in captured.out and "steps" in captured.out
    assert re.search(r'<h2 id="t0">target cpu</h2>', out.read_text())


def _walk(nodes):
    for node in nodes:
        yield node
        yield from _walk(node["children"])


def test_loop_kinds_are_words():
    assert set(LOOP_KINDS) == set(tirx.ForKind)
    steps = record(gemm(), "cpu")
    kinds = {n["details"]["kind"] for step in steps for n in _walk(step["tree"])
             if n["kind"] == "for"}
    assert {"serial", "parallel", "vectorized", "thread-bound"} <= kinds <= \
        set(LOOP_KINDS.values())
    page = render({"cpu": steps}, "t")
    assert "<b>kind</b>=vectorized" in page and "ForKind" not in page
    assert not re.search(r"<b>kind</b>=\d", page)


def test_contents_link_every_pass_and_mark_changes():
    steps = record(gemm(), "cpu")
    changed = {s["name"]: s["changed"] for s in steps}
    assert changed["LowerTileOps"] and not changed["CPUVectorExp"]  # gemm has no exp
    page = render({"cpu": steps, "broken": "UnsupportedOpError: nope"}, "t")
    contents = page[page.index('<nav id="contents">'):page.index("</nav>")]
    entries = re.findall(r'<li class="(\w+)"><a href="#([\w-]+)">([^<]*)</a>', contents)
    assert [name for _, _, name in entries] == [f"{s['phase']} / {s['name']}" for s in steps]
    for (cls, anchor, _), step in zip(entries, steps):
        assert cls == ("changed" if step["changed"] else "unchanged")
        assert f'<h3 id="{anchor}"' in page
    changes = sum(s["changed"] for s in steps[1:])
    assert f"({changes} of {len(steps) - 1} passes changed the IR)" in contents
    assert '<a href="#t1"><b>target broken</b></a>' in contents and '<h2 id="t1">' in page


def test_builds_eager_kernels_and_factories_by_their_names():
    quickstart = runpy.run_path(str(EXAMPLE.with_name("quickstart.py")), run_name="qs")
    name, func = build_func(quickstart, {"M": 100, "block_M": 32}, "vector_add")
    assert name == "vector_add" and func.attrs["global_symbol"] == "vector_add"
    text = func.script()  # M from --set, block_M too: ceildiv(100, 32) blocks
    assert 'A: T.Buffer((100,), "float32")' in text and "T.thread_binding(4," in text
    name, func = build_func({"gemm": tilewright.jit(gemm)}, {"M": 64})
    assert func.attrs["global_symbol"] == "gemm"
