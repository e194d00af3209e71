"""Compile events for debug tools. With no subscriber, the engine installs no instrument and
emitting costs nothing."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

_listeners: list = []
_ids = itertools.count(1)


@dataclass
class Event:
    kind: str  # session_start | pass_start | pass_end | pass_error | codegen | build | session_end
    session: int
    data: dict = field(default_factory=dict)


def subscribe(listener) -> None:
    """Call ``listener(event)`` for every compile event until :func:`unsubscribe`."""
    if listener not in _listeners:
        _listeners.append(listener)


def unsubscribe(listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def active() -> bool:
    return bool(_listeners)


def new_session() -> int:
    return next(_ids)


def emit(kind: str, session: int, **data: Any) -> Event | None:
    """Deliver an event; returns it (listeners may answer in ``data``, for example a
    ``codegen`` listener setting ``patched_text``), or None when nobody listens."""
    if not _listeners:
        return None
    event = Event(kind, session, data)
    for listener in list(_listeners):
        listener(event)
    return event
