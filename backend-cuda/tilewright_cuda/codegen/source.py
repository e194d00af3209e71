"""Where the CUDA source TVM prints is edited as text, each edit with the reason TVM leaves no
other way. Every other part of codegen works on the IR; this module is the only place that
reads or changes printed source.

- **Our device headers** (``include/*.h``) go between TVM's prelude (which defines ``half``,
  ``nv_bfloat16`` and the integer types they use) and the first kernel: TVM's CUDA code
  generator has no hook for extra device code.
- **The ``<cuda/std/type_traits>`` include** TVM's NVRTC prelude adds (to alias a few traits
  into ``std``) is dropped when nothing uses them: it is most of NVRTC's front-end time for a
  kernel, and TVM has no option to leave it out.
- **TMA descriptors** are appended to the kernel's parameter list as ``const
  __grid_constant__ tw_tensormap`` parameters: TVM prints such parameters only for the
  descriptors of its own tile primitives, which the CUDA dialect does not use.
- **``__cluster_dims__``** goes before the kernel's name: TVM's CUDA printer has no cluster
  attribute (clusters reach only its LLVM/NVPTX path).
- **The user's source** (``T.CUDASourceCodeKernel``) is read for its ``__global__``
  functions (the entry must be one, named unmangled), and ``__cluster_dims__`` is added to the
  entry's declarations when the launch asks for clusters: the source is the user's text, which
  no IR describes.
- **The float8 types** (``cuda_fp8.h`` and TVM's ``fp8_e4_t`` & co.) are declared for every
  architecture, not only ``__CUDA_ARCH__ >= 890``: ``cuda_fp8.h`` converts in software below
  sm_89, and the alternative, TVM's FP8 legalisation, decodes a negative float8 wrongly in
  the C it prints (``(A << 1) >> 4`` of a ``uchar`` is computed in ``int``, so the sign bit
  reaches the exponent: -14.0 became -3.7e6 on sm_80).
"""

from __future__ import annotations

import re

KERNEL = 'extern "C" __global__'
_TRAITS = re.compile(r"\n\s*#include <cuda/std/type_traits>\n\s*namespace std \{\n"
                     r"((?:\s*using cuda::std::\w+;\n)+)\s*\}\n")


_FP8_GUARD = re.compile(r"#if !defined\(__CUDA_ARCH__\) \|\| \(__CUDA_ARCH__ >= 890\)\n"
                        r"(#include <cuda_fp8.h>\n.*?)#endif // __CUDA_ARCH__ >= 890\n", re.S)


def float8_on_every_arch(text: str) -> str:
    """``text`` with TVM's float8 declarations outside their ``__CUDA_ARCH__ >= 890`` guard."""
    return _FP8_GUARD.sub(lambda m: m.group(1), text)


def insert_headers(text: str, headers: str) -> str:
    """``headers`` placed before the first kernel of ``text``."""
    at = text.find(KERNEL)
    return text[:at] + headers + "\n" + text[at:]


def drop_unused_type_traits(text: str) -> str:
    """``text`` without TVM's ``<cuda/std/type_traits>`` include and its ``std`` aliases
    when nothing else in it uses the aliased names."""
    match = _TRAITS.search(text)
    if match is None:
        return text
    names = re.findall(r"using cuda::std::(\w+);", match.group(1))
    rest = text[:match.start()] + text[match.end():]
    if names and re.search(rf"\b(?:{'|'.join(names)})\b", rest):  # one scan for all
        return text
    return text[:match.start()] + "\n" + text[match.end():]


def split_kernel(text: str) -> tuple[str, str]:
    """(everything before the first kernel declaration, the rest)."""
    at = text.find(KERNEL)
    return (text, "") if at < 0 else (text[:at], text[at:])


def add_params(kernel: str, entry: str, extra: str) -> str:
    """``extra`` appended to the parameter list of every declaration of the kernel ``entry``
    (TVM writes a prototype, then the definition); parameters are plain types, so the first
    ``)`` closes the list."""
    opening = f" {entry}("
    out, at = [], 0
    while (start := kernel.find(opening, at)) >= 0:
        line = kernel[kernel.rfind("\n", 0, start) + 1:start]
        close = kernel.find(")", start)
        if "__global__" in line:
            inner = kernel[start + len(opening):close].strip()
            out.append(kernel[at:close] + (", " if inner else "") + extra)
        else:
            out.append(kernel[at:close])
        at = close
    out.append(kernel[at:])
    return "".join(out)


def tensormap_params(kernel: str, entry: str, names: list[str]) -> str:
    """The descriptors ``names`` as the kernel's last parameters."""
    return add_params(kernel, entry, ", ".join(
        f"const __grid_constant__ tw_tensormap {name}" for name in names))


def cluster_dims(kernel: str, entry: str, dims: list[int]) -> str:
    """``__cluster_dims__(x, y, z)`` on the declarations of the kernel ``entry``."""
    attr = f"{KERNEL} void __cluster_dims__({dims[0]}, {dims[1]}, {dims[2]}) "
    return "".join(line.replace(f"{KERNEL} void ", attr) if f" {entry}(" in line else line
                   for line in kernel.splitlines(keepends=True))


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ATTRS = r"(?:(?:__launch_bounds__|__cluster_dims__)\s*\([^)]*\)\s*)*"
_GLOBAL = re.compile(rf"\b__global__\s+{_ATTRS}void\s+{_ATTRS}(\w+)\s*\(")
_EXTERN_C_BLOCK = re.compile(r'\bextern\s+"C"\s*\{')


def _code(text: str) -> str:
    """``text`` with its comments blanked (newlines kept), so offsets stay those of ``text``."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def global_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, start of the declaration, start of the name) of each ``__global__`` function
    declaration of the user's CUDA ``text``, in order (a prototype and a definition both)."""
    return [(m.group(1), m.start(), m.start(1)) for m in _GLOBAL.finditer(_code(text))]


def entries(text: str) -> list[str]:
    """The names of the ``__global__`` functions of ``text``, each once, in order."""
    return list(dict.fromkeys(name for name, _, _ in global_functions(text)))


def is_extern_c(text: str, entry: str) -> bool:
    """Whether the ``__global__`` function ``entry`` of ``text`` is declared ``extern "C"``
    (its name unmangled, which the launcher looks up): on its declaration, or inside an
    ``extern "C" { ... }`` block."""
    code = _code(text)
    for name, start, _ in global_functions(text):
        if name != entry:
            continue
        statement = code[max(code.rfind(";", 0, start), code.rfind("}", 0, start)) + 1:start]
        if 'extern "C"' in " ".join(statement.split()):
            return True
        for block in _EXTERN_C_BLOCK.finditer(code, 0, start):
            inner = code[block.end():start]
            if inner.count("{") >= inner.count("}"):
                return True
    return False


def entry_cluster_dims(text: str, entry: str, dims: list[int]) -> str:
    """``text`` with ``__cluster_dims__(x, y, z)`` before the name of each ``__global__``
    declaration of ``entry``."""
    attr = f"__cluster_dims__({dims[0]}, {dims[1]}, {dims[2]}) "
    out, at = [], 0
    for name, _, where in global_functions(text):
        if name == entry:
            out += [text[at:where], attr]
            at = where
    return "".join(out) + text[at:]


def declares_cluster_dims(text: str, entry: str) -> bool:
    """Whether a declaration of ``entry`` in ``text`` has ``__cluster_dims__`` already."""
    code = _code(text)
    return any("__cluster_dims__" in code[start:where]
               for name, start, where in global_functions(text) if name == entry)
