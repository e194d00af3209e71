"""Layout views: text and pictures of T.Layout / T.Fragment / descriptions, and the pass
config that prints every fragment layout of a kernel."""

import resource
import time

import numpy as np
import pytest
import tilewright
import tilewright.language as T
from tilewright.errors import TilewrightError
from tilewright.layout.view import default_fragment, evaluate, fragments_of
from tilewright.tools import layout_text, plot_layout
from tool_kernels import gemm


def test_fragment_text():
    frag = T.Fragment((4, 4), forward_thread_fn=lambda i, j: (i % 2) * 2 + j // 2,
                      forward_index_fn=lambda i, j: (i // 2) * 2 + j % 2)
    text = layout_text(frag, "C_local", threads=4)
    lines = text.splitlines()
    assert lines[0] == "C_local inferred layout:"
    assert lines[1] == "  Shape: [4, 4] -> [4]"
    assert lines[2].startswith("  Thread: ") and "i0" in lines[2]
    assert lines[3].startswith("  Index:  [")
    assert "T0:0" in text and "T3:3" in text
    assert "elements per thread: 4..4" in text


def test_plain_layout_and_description():
    text = layout_text(T.Layout((2, 8), lambda i, j: (j, i)), "swz")
    assert text.splitlines()[0] == "swz layout:" and "Shape: [2, 8] -> [16]" in text
    desc = {"shape": (8, 8), "threads": 8, "thread": lambda i, j: i,
            "index": lambda i, j: j, "label": "hand-written"}
    assert "Source: hand-written" in layout_text(desc, "D")


def test_default_model_thread_owns_rows():
    threads, index = evaluate(default_fragment((256, 8), 128))
    assert threads[0, 0] == threads[0, 7] == 0 and threads[1, 0] == 1
    assert threads[128, 3] == 0 and index[128, 3] == 8 + 3
    few, _ = evaluate(default_fragment((2, 64), 8))  # fewer rows than threads: split rows
    assert sorted(set(few.ravel().tolist())) == list(range(8))


def test_huge_layout_is_refused_with_size_and_limit():
    huge = T.Layout((10000, 10000), lambda i, j: (i, j))
    with pytest.raises(TilewrightError, match=r"100,000,000 elements, above the limit of "
                                              r"4,194,304"):
        plot_layout(huge, formats="png")


def test_unknown_format_is_refused():
    with pytest.raises(tilewright.ConfigError, match="valid: txt, png, svg, pdf"):
        plot_layout(T.Layout((2, 2), lambda i, j: (i, j)), formats="gif")


def test_gemm_accumulator_png_is_fast_and_small(tmp_path):
    pytest.importorskip("matplotlib", reason="pictures need the 'viz' extra (matplotlib)")
    view = default_fragment((128, 128), 128)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    out = plot_layout(view, "C_local", formats="png,svg", out_dir=tmp_path, verbose=False)
    elapsed = time.perf_counter() - start
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert (tmp_path / "C_local.png").stat().st_size > 1000 and out["svg"].endswith(".svg")
    assert elapsed < 5 * 3  # 5 s on an idle machine; shared CI cores get slack
    assert grown_mb < 500


def test_128_threads_get_128_colours_neighbours_far_apart(tmp_path):
    from tilewright.layout.view import thread_colours

    colours = thread_colours(128)
    assert len({tuple(np.round(c, 3)) for c in colours}) == 128
    steps = np.linalg.norm(np.diff(colours, axis=0), axis=1)
    assert steps.min() > 0.3  # threads t and t + 1 never look alike
    pytest.importorskip("matplotlib", reason="pictures need the 'viz' extra (matplotlib)")
    from PIL import Image

    plot_layout(default_fragment((32, 32), 128), "acc", formats="png", out_dir=tmp_path,
                verbose=False)
    pixels = np.asarray(Image.open(tmp_path / "acc.png").convert("RGB")).reshape(-1, 3)
    drawn = {tuple(p) for p in pixels}
    wanted = {tuple(int(round(v * 255)) for v in c) for c in colours}
    assert len(wanted & drawn) >= 120  # every thread's colour is in the picture


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    with pytest.raises(TilewrightError, match=r"tilewright\[viz\]"):
        plot_layout(T.Layout((2, 2), lambda i, j: (i, j)), formats="png")


def test_pass_config_prints_every_fragment_layout(tmp_path, capsys):
    func = gemm()
    assert fragments_of(func) == [("C_l", (64, 64), 128)]
    tilewright.compile(func, out_idx=[-1], target="cpu", pass_configs={
        "tw.layout_visualization_enable": True,
        "tw.layout_visualization_formats": "txt,png" if _has_mpl() else "txt",
        "tw.layout_visualization_dir": str(tmp_path)})
    err = capsys.readouterr().err
    assert "C_l inferred layout:" in err and "Shape: [64, 64] -> [" in err
    assert "Source: default model (each row split over 2 threads); backend 'cpu' inferred " \
        "no layout" in err
    if _has_mpl():
        assert (tmp_path / "C_l.png").exists()


def _has_mpl() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
