"""``pass_configs``: validated against the keys the core and the loaded plugins declare.

A key may also be spelled as TileLang spells it (``"tl.enable_dump_ir"``) when its declaration
names the TileLang member; :data:`NAMES` (``tilewright.PassConfigKey``) gives our key for a
TileLang member name (``TL_ENABLE_DUMP_IR`` -> ``"tw.dump_ir"``)."""

from __future__ import annotations

import contextlib
import difflib
import logging

from ..errors import ConfigError
from .manager import get_manager
from .tilelang_keys import fallback_keys
from .types import PassConfigKey

_log = logging.getLogger(__name__)

CORE_KEYS = (
    PassConfigKey("tw.disable_cache", bool, False, "compile even when the disk cache has it"),
    PassConfigKey("tw.bounds_check", bool, False,
                  "check every element access against its buffer's shape while the kernel "
                  "runs (T.device_assert before each access not provably in bounds), on every "
                  "backend; for debugging"),
    PassConfigKey("tw.disable_safe_memory", bool, False,
                  "leave element accesses of global tensors that may leave them unguarded "
                  "(by default a load outside reads 0 and a store outside is not made, as "
                  "TileLang's safe-memory legalisation)",
                  tilelang="TL_DISABLE_SAFE_MEMORY_ACCESS",
                  tilelang_value="tl.disable_safe_memory_legalize"),
    PassConfigKey("tw.disable_vectorize", bool, False, "do not vectorise T.Parallel loops",
                  tilelang="TIR_DISABLE_VECTORIZE", tilelang_value="tirx.disable_vectorize"),
    PassConfigKey("tw.dump_ir", bool, False, "print the IR after every pass",
                  tilelang="TL_ENABLE_DUMP_IR", tilelang_value="tl.enable_dump_ir"),
    PassConfigKey("tw.dump_ir_dir", str, "",
                  "write the IR after every pass to NN_<phase>_<pass>.tir files in this folder",
                  tilelang="TL_DUMP_IR_DIR", tilelang_value="tl.dump_ir_path"),
    PassConfigKey("tw.pass_timing", bool, False,
                  "print the compile time of every pass and phase when the compilation ends",
                  tilelang="TL_PASS_PROFILE", tilelang_value="tl.pass_profile"),
    PassConfigKey("tw.layout_visualization_enable", bool, False,
                  "print every fragment layout of the kernel ('<buf> inferred layout: ...')",
                  tilelang="TL_LAYOUT_VISUALIZATION_ENABLE",
                  tilelang_value="tl.layout_visualization_enable"),
    PassConfigKey("tw.layout_visualization_formats", str, "txt",
                  "comma-separated outputs of the layout views: txt, png, svg, pdf",
                  tilelang="TL_LAYOUT_VISUALIZATION_FORMATS",
                  tilelang_value="tl.layout_visualization_formats"),
    PassConfigKey("tw.layout_visualization_dir", str, "./tmp/layout_visualization",
                  "folder for the png / svg / pdf layout pictures"),
    PassConfigKey("tw.enable_fast_math", bool, None,
                  "fast approximations of exp, log, division ... (unset: the backend's "
                  "default; see fast_math())",
                  tilelang="TL_ENABLE_FAST_MATH", tilelang_value="tl.enable_fast_math"),
    PassConfigKey("tw.disable_fast_math", bool, None,
                  "the opposite of tw.enable_fast_math (TileLang's older spelling)",
                  tilelang="TL_DISABLE_FAST_MATH", tilelang_value="tl.disable_fast_math"),
)

_CORE_KEYS = {k.name: k for k in CORE_KEYS}
_CORE_VALUES = frozenset(k.tilelang_value for k in CORE_KEYS if k.tilelang_value)

DEBUG_KEYS = ("tw.dump_ir", "tw.dump_ir_dir", "tw.pass_timing", "tw.layout_visualization_enable")


