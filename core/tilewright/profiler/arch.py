"""Architecture models by name: those plugins register through ``tilewright_arch_models``.

Names are matched without case, spaces, dashes or underscores (``"RTX 4090"`` finds
``rtx4090``). An :class:`~tilewright.plugin.ArchModel` object may be passed wherever a name is
accepted.
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from ..plugin import ArchModel, get_manager


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def arch_models() -> dict[str, ArchModel]:
    """Every registered architecture model by name (the first registration of a name wins)."""
    found: dict[str, ArchModel] = {}
    for model in get_manager().collect("tilewright_arch_models"):
        if isinstance(model, ArchModel):
            found.setdefault(model.name, model)
    return found


def get_arch(arch) -> ArchModel:
    """``arch`` itself when it is an :class:`ArchModel`, else the registered model so named."""
    if isinstance(arch, ArchModel):
        return arch
    if not isinstance(arch, str):
        raise ConfigError(f"an architecture is an ArchModel or a name, got "
                          f"{type(arch).__name__}")
    known = arch_models()
    by_norm = {_norm(n): m for n, m in known.items()}
    model = by_norm.get(_norm(arch))
    if model is None:
        close = difflib.get_close_matches(_norm(arch), list(by_norm), n=3)
        hint = f"; did you mean {', '.join(by_norm[c].name for c in close)}?" if close else ""
        raise ConfigError(f"unknown architecture {arch!r}; registered models: "
                          f"{', '.join(sorted(known)) or 'none'}{hint} (GPU and NPU models come "
                          "from their backend plugins; an ArchModel object can be passed "
                          "directly)")
    return model
