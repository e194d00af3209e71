"""How dialect calls find the user's line and emit one IR statement (the core's
:class:`~tilewright.language.extension.DialectSupport` for this package)."""

from __future__ import annotations

from tilewright.language.extension import DialectSupport

_D = DialectSupport(__file__)
location, error, span, emit = _D.location, _D.error, _D.span, _D.emit
