"""tilewright's own log messages: the ``tilewright`` logger, its level from
``TILEWRIGHT_LOG_LEVEL`` (DEBUG, INFO, WARNING — the default —, ERROR, or a number).

TVM logs through its own C++ logger: its ``TVM_LOG_LEVEL`` and ``TVM_LOG_DEBUG`` variables are
passed to it untouched (tilewright never sets them); ``tilewright doctor`` shows both.
"""

from __future__ import annotations

import logging
import os

ENV = "TILEWRIGHT_LOG_LEVEL"
TVM_ENVS = ("TVM_LOG_LEVEL", "TVM_LOG_DEBUG")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_level(value: str | None) -> int:
    """A logging level from the environment value; an unknown name is a ValueError that lists
    the valid ones."""
    if value is None or not value.strip():
        return logging.WARNING
    text = value.strip().upper()
    if text.isdigit():
        return int(text)
    if text == "WARN":
        text = "WARNING"
    if text not in _LEVELS:
        raise ValueError(f"{ENV}={value!r} is not a log level; use one of "
                         f"{', '.join(_LEVELS)} or a number")
    return getattr(logging, text)


def get_logger(name: str = "") -> logging.Logger:
    """The ``tilewright`` logger or one of its children (``tilewright.<name>``)."""
    return logging.getLogger(f"tilewright.{name}" if name else "tilewright")


def configure(value: str | None = None) -> logging.Logger:
    """Set the ``tilewright`` logger's level (from ``TILEWRIGHT_LOG_LEVEL`` by default) and give
    it a stderr handler when the level is below WARNING and none is installed."""
    logger = get_logger()
    try:
        level = parse_level(os.environ.get(ENV) if value is None else value)
    except ValueError as exc:
        logging.getLogger("tilewright").warning("%s; using WARNING", exc)
        level = logging.WARNING
    logger.setLevel(level)
    if level < logging.WARNING and not any(getattr(h, "_tilewright", False)
                                           for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[tilewright %(levelname)s %(name)s] %(message)s"))
        handler._tilewright = True
        logger.addHandler(handler)
    return logger


def describe() -> dict:
    """What ``tilewright doctor`` prints about logging."""
    return {
        "tilewright": {"env": ENV, "value": os.environ.get(ENV, ""),
                       "level": logging.getLevelName(get_logger().getEffectiveLevel()),
                       "help": "our own messages (plugins, cache, debug tools): DEBUG, INFO, "
                               "WARNING (default), ERROR"},
        "tvm": {name: os.environ.get(name, "") for name in TVM_ENVS} | {
            "help": "passed to TVM untouched: TVM_LOG_LEVEL sets its runtime level; "
                    "TVM_LOG_DEBUG=<file>=<level>,... enables DLOG/VLOG only in TVM builds "
                    "compiled with TVM_LOG_DEBUG (release wheels drop them)"},
    }


def set_log_level(level) -> logging.Logger:
    """TileLang's ``set_log_level``: ``level`` is a name ("INFO") or a number
    (``logging.INFO``)."""
    return configure(str(level))
