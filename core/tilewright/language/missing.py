"""What a kernel that asks the language for a name it lacks is told: the dialect that has it
(``T.ptx_wait_group`` is the CUDA dialect's) or the close names (a misspelling). A TileLang
port meets these first; Python's own message named neither."""

from __future__ import annotations

import difflib
import functools
import importlib
import threading

from ..log import get_logger
from ..plugin import get_manager

_log = get_logger("language")


_asking = threading.local()  # a dialect importing a missing name while it is asked


def _dialects() -> tuple:
    """``(extension, module)`` of every installed dialect that imports (asked once, on the
    first missing name: it imports the plugins that declare dialects); none while asking,
    for a plugin's import that probes the language for a name it lacks."""
    if getattr(_asking, "active", False):
        return ()
    _asking.active = True
    try:
        return _imported_dialects()
    finally:
        _asking.active = False


@functools.cache
def _imported_dialects() -> tuple:
    found = []
    for extension in get_manager().collect("tilewright_language_extensions"):
        try:
            found.append((extension, importlib.import_module(extension.module)))
        except Exception as exc:  # noqa: BLE001 - a broken dialect must not hide the hint
            _log.warning("dialect %s (%s) did not import: %s", extension.name,
                         extension.module, exc)
    return tuple(found)


def missing_name(name: str, public) -> str:
    """The message for ``T.<name>``, absent from the language whose names are ``public``."""
    message = f"tilewright.language has no T.{name}"
    try:
        owners = [(ext, module) for ext, module in _dialects() if hasattr(module, name)]
    except Exception as exc:  # noqa: BLE001 - hasattr(T, name) must stay an AttributeError
        _log.warning("the dialects could not be asked for T.%s: %s", name, exc)
        owners = []
    if owners:
        where = "; ".join(f"the {ext.name} dialect has it (import {ext.module} as T; it "
                          f"compiles for {', '.join(ext.backends)})" for ext, _ in owners)
        return f"{message}: {where}"
    close = difflib.get_close_matches(name, list(public), n=3)
    if close:
        return f"{message}; did you mean {', '.join(f'T.{c}' for c in close)}?"
    return (f"{message}; docs/porting-from-tilelang.md lists the TileLang names tilewright "
            "provides elsewhere or not at all")
