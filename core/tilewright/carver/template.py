"""TileLang's ``carver.template`` layout: the tile-shape recommender's templates."""

from .matmul import MatmulTemplate

__all__ = ["MatmulTemplate"]