def debug_requested(configs: dict) -> bool:
    """Whether ``configs`` switch on a debug tool that must watch the compilation."""
    return any(configs.get(key) for key in DEBUG_KEYS)


def fast_math(configs: dict) -> bool | None:
    """Whether validated ``configs`` ask for fast math (True), for precise math (False), or
    leave it to the backend (None). Asking both ways is a ConfigError."""
    enable, disable = configs.get("tw.enable_fast_math"), configs.get("tw.disable_fast_math")
    if enable is not None and disable is not None and enable == disable:
        raise ConfigError(f"pass_configs set TL_ENABLE_FAST_MATH={enable} and "
                          f"TL_DISABLE_FAST_MATH={disable}; keep one")
    return enable if enable is not None else None if disable is None else not disable


# the last answer of known_keys: [manager, its plugins then, the keys]; every compilation asks
# twice, and collecting calls each plugin's hook on a thread of its own
_KNOWN: list = [None, None, {}]


def known_keys() -> dict[str, PassConfigKey]:
    """Every key: the core's, the loaded plugins', then TileLang's remaining members
    (:mod:`.tilelang_keys`) under the backend they belong to. Collected again when the
    process's manager or its plugins change."""
    manager = get_manager().load()
    plugins = tuple((name, r.status, id(r.module)) for name, r in manager.records.items())
    if _KNOWN[0] is manager and _KNOWN[1] == plugins:
        return dict(_KNOWN[2])
    keys = {k.name: k for k in CORE_KEYS}
    for key in manager.collect("tilewright_pass_config_keys"):
        keys.setdefault(key.name, key)
    declared = {k.tilelang for k in keys.values() if k.tilelang}
    for key in fallback_keys(declared):
        keys.setdefault(key.name, key)
    _KNOWN[:] = [manager, plugins, keys]
    return dict(keys)


_NOTED: set = set()
_QUIET = [False]  # within quiet_ignored(): note_ignored logs nothing


@contextlib.contextmanager
def quiet_ignored():
    """Within: :func:`note_ignored` logs nothing (an autotuning step's child process, whose
    tuning process logs each key once for the whole search)."""
    before, _QUIET[0] = _QUIET[0], True
    try:
        yield
    finally:
        _QUIET[0] = before


def note_ignored(configs: dict, backend: str) -> None:
    """Log once per key and backend in this process that a key of another backend (or of
    TileLang's own compiler) has no effect on ``backend``; nothing within
    :func:`quiet_ignored`."""
    if _QUIET[0] or not configs or _core_keys_for(configs):
        return  # the core's keys have an effect on every backend
    keys = known_keys()
    for name in configs:
        key = keys.get(name)
        if key is None or key.owner in ("core", backend) or (name, backend) in _NOTED:
            continue
        _NOTED.add((name, backend))
        spelled = f"{key.tilelang} ({name})" if key.tilelang else name
        where = "TileLang's own compiler" if key.owner == "tilelang" else \
            f"backend '{key.owner}'"
        _log.warning("pass config %s belongs to %s and has no effect on backend '%s'",
                     spelled, where, backend)


def tilelang_keys(keys: dict[str, PassConfigKey] | None = None) -> dict[str, PassConfigKey]:
    """TileLang member name -> the key declaring it (the first declaration wins)."""
    out: dict[str, PassConfigKey] = {}
    for key in (known_keys() if keys is None else keys).values():
        if key.tilelang:
            out.setdefault(key.tilelang, key)
    return out


def _close(name: str, candidates, cutoff: float = 0.5) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=cutoff)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


_TL_MEMBER, _TL_VALUE = ("TL_", "TIR_"), ("tl.", "tir.", "tirx.")


