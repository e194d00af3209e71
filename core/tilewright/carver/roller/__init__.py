"""TileLang's ``carver.roller`` layout: the rasterization plans that a recommended tile
shape (:class:`tilewright.carver.Hint`) carries."""

from .rasterization import (
    NoRasterization,
    Rasterization,
    Rasterization2DColumn,
    Rasterization2DRow,
)

__all__ = ["NoRasterization", "Rasterization", "Rasterization2DColumn", "Rasterization2DRow"]
