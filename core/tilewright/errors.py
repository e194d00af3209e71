"""Errors that tilewright raises to kernel authors and backend authors.

Every error about a kernel names the user's file and line: the frontend records where each
statement came from, and lowering rules raise through :func:`kernel_error` with that location.
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLocation:
    """A position in the user's source: file and 1-based line."""

    filename: str
    line: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}"

    def excerpt(self) -> str:
        text = linecache.getline(self.filename, self.line).rstrip()
        return f"    {self.line} | {text.strip()}" if text else ""


class TilewrightError(Exception):
    """Base class of every error tilewright raises on purpose."""


class KernelError(TilewrightError):
    """A problem in a kernel, reported at the user's source line."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        self.message = message
        self.location = location
        super().__init__(self._format())

    def _format(self) -> str:
        if self.location is None:
            return self.message
        excerpt = self.location.excerpt()
        tail = f"\n{excerpt}" if excerpt else ""
        return f"{self.location}: {self.message}{tail}"


class KernelValueError(KernelError, ValueError):
    """A tile op got operands of the wrong shape (a ValueError, as in TileLang)."""


class KernelTypeError(KernelError, TypeError):
    """An operand of the wrong kind or dtype (a TypeError, as in TileLang): ``T.__exp`` of an
    integer, ``T.__ldg`` of something that is no buffer element."""


class KernelFileNotFoundError(KernelError, FileNotFoundError):
    """A kernel names a file that does not exist (a FileNotFoundError, as in TileLang): the
    CUDA source of ``T.CUDASourceCodeKernel``."""


class UnsupportedOpError(KernelError):
    """The chosen backend cannot lower an op the kernel uses."""


class KernelIndexError(KernelError, IndexError):
    """A running kernel read or wrote an element outside its tensor or tile (the interpreter
    reports it at the user's line; the pass config ``tw.bounds_check`` on every backend), or a
    kernel names a lane a vector value does not have (``T.extract_lane``)."""


class PluginError(TilewrightError):
    """A plugin broke the contract (bad declaration, unknown hook, version mismatch)."""


class TargetError(TilewrightError):
    """A target string names no backend, or more than one."""


class ConfigError(TilewrightError):
    """An unknown or invalid pass-config key or option."""


class ArgumentError(TilewrightError, TypeError):
    """A kernel was called with arguments that do not match its signature."""


class AssumptionError(TilewrightError, RuntimeError):
    """A kernel's ``T.assume`` over its arguments' values and shapes does not hold for a
    call."""


# the folders whose frames are not the user's: the core's, and those mark_internal adds
_INTERNAL_DIRS = [_PKG_DIR + os.sep]


def mark_internal(directory: str) -> None:
    """Frames of files under ``directory`` (a language dialect's or a backend's package) are
    not the user's: :func:`user_location` passes over them, so an error raised or a statement
    built inside the dialect names the kernel's line that called it."""
    path = os.path.abspath(directory) + os.sep
    if path not in _INTERNAL_DIRS:
        _INTERNAL_DIRS.append(path)


def user_location(skip_internal: bool = True) -> SourceLocation | None:
    """The innermost stack frame outside the tilewright package (and the packages
    :func:`mark_internal` names) and TVM: the user's line."""
    frame = sys._getframe(1)
    internal_dirs = tuple(_INTERNAL_DIRS)
    while frame is not None:
        filename = frame.f_code.co_filename
        internal = filename.startswith(internal_dirs) or "/tvm/" in filename or \
            "/tvm_ffi/" in filename
        if not (skip_internal and internal) and not filename.startswith("<"):
            return SourceLocation(filename, frame.f_lineno)
        frame = frame.f_back
    return None


def bind_call(signature, label: str, args, kwargs):
    """``signature.bind(*args, **kwargs)``; arguments it does not take are a
    :class:`KernelTypeError` at the user's line naming ``label`` and the signature (Python's
    own TypeError names no line of the kernel)."""
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise KernelTypeError(f"{label}{signature}: {exc}", user_location()) from None


def kernel_error(message: str, location: SourceLocation | None = None) -> KernelError:
    """A :class:`KernelError` at ``location`` or, when none is known, at the user's line."""
    return KernelError(message, location if location is not None else user_location())


def span_location(span) -> SourceLocation | None:
    """Turn a TVM ``Span`` recorded by the frontend back into a :class:`SourceLocation`."""
    if span is None:
        return None
    try:
        return SourceLocation(str(span.source_name.name), int(span.line))
    except (AttributeError, TypeError, ValueError):
        return None