def _unknown_hint(name: str, candidates, tilelang) -> str:
    """Why ``name`` is unknown: a close match, or (for a TileLang name with no close TileLang
    match) that neither the core nor an installed backend declares it (the core names no
    backend: a backend not installed here may)."""
    hint = ""
    if name.startswith(_TL_MEMBER + _TL_VALUE):
        known = sorted(tilelang)
        hint = _close(name, known, 0.8) or (
            "; neither the core nor an installed backend declares this TileLang key (a "
            "backend plugin may: see 'tilewright backends'; TileLang names known here: "
            f"{', '.join(known)})")
    return hint or _close(name, candidates)


def _core_keys_for(written) -> dict[str, PassConfigKey] | None:
    """The core's keys when they name every key ``written`` (by our name or TileLang's value):
    validating those needs no plugin's keys, and collecting them loads every plugin that
    declares some. None otherwise."""
    return dict(_CORE_KEYS) if all(w in _CORE_KEYS or w in _CORE_VALUES for w in written) \
        else None


def validate(pass_configs: dict | None) -> dict:
    """A sorted copy of ``pass_configs`` under our key names; an unknown key, a wrong type or
    one key given under two spellings with different values is a ConfigError."""
    if not pass_configs:
        return {}  # without collecting every plugin's keys (which loads every plugin)
    keys = _core_keys_for(pass_configs) or known_keys()
    aliases = {k.tilelang_value: k.name for k in tilelang_keys(keys).values()}
    configs: dict = {}
    spelled: dict = {}
    for written, value in (pass_configs or {}).items():
        name = aliases.get(written, written)
        key = keys.get(name)
        if key is None:
            hint = _unknown_hint(str(written), [*keys, *aliases], aliases)
            raise ConfigError(f"unknown pass_configs key {written!r}{hint}")
        if value is not None and (key.type is bool and not isinstance(value, bool) or
                                  key.type is not bool and not isinstance(value, key.type)):
            raise ConfigError(f"pass_configs[{written!r}] must be {key.type.__name__}, got "
                              f"{value!r}")
        name = str(name)
        if name in configs and configs[name] != value:
            raise ConfigError(f"pass_configs sets {name!r} twice with different values: "
                              f"{spelled[name]!r}: {configs[name]!r} and {written!r}: "
                              f"{value!r}; keep one")
        configs[name], spelled[name] = value, str(written)
    return dict(sorted(configs.items()))


class KeyName(str):
    """A key string from :data:`NAMES`; ``.value`` is the plain string (as on TileLang's enum
    members) and ``.name`` the attribute it was read as."""

    name: str

    @property
    def value(self) -> str:
        return str(self)


def _attribute_names() -> dict[str, str]:
    """Attribute -> key: TileLang member names, then our names in upper case with ``.`` and
    ``-`` as ``_`` (``tw.dump_ir`` -> ``TW_DUMP_IR``)."""
    keys = known_keys()
    names = {member: key.name for member, key in tilelang_keys(keys).items()}
    for name in keys:
        names.setdefault(name.upper().replace(".", "_").replace("-", "_"), name)
    return names


class _Names:
    """``tilewright.PassConfigKey``: ``tilewright.PassConfigKey.TL_ENABLE_DUMP_IR`` is
    ``"tw.dump_ir"``, the key of the same switch here; the names come from the keys the core
    and the loaded plugins declare, so ``dir()`` lists what this installation understands."""

    def __getattr__(self, attr: str) -> KeyName:
        if attr.startswith("__"):
            raise AttributeError(attr)
        names = _attribute_names()
        if attr not in names:
            hint = _unknown_hint(attr, names, [n for n in names if n.startswith(_TL_MEMBER)])
            raise AttributeError(f"tilewright.PassConfigKey has no {attr!r}{hint}")
        key = KeyName(names[attr])
        key.name = attr
        return key

    def __dir__(self) -> list[str]:
        return sorted(_attribute_names())

    def __repr__(self) -> str:
        return "<tilewright.PassConfigKey: TileLang pass-config names -> tilewright keys>"


NAMES = _Names()
