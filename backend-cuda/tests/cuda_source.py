"""Reading generated CUDA source in tests: the kernels' text, and where a loop of it starts and
ends (by brace matching)."""

from __future__ import annotations


def kernel(text: str) -> str:
    """The kernels of generated source: from the first ``extern "C" __global__`` on."""
    return text[text.index('extern "C" __global__'):]


def loop_span(text: str, var: str) -> tuple[int, int]:
    """Where the first ``for (int var = 0; ...) { ... }`` of ``text`` starts, and where it ends
    (just after its closing brace)."""
    start = text.index(f"for (int {var} = 0;")
    depth = 0
    for at in range(text.index("{", start), len(text)):
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 0:
            return start, at + 1
    raise AssertionError("unbalanced braces")


def loop_body(text: str, var: str = "k") -> str:
    """The body of the kernels' first ``for (int var ...)`` loop, between its braces."""
    body = kernel(text)
    start, end = loop_span(body, var)
    return body[body.index("{", start) + 1:end - 1]
