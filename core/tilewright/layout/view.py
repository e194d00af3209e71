"""Layout views: which thread holds each element of a fragment, at which local index.

:func:`plot_layout` renders a ``T.Layout``, a ``T.Fragment`` or a :class:`FragmentView` (a
layout description: shape, thread count, thread and index functions) as text, and as png /
svg / pdf with matplotlib (``pip install "tilewright[viz]"``). Pictures draw one coloured cell
per element with an image call, so a 128x128 fragment takes well under a second; labels are
written only while they stay readable. Layouts with more than ``max_elements`` elements are
refused with their size and the limit.

The pass config ``tw.layout_visualization_enable`` prints every fragment layout of a kernel
when it compiles (``<buf> inferred layout: Shape ... Thread ... Index ...``), and writes
pictures for the formats in ``tw.layout_visualization_formats`` (the engine's listener,
:class:`tilewright.engine.listeners.InferredLayoutPrinter`, draws them with this module). A
backend reports the layouts it inferred with a ``layout`` engine event (``buffer=``,
``layout=``); for fragments no backend reports (the CPU backend infers none: a CPU worker runs
a whole block), the view shows the portable default model of :func:`default_fragment`,
labelled as such.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tvm import sym, tirx

from ..errors import ConfigError, TilewrightError
from ..language.annotations import Fragment, Layout

MAX_ELEMENTS = 1 << 22  # evaluation limit: 4M elements
MAX_LABELLED = 64 * 64  # cells that get a "T<thread>:<index>" label in pictures
MAX_TEXT_GRID = 32 * 32  # text output prints the whole grid up to this size
FORMATS = ("txt", "png", "svg", "pdf")


@dataclass(frozen=True)
class FragmentView:
    """A fragment layout description: ``thread_fn(*index)`` and ``index_fn(*index)`` give the
    owning thread and the local index of every element; ``label`` says where it comes from."""

    shape: tuple
    threads: int
    thread_fn: object
    index_fn: object
    label: str = ""
    replicate: int = 1


def default_fragment(shape, threads: int) -> FragmentView:
    """The portable default model: threads own whole rows, dealt round-robin (row ``i``
    belongs to thread ``i % threads``); when there are fewer rows than threads, each row is
    split into equal column chunks, one per thread."""
    shape = tuple(int(s) for s in shape)
    threads = int(threads)
    if len(shape) == 1:
        return FragmentView(shape, threads, lambda i: i % threads, lambda i: i // threads,
                            "default model (thread owns elements round-robin)")
    rows = int(np.prod(shape[:-1]))
    cols = shape[-1]
    if rows >= threads:
        def thread_fn(*idx):
            return _flat_row(idx, shape) % threads

        def index_fn(*idx):
            return (_flat_row(idx, shape) // threads) * cols + idx[-1]
        label = "default model (thread owns rows, round-robin)"
    else:
        per_row = max(1, threads // rows)
        chunk = -(-cols // per_row)

        def thread_fn(*idx):
            return _flat_row(idx, shape) * per_row + idx[-1] // chunk

        def index_fn(*idx):
            return idx[-1] % chunk
        label = f"default model (each row split over {per_row} threads)"
    return FragmentView(shape, threads, thread_fn, index_fn, label)


def _flat_row(idx, shape):
    row = 0
    for i, extent in zip(idx[:-1], shape[:-1]):
        row = row * extent + i
    return row


def as_view(layout, threads: int | None = None) -> FragmentView:
    """A :class:`FragmentView` of a ``T.Layout``, ``T.Fragment``, view or dict description."""
    if isinstance(layout, FragmentView):
        return layout
    if isinstance(layout, dict):
        try:
            return FragmentView(tuple(layout["shape"]), int(layout.get("threads", threads or 1)),
                                layout.get("thread"), layout.get("index"),
                                layout.get("label", "description"))
        except KeyError as exc:
            raise ConfigError(f"a layout description needs a {exc.args[0]!r} entry") from None
    if isinstance(layout, Fragment):
        return FragmentView(layout.shape, int(threads or 0), layout.forward_thread_fn,
                            layout.forward_fn, "T.Fragment", layout.replicate)
    if isinstance(layout, Layout):
        return FragmentView(layout.shape, 0, None, layout.forward_fn, "T.Layout")
    raise ConfigError(f"plot_layout: expected a T.Layout, T.Fragment or FragmentView, got "
                      f"{type(layout).__name__}")


def _size(view: FragmentView) -> int:
    return int(np.prod([int(s) for s in view.shape], dtype=np.int64))


def check_size(view: FragmentView, max_elements: int = MAX_ELEMENTS) -> int:
    n = _size(view)
    if n > max_elements:
        raise TilewrightError(f"layout of shape {list(view.shape)} has {n:,} elements, above "
                              f"the limit of {max_elements:,} for layout views; view a slice "
                              f"or raise max_elements")
    return n


def _evaluate(fn, shape) -> np.ndarray:
    """``fn`` over every index, as an int array of shape ``shape + (outputs,)``."""
    grids = np.indices(shape, dtype=np.int64)
    try:
        out = fn(*grids)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        arrays = [np.broadcast_to(np.asarray(o, dtype=np.int64), shape) for o in outs]
        return np.stack(arrays, axis=-1)
    except Exception:  # noqa: BLE001, S110 - functions using IR helpers: one at a time
        pass
    analyzer = sym.Analyzer()
    result = None
    for flat, index in enumerate(np.ndindex(*shape)):
        out = fn(*index)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        values = [int(o) if isinstance(o, (int, np.integer)) else
                  int(analyzer.simplify(o)) for o in outs]
        if result is None:
            result = np.zeros((int(np.prod(shape)), len(values)), dtype=np.int64)
        result[flat] = values
    return result.reshape(*shape, -1)


def _symbolic(fn, ndim: int) -> str:
    if fn is None:
        return "(none)"
    args = [tirx.Var(f"i{n}", "int32") for n in range(ndim)]
    try:
        out = fn(*args)
    except Exception:  # noqa: BLE001 - only numeric evaluation works for this function
        return "(computed per element)"
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return ", ".join(str(o) for o in outs)


def evaluate(view: FragmentView, max_elements: int = MAX_ELEMENTS):
    """``(threads, index)`` arrays of the view's shape (``threads`` is None for a plain
    layout); ``index`` is the flattened physical index."""
    check_size(view, max_elements)
    shape = tuple(int(s) for s in view.shape)
    index = _evaluate(view.index_fn, shape) if view.index_fn is not None else \
        np.arange(_size(view), dtype=np.int64).reshape(*shape, 1)
    if index.shape[-1] > 1:  # multi-dimensional physical index: flatten row-major
        extents = index.reshape(-1, index.shape[-1]).max(axis=0) + 1
        flat = np.zeros(shape, dtype=np.int64)
        for d in range(index.shape[-1]):
            flat = flat * int(extents[d]) + index[..., d]
        index = flat
    else:
        index = index[..., 0]
    threads = _evaluate(view.thread_fn, shape)[..., 0] if view.thread_fn is not None else None
    return threads, index


def layout_text(view, name: str = "layout", max_elements: int = MAX_ELEMENTS,
                threads: int | None = None) -> str:
    """The text form: the header lines, then the grid of ``T<thread>:<index>`` cells (or a
    summary for large layouts)."""
    view = as_view(view, threads)
    n = check_size(view, max_elements)
    thread_arr, index_arr = evaluate(view, max_elements)
    local = int(index_arr.max()) + 1 if n else 0
    lines = [f"{name} inferred layout:" if view.label not in ("T.Layout",) else f"{name} layout:",
             f"  Shape: {list(view.shape)} -> [{local}]",
             f"  Thread: {_symbolic(view.thread_fn, len(view.shape))}",
             f"  Index:  [{_symbolic(view.index_fn, len(view.shape))}]"]
    if view.label:
        lines.append(f"  Source: {view.label}")
    if thread_arr is not None:
        used = np.unique(thread_arr)
        per = np.bincount(thread_arr.ravel() - int(used.min()))
        lines.append(f"  Threads used: {len(used)} (ids {int(used.min())}..{int(used.max())}), "
                     f"elements per thread: {int(per[per > 0].min())}..{int(per.max())}")
    if n <= MAX_TEXT_GRID and len(view.shape) <= 2:
        grid = index_arr.reshape(-1, view.shape[-1])
        tgrid = thread_arr.reshape(grid.shape) if thread_arr is not None else None
        for r in range(grid.shape[0]):
            cells = [f"T{tgrid[r, c]}:{grid[r, c]}" if tgrid is not None else str(grid[r, c])
                     for c in range(grid.shape[1])]
            lines.append("  " + " ".join(f"{c:>9}" for c in cells))
    else:
        lines.append(f"  ({n:,} elements: grid not printed; use a picture format)")
    return "\n".join(lines)


def thread_colours(count: int) -> np.ndarray:
    """``count`` RGB colours, one per thread, neighbouring threads far apart: hues step by
    the golden ratio around the wheel, and saturation and brightness alternate."""
    golden = (5 ** 0.5 - 1) / 2
    return np.array([colorsys.hsv_to_rgb((i * golden) % 1.0, (0.9, 0.55)[i % 2],
                                         (0.95, 0.75)[(i // 2) % 2]) for i in range(count)])


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TilewrightError("png / svg / pdf layout pictures need matplotlib: "
                              "pip install 'tilewright[viz]' (or pip install matplotlib)") \
            from None
    return plt


def plot_layout(layout, name: str = "layout", formats="txt", out_dir=".", threads=None,
                max_elements: int = MAX_ELEMENTS, verbose: bool = True) -> dict:
    """Render ``layout`` in ``formats`` (``"txt"``, ``"png"``, ``"svg"``, ``"pdf"``, a
    comma-separated string or a list). Returns ``{"txt": text, "png": path, ...}``; text is
    printed when ``verbose``."""
    formats = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str)
                                           else formats) if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ConfigError(f"unknown layout view format(s) {bad}; valid: {', '.join(FORMATS)}")
    view = as_view(layout, threads)
    check_size(view, max_elements)
    result = {}
    if "txt" in formats:
        result["txt"] = layout_text(view, name, max_elements)
        if verbose:
            print(result["txt"])
    pictures = [f for f in formats if f != "txt"]
    if pictures:
        plt = _pyplot()
        fig = _figure(plt, view, name, max_elements)
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for fmt in pictures:
            path = folder / f"{name}.{fmt}"
            fig.savefig(path, format=fmt, dpi=100)
            result[fmt] = str(path)
        plt.close(fig)
    return result


def _figure(plt, view: FragmentView, name: str, max_elements: int):
    thread_arr, index_arr = evaluate(view, max_elements)
    if len(view.shape) != 2:
        cols = view.shape[-1]
        index_arr = index_arr.reshape(-1, cols)
        thread_arr = thread_arr.reshape(-1, cols) if thread_arr is not None else None
    rows, cols = index_arr.shape
    scale = 0.45 if rows * cols <= MAX_LABELLED else min(12 / max(rows, cols), 0.45)
    fig, ax = plt.subplots(figsize=(max(4, cols * scale + 2), max(3, rows * scale + 1)))
    if thread_arr is not None:  # one colour per thread, its number on the colour bar
        from matplotlib.colors import BoundaryNorm, ListedColormap

        count = int(thread_arr.max()) + 1
        image = ax.imshow(thread_arr, cmap=ListedColormap(thread_colours(count)),
                          norm=BoundaryNorm(np.arange(count + 1) - 0.5, count),
                          interpolation="nearest", aspect="equal")
        bar = fig.colorbar(image, ax=ax, label="thread", fraction=0.04)
        bar.set_ticks(range(0, count, max(1, count // 16)))
    else:
        image = ax.imshow(index_arr, cmap="viridis", interpolation="nearest", aspect="equal")
        fig.colorbar(image, ax=ax, label="index", fraction=0.04)
    if rows * cols <= MAX_LABELLED:
        size = max(3, min(8, 220 / max(rows, cols)))
        for r in range(rows):
            for c in range(cols):
                text = (f"T{thread_arr[r, c]}\n{index_arr[r, c]}" if thread_arr is not None
                        else str(index_arr[r, c]))
                ax.text(c, r, text, ha="center", va="center", fontsize=size)
    ax.set_title(f"{name}: {list(view.shape)} ({view.label})", fontsize=9)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    return fig


# -- the layout views of a compilation -------------------------------------------------------
def fragments_of(func) -> list[tuple[str, tuple, int]]:
    """``(name, shape, threads)`` of every fragment buffer of a tile-level kernel."""
    threads = 1
    found = []

    def visit(stmt):
        nonlocal threads
        if stmt is None:
            return
        kind = type(stmt).__name__
        if kind == "For" and "tw.threads" in stmt.annotations:
            t = [int(x) for x in stmt.annotations["tw.threads"]]
            threads = t[0] * t[1] * t[2]
        if kind == "AllocBuffer" and stmt.buffer.scope() == "local.fragment":
            found.append((stmt.buffer.name, tuple(int(s) for s in stmt.buffer.shape), threads))
        for attr in ("body", "then_case", "else_case"):
            visit(getattr(stmt, attr, None))
        for child in getattr(stmt, "seq", None) or ():
            visit(child)

    visit(func.body)
    return found


__all__ = ["FragmentView", "as_view", "default_fragment",
           "fragments_of", "layout_text", "plot_layout"]
