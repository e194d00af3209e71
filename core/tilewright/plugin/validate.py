"""What the plugin manager checks in what it reads: the ``TILEWRIGHT_PLUGINS`` selection and
the values plugin hooks return. Each check raises :class:`~tilewright.errors.PluginError` with
one sentence naming the hook and what was wrong."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ..errors import PluginError
from .types import ArchModel, BackendModule, CliTool, LanguageExtension, PassConfigKey, Timer

ENV_SELECT = "TILEWRIGHT_PLUGINS"
# what each list hook returns; tilewright_lowering_rules returns a mapping op -> rule
ITEM_TYPES = {"tilewright_timers": Timer, "tilewright_arch_models": ArchModel,
              "tilewright_pass_config_keys": PassConfigKey,
              "tilewright_language_extensions": LanguageExtension,
              "tilewright_cli_tools": CliTool}


def selection(value: str | None, installed: list[str]) -> tuple[set[str] | None, set[str]]:
    """(only, excluded) from ``TILEWRIGHT_PLUGINS``; ``only`` None means all. A name that is
    not in ``installed`` is an error listing the installed plugins."""
    if value is None or not value.strip():
        return None, set()
    items = [v.strip() for v in value.split(",") if v.strip()]
    if [i.lower() for i in items] in (["none"], ["0"]):
        return set(), set()
    only = {i for i in items if not i.startswith("-")} or None
    excluded = {i[1:] for i in items if i.startswith("-")}
    unknown = sorted(((only or set()) | excluded) - set(installed))
    if unknown:
        close = {c for n in unknown for c in difflib.get_close_matches(n, installed, n=2)}
        hint = f"; did you mean {', '.join(sorted(close))}?" if close else ""
        raise PluginError(f"{ENV_SELECT}={value!r}: no installed plugin is named "
                          f"{', '.join(map(repr, unknown))}; installed plugins: "
                          f"{', '.join(sorted(installed)) or 'none'}{hint} (or 'none')")
    return only, excluded


def backends(result) -> list[BackendModule]:
    """What ``tilewright_backends`` returned: a list of distinct :class:`BackendModule`."""
    if result is None:
        return []
    if not isinstance(result, (list, tuple)):
        raise PluginError(f"tilewright_backends returned {type(result).__name__}, not a "
                          "list of BackendModule")
    for backend in result:
        if not isinstance(backend, BackendModule):
            raise PluginError(f"tilewright_backends returned {type(backend).__name__}, "
                              "not a BackendModule")
    names = [b.name for b in result]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise PluginError(f"tilewright_backends declares backend(s) {repeated} twice")
    return list(result)


def items(hook: str, result) -> list:
    """What another hook returned, as a list: its items, or a mapping's ``(key, value)``
    pairs."""
    if result is None:
        return []
    kind = ITEM_TYPES.get(hook)
    if kind is None:  # tilewright_lowering_rules: op name -> rule
        if not isinstance(result, Mapping) or not all(
                isinstance(k, str) and callable(v) for k, v in result.items()):
            raise PluginError(f"{hook} returned {type(result).__name__}, not a mapping of op "
                              "names to rules")
        return list(result.items())
    if not isinstance(result, (list, tuple)):
        raise PluginError(f"{hook} returned {type(result).__name__}, not a list of "
                          f"{kind.__name__}")
    wrong = [type(item).__name__ for item in result if not isinstance(item, kind)]
    if wrong:
        raise PluginError(f"{hook} returned {', '.join(wrong)} among its items, not "
                          f"{kind.__name__}")
    return list(result)
