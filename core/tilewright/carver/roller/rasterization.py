"""Rasterization plans: the order in which a kernel walks its grid of output tiles, so that
neighbouring blocks share input tiles in the L2 cache (TileLang's ``carver.roller``
classes). A kernel applies a plan with ``T.use_swizzle(panel_size=plan.panel_width)``."""

from __future__ import annotations

from ...errors import ConfigError


class Rasterization:
    """A plan; ``panel_width`` is the number of tiles one panel spans (None: no panels)."""

    def __init__(self, panel_width: int | None = None) -> None:
        if panel_width is not None and (not isinstance(panel_width, int) or panel_width < 1):
            raise ConfigError(f"a rasterization panel width must be a positive integer, got "
                              f"{panel_width!r}")
        self._panel_width = panel_width

    @property
    def panel_width(self) -> int:
        if self._panel_width is None:
            raise ConfigError(f"{self!r} has no panel width")
        return self._panel_width

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._panel_width == self._panel_width

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._panel_width))


class NoRasterization(Rasterization):
    """The grid in its natural order."""

    def __init__(self) -> None:
        super().__init__(None)

    def __repr__(self) -> str:
        return "<NoRasterization>"


class Rasterization2DRow(Rasterization):
    """Row-major panels ``panel_width`` tiles tall."""

    def __init__(self, panel_width: int = 4) -> None:
        super().__init__(panel_width)

    def __repr__(self) -> str:
        return f"<Rasterization2DRow({self.panel_width})>"


class Rasterization2DColumn(Rasterization):
    """Column-major panels ``panel_width`` tiles wide."""

    def __init__(self, panel_width: int = 4) -> None:
        super().__init__(panel_width)

    def __repr__(self) -> str:
        return f"<Rasterization2DColumn({self.panel_width})>"
