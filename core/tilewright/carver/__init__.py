"""The tile-shape recommender: feasible tile shapes for an architecture, scored, as configs
that ``autotune`` accepts."""

from .matmul import DEFAULT_KEYS, Hint, MatmulTemplate

__all__ = ["DEFAULT_KEYS", "Hint", "MatmulTemplate"]
