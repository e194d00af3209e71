"""``pass_configs``: validated against the keys the core and the loaded plugins declare."""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from ..plugin import PassConfigKey, get_manager

CORE_KEYS = (
    PassConfigKey("tw.disable_cache", bool, False, "compile even when the disk cache has it"),
    PassConfigKey("tw.disable_vectorize", bool, False, "do not vectorise T.Parallel loops"),
    PassConfigKey("tw.dump_ir", bool, False, "print the IR after every pass"),
    PassConfigKey("tw.dump_ir_dir", str, "",
                  "write the IR after every pass to NN_<phase>_<pass>.tir files in this folder"),
    PassConfigKey("tw.pass_timing", bool, False,
                  "print the compile time of every pass and phase when the compilation ends"),
    PassConfigKey("tw.layout_visualization_enable", bool, False,
                  "print every fragment layout of the kernel ('<buf> inferred layout: ...')"),
    PassConfigKey("tw.layout_visualization_formats", str, "txt",
                  "comma-separated outputs of the layout views: txt, png, svg, pdf"),
    PassConfigKey("tw.layout_visualization_dir", str, "./tmp/layout_visualization",
                  "folder for the png / svg / pdf layout pictures"),
)

DEBUG_KEYS = ("tw.dump_ir", "tw.dump_ir_dir", "tw.pass_timing", "tw.layout_visualization_enable")


def debug_requested(configs: dict) -> bool:
    """Whether ``configs`` switch on a debug tool that must watch the compilation."""
    return any(configs.get(key) for key in DEBUG_KEYS)


def known_keys() -> dict[str, PassConfigKey]:
    keys = {k.name: k for k in CORE_KEYS}
    for key in get_manager().collect("tilewright_pass_config_keys"):
        keys.setdefault(key.name, key)
    return keys


def validate(pass_configs: dict | None) -> dict:
    """A sorted copy of ``pass_configs``; an unknown key or a wrong type is a ConfigError."""
    configs = dict(pass_configs or {})
    keys = known_keys()
    for name, value in configs.items():
        key = keys.get(name)
        if key is None:
            close = difflib.get_close_matches(name, list(keys), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"unknown pass_configs key {name!r}{hint}")
        if key.type is bool and not isinstance(value, bool) or \
                key.type is not bool and not isinstance(value, key.type):
            raise ConfigError(f"pass_configs[{name!r}] must be {key.type.__name__}, got "
                              f"{value!r}")
    return dict(sorted(configs.items()))
