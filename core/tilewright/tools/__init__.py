"""Debug tools for every backend, fed by the engine's compile events.

- :mod:`.lower_trace` — IR before/after every pass and the codegen step
  (``TILEWRIGHT_LOWER_TRACE``);
- :mod:`.pass_diff` — the older pass-diff interface, on top of the trace;
- :mod:`.compile_only` — generated source without building or running
  (``python -m tilewright.tools.compile_only``);
- :mod:`.pass_timing` — compile time per pass and phase (``TILEWRIGHT_PASS_TIMING``);
- ``plot_layout`` (:mod:`tilewright.layout.view`): text and pictures of ``T.Layout`` /
  ``T.Fragment`` layouts;
- :mod:`.pass_visualizer` — per-pass structure trees as HTML
  (``python -m tilewright.tools.pass_visualizer``);
- :mod:`.analyzer` — ``Analyzer.analysis(func, arch)``: the static roofline estimate, and
  ``plot_roofline`` (``tilewright analyze script.py``).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "lower_trace": (".lower_trace", None),
    "pass_diff": (".pass_diff", None),
    "compile_kernel_source": (".compile_only", "compile_kernel_source"),
    "pass_timing": (".pass_timing", None),
    "plot_layout": ("..layout.view", "plot_layout"),
    "layout_text": ("..layout.view", "layout_text"),
    "Analyzer": (".analyzer", "Analyzer"),
    "plot_roofline": (".analyzer", "plot_roofline"),
}


def __getattr__(name):
    # submodules import TVM; keep `import tilewright.tools` light
    if name not in _LAZY:
        raise AttributeError(f"module 'tilewright.tools' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name, __name__)
    return module if attr is None else getattr(module, attr)


__all__ = ["Analyzer", "compile_kernel_source", "layout_text", "lower_trace", "pass_diff",
           "pass_timing", "plot_layout", "plot_roofline"]
